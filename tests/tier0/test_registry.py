"""Tier 0: a run's registry file, as its teardown leaves it (the kernel objects: tier 2)."""

from labkit.kernel.registry import Registry


def test_a_teardown_removes_its_record_and_a_save_a_kill_cut_short(tmp_path):
    reg = Registry("r1", tmp_path / "r1.json")
    reg.add("session_dir", path=str(tmp_path / "gone"))
    (tmp_path / "r1.tmp").write_text("")  # kill -9 between opening and writing a save
    reg.teardown()
    assert list(tmp_path.iterdir()) == []
