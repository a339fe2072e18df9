"""The ctypes mirrors in labkit.lanes agree with the structs in the built objects' BTF."""

import ctypes
import json
import shutil
import subprocess

import pytest

from labkit import bpf, lanes, tc, telemetry
from labkit.control import valve
from labkit.scenario import LANES


def btf_structs(obj_name):
    path = bpf.object_path(obj_name)
    if not path.exists() or not shutil.which("bpftool"):
        pytest.fail(f"{path} and bpftool are needed (make setup)")
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return {t["name"]: t for t in json.loads(out)["types"] if t.get("kind") == "STRUCT"}


@pytest.mark.parametrize("obj_name", ["classifier", "queues", "latency", "valve"])
def test_mirrors_match_btf(obj_name):
    structs = btf_structs(obj_name)
    checked = 0
    for c_name, mirror in {**lanes.MIRRORS, **telemetry.MIRRORS, **valve.MIRRORS}.items():
        if c_name not in structs:
            continue
        btf = structs[c_name]
        assert btf["size"] == ctypes.sizeof(mirror), c_name
        offsets = {m["name"]: m["bits_offset"] // 8 for m in btf["members"]}
        assert offsets == {f: getattr(mirror, f).offset for f, *_ in mirror._fields_}, c_name
        checked += 1
    assert checked >= 1


def test_lane_order_and_class_minors_match_the_header():
    header = (bpf.REPO_ROOT / "bpf/include/labkit.h").read_text()
    for i, lane in enumerate(LANES):
        assert f"LK_LANE_{lane.upper()} = {i}" in header
        assert tc.LANE_CLASS[lane] & 0xFFFF == 0x10 * (i + 1)  # LK_LANE_MINOR
    assert f"#define LK_MAX_RULES {lanes.LK_MAX_RULES}" in header
    assert f"#define LK_HIST_BUCKETS {telemetry.HIST_BUCKETS}" in header
    assert telemetry.EVENT.size == ctypes.sizeof(telemetry.Event)


def test_agents_struct_layouts_match_the_valve_mirrors():
    from labkit.traffic import wire

    assert wire.JOB_PHASE.size == ctypes.sizeof(valve.JobPhase)
    assert wire.VALVE_LANE.size == ctypes.sizeof(valve.ValveLane)
    assert wire.VALVE_CONFIG_BYTES == ctypes.sizeof(valve.ValveConfig)
