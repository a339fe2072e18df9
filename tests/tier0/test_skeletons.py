"""Every BPF object is declared once (labkit.kernel.skeletons) and every declaration
agrees with its built object's BTF: the objects are opened, never loaded (no root).
A declaration that disagrees is refused with the object, the map and what differs;
a map refuses a value of another type than its declared one."""

import ctypes

import pytest

from labkit.kernel import bpf, skeletons
from labkit.kernel.bpf import MapDecl, ObjectDecl, ProgramDecl
from labkit.model import abi
from tests.conftest import require

BY_NAME = {decl.name: decl for decl in skeletons.OBJECTS}


def built(decl: ObjectDecl) -> ObjectDecl:
    require(decl.path().exists(), f"{decl.path()} is not built (make bpf)")
    return decl


def opened(decl: ObjectDecl) -> tuple[set[str], set[str]]:
    """The maps (libbpf's own .rodata, .bss ... left out) and programs of the built object."""
    obj = bpf.open_file(built(decl).path())
    try:
        maps = {bpf.lib.bpf_map__name(m).decode() for m in bpf.each(obj, "map")}
        programs = {bpf.lib.bpf_program__name(p).decode() for p in bpf.each(obj, "program")}
    finally:
        bpf.lib.bpf_object__close(obj)
    return {m for m in maps if "." not in m}, programs


def test_one_declaration_per_object():
    assert sorted(BY_NAME) == bpf.object_names()
    assert len(BY_NAME) == len(skeletons.OBJECTS)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_declaration_agrees_with_the_objects_btf(name):
    built(BY_NAME[name]).verify()


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_declaration_names_every_map_and_program(name):
    decl = BY_NAME[name]
    maps, programs = opened(decl)
    assert maps == set(decl.map_decls)
    assert programs == set(decl.program_decls)


def test_the_maps_several_objects_share_are_declared_alike():
    seen: dict[str, MapDecl] = {}
    for decl in skeletons.OBJECTS:
        for name, m in decl.map_decls.items():
            assert seen.setdefault(name, m) is m, f"{name} declared twice"


def test_a_wrong_declaration_is_refused_with_what_differs():
    class Maps(bpf.Maps):
        lk_phase = MapDecl(abi.u32, abi.JobState)  # the valve's is a lk_job_phase
        lk_valve = MapDecl(abi.u64, abi.ValveConfig)  # its key is a __u32
        lk_gone = MapDecl()

    class Programs(bpf.Programs):
        lk_valve_egress = ProgramDecl()
        lk_valve_ingress = ProgramDecl()

    wrong = ObjectDecl("valve", Maps, Programs)
    with pytest.raises(bpf.DeclarationError) as refused:
        built(wrong).verify()
    said = str(refused.value)
    assert said.startswith(f"{wrong.path()} does not match its declaration (object valve, ")
    assert "no program lk_valve_ingress" in said and "no map lk_gone" in said
    assert ("map lk_phase: value is struct lk_job_phase (48 bytes) in the object's BTF, "
            "declared JobState (struct lk_job_state, 48 bytes)") in said
    assert ("map lk_valve: key is unsigned int (4 bytes) in the object's BTF, declared u64 "
            "(8 bytes)") in said
    assert "lk_valve_egress" not in said and "lk_config" not in said
    assert isinstance(refused.value, bpf.BpfError)  # what callers of a load catch


def a_map(decl: MapDecl, name: str, key_size: int, value_size: int) -> bpf.Map:
    """A map as a loaded object gives it, without the kernel: only what update checks."""
    m = object.__new__(bpf.Map)
    m.name, m.key_size, m.value_size, m.percpu = name, key_size, value_size, False
    m.key_type, m.value_type = decl.key, decl.value
    return m


def test_a_map_takes_its_declared_types_ints_and_its_own_bytes():
    phase = a_map(skeletons.PhaseH.lk_phase, "lk_phase", 4, ctypes.sizeof(abi.JobPhase))
    value = abi.JobPhase(busy_from_ns=5)
    assert phase._raw("value", value, phase.value_type, phase.value_size) == bytes(value)
    assert phase._raw("key", 3, phase.key_type, 4) == (3).to_bytes(4, "little")
    assert phase._raw("key", abi.u32(3), phase.key_type, 4) == (3).to_bytes(4, "little")
    assert phase._raw("value", bytes(value), phase.value_type, phase.value_size) == bytes(value)
    with pytest.raises(TypeError, match=r"map lk_phase: value is JobState, declared JobPhase "
                                        r"\(struct lk_job_phase, 48 bytes\)"):
        phase._raw("value", abi.JobState(), phase.value_type, phase.value_size)
    with pytest.raises(TypeError, match="map lk_phase: value is an int, declared JobPhase"):
        phase._raw("value", 1, phase.value_type, phase.value_size)
    with pytest.raises(TypeError, match=r"map lk_phase: key is c_ulong, declared u32"):
        phase._raw("key", abi.u64(0), phase.key_type, 4)
    with pytest.raises(ValueError, match="map lk_phase: value is 3 bytes, expected 48"):
        phase._raw("value", b"abc", phase.value_type, phase.value_size)


def test_a_map_reused_for_another_of_other_types_is_refused():
    rules = a_map(skeletons.LanesH.lk_config, "lk_config", 4, ctypes.sizeof(abi.ClassifierConfig))
    skeletons.VALVE.check_reuse("lk_config", rules, skeletons.VALVE.path())
    with pytest.raises(bpf.DeclarationError, match="map lk_phase's value is declared JobPhase "
                                                   r"\(struct lk_job_phase, 48 bytes\), the "
                                                   "map reused for it has ClassifierConfig"):
        skeletons.VALVE.check_reuse("lk_phase", rules, skeletons.VALVE.path())
    with pytest.raises(bpf.DeclarationError, match="reuses map lk_config, which its "
                                                   "declaration .object jobmark. does not"):
        skeletons.JOBMARK.check_reuse("lk_config", rules, skeletons.JOBMARK.path())
