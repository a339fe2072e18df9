"""Tier 0: a run's registry file, as a run and its teardown leave it (the kernel objects:
tier 2)."""

from labkit.kernel.registry import Registry, read_entries


def test_each_record_is_one_line_read_back_and_a_teardown_removes_the_file(tmp_path):
    reg = Registry("r1", tmp_path / "r1.jsonl")
    reg.add("session_dir", path=str(tmp_path / "gone"))
    reg.add("pin_dir", path=str(tmp_path / "pins"))
    reg.add("session_dir", path=str(tmp_path / "gone"))  # recorded once
    assert len((tmp_path / "r1.jsonl").read_text().splitlines()) == 2
    assert Registry("r1", tmp_path / "r1.jsonl").entries == reg.entries == [
        {"kind": "session_dir", "path": str(tmp_path / "gone")},
        {"kind": "pin_dir", "path": str(tmp_path / "pins")}]
    reg.teardown()
    assert list(tmp_path.iterdir()) == []


def test_a_last_line_a_kill_cut_short_is_left_out(tmp_path):
    path = tmp_path / "r1.jsonl"
    path.write_text('{"kind": "session_dir", "path": "/tmp/a"}\n{"kind": "pin_d')
    assert read_entries(path) == [{"kind": "session_dir", "path": "/tmp/a"}]
