"""A user's classifier is compiled with labkit's flags and refused, with the reason, when
it cannot stand in for the built-in one."""

from pathlib import Path

import pytest

from labkit.kernel import bpf, lanes

pytestmark = pytest.mark.untimed  # checks no time, rate or CPU figure

EXAMPLE = Path(__file__).resolve().parents[2] / "docs/examples/classifier.bpf.c"


def test_the_example_compiles_and_fits(bpf_ready, tmp_path):
    obj = bpf.compile_object(EXAMPLE, tmp_path / "classifier.bpf.o")
    lanes.check_object(obj)


def test_a_path_is_only_a_path(bpf_ready, tmp_path):
    """Spaces, ``$`` and quotes in the paths reach clang as they are (no shell)."""
    odd = tmp_path / "my $HOME's classifier"
    odd.mkdir()
    source = odd / "c $(touch pwned).bpf.c"
    source.write_text(EXAMPLE.read_text())
    obj = bpf.compile_object(source, odd / "out $x.bpf.o")
    lanes.check_object(obj)
    assert not (Path.cwd() / "pwned").exists() and not (odd / "pwned").exists()


def test_a_compile_error_is_shown(tmp_path):
    bad = tmp_path / "bad.bpf.c"
    bad.write_text('#include "vmlinux.h"\nint oops(void) { return undefined_thing; }\n')
    with pytest.raises(ValueError, match="(?s)bad.bpf.c does not compile:.*undefined_thing"):
        bpf.compile_object(bad, tmp_path / "bad.bpf.o")


@pytest.mark.parametrize(("name", "words"), [
    ("valve", "has no program lk_classify"),
    ("latency", "has no program lk_classify"),
])
def test_an_object_without_the_classifier_contract_is_refused(bpf_ready, name, words):
    with pytest.raises(ValueError, match=words):
        lanes.check_object(bpf.object_path(name))
