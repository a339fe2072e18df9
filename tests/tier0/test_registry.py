"""Tier 0: a run's registry file, as a run and its teardown leave it (the kernel objects:
tier 2)."""

import json

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


def test_a_registry_reopened_after_a_kill_appends_after_its_last_whole_line(tmp_path):
    """A run killed while it wrote a line, then its registry opened again (``labkit
    clean``, or a benchmark that reuses its run id) and appended to: every line whole."""
    path = tmp_path / "r1.jsonl"
    path.write_text('{"kind": "session_dir", "path": "/tmp/a"}\n{"kind": "pin_d')
    reg = Registry("r1", path)
    reg.add("pin_dir", path="/tmp/pins")
    assert read_entries(path) == reg.entries == [
        {"kind": "session_dir", "path": "/tmp/a"}, {"kind": "pin_dir", "path": "/tmp/pins"}]


def test_a_registry_an_older_labkit_saved_whole_is_read_and_cleaned(tmp_path, monkeypatch):
    from labkit.kernel import registry

    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path)
    old = tmp_path / "r0.json"
    old.write_text(json.dumps({"run_id": "r0", "pid": 1, "entries": [
        {"kind": "session_dir", "path": str(tmp_path / "gone")}]}))
    (left,) = registry.leftover_registries()
    assert left.run_id == "r0" and left.entries == [
        {"kind": "session_dir", "path": str(tmp_path / "gone")}]
    left.teardown()
    assert not old.exists()
