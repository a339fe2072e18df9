"""The samples' own manifest (data/sample/samples.yaml): it names every shipped sample and
figure with a command that would record it, bad entries say which key is wrong, and a
recording replaces a sample only once it is complete."""

import subprocess
from pathlib import Path

import pytest

from labkit.runs import samples
from labkit.ui import cli
from labkit.ui.cli import running

REPO = Path(__file__).resolve().parents[2]
SHIPPED = samples.load()


def _sample_dirs() -> set[str]:
    """Every directory under data/sample/ that holds a recording (a manifest or sweep)."""
    found = {p.parent for name in ("manifest.json", "sweep.json")
             for p in (REPO / "data/sample").rglob(name) if samples.STAGING not in p.parts}
    return {str(p.relative_to(REPO / "data/sample")) for p in found}


def test_every_shipped_sample_and_figure_is_named_with_its_command():
    assert _sample_dirs() <= {s.path for s in SHIPPED}
    drawn = {s.figure_file(f).name for s in SHIPPED for f in s.figures}
    assert {p.name for p in (REPO / "docs/figures").glob("*.svg")} <= drawn


@pytest.mark.parametrize("sample", SHIPPED, ids=[s.path for s in SHIPPED])
def test_each_command_parses_and_reads_its_scenario_with_its_changes(sample, monkeypatch):
    monkeypatch.chdir(REPO)  # the commands name files from the repository's root
    args = cli.build_parser().parse_args([*sample.command, "--out", "x"])
    assert running.scenario_of(args).name  # a ScenarioError names the file and key otherwise


@pytest.mark.parametrize("text, wrong", [
    ("samples: {}", "needs `samples:`"),
    ("samples: [{path: a, command: demo}]", "samples[0].command: a labkit command"),
    ("samples: [{path: /abs, command: run x.yaml}]", "samples[0].path: a relative path"),
    ("samples: [{path: a/../b, command: run x.yaml}]", "samples[0].path: a relative path"),
    ("samples: [{path: a, command: run x.yaml --out y}]", "samples[0].command: without --out"),
    ("samples: [{path: a, command: run x.yaml, minutes: 0}]", "samples[0].minutes"),
    ("samples: [{path: a, command: run x.yaml, figure: [f]}]", "unknown key 'figure'"),
    ("samples: [{path: a, command: run x.yaml}, {path: a, command: run y.yaml}]",
     "samples[1].path: a is named twice"),
])
def test_a_bad_entry_names_its_key(tmp_path, text, wrong):
    f = tmp_path / "samples.yaml"
    f.write_text(text)
    with pytest.raises(samples.SamplesError, match=f"^{f}: .*") as caught:
        samples.load(f)
    assert wrong in str(caught.value)


def test_only_picks_a_sample_or_a_folder_and_refuses_an_unknown_one():
    assert [s.path for s in samples.select(SHIPPED, ["nvlink"])] == ["nvlink/inside",
                                                                     "nvlink/across"]
    assert [s.path for s in samples.select(SHIPPED, ["bottleneck"])] == ["bottleneck"]
    with pytest.raises(samples.SamplesError, match="no sample 'bottle'"):
        samples.select(SHIPPED, ["bottle"])


def test_the_estimate_is_the_last_recordings_time_else_the_entrys():
    bottleneck = next(s for s in SHIPPED if s.path == "bottleneck")
    assert 10 < samples.estimate_s(bottleneck) < 30 * 60
    ring = samples.Sample("sweep-ring-20261129", ("sweep", "x.yaml"), minutes=2.5)
    recorded = Path(__file__).parent / "recorded"  # before sweeps kept a manifest
    assert samples.estimate_s(ring, recorded) == 150.0


def _fake_labkit(returncode: int, writes: str = "summary.json"):
    """Stands in for the recording process (this test is about the files around it)."""
    def run(argv, **kwargs):
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True)
        (out / writes).write_text("{}")
        kwargs["stdout"].write("line 1\nline 2\nthe reason\n")
        return subprocess.CompletedProcess(argv, returncode)
    return run


def test_a_failed_recording_leaves_the_sample_and_names_its_log(tmp_path):
    old = tmp_path / "nvlink/inside"
    old.mkdir(parents=True)
    (old / "manifest.json").write_text("old")
    sample = samples.Sample("nvlink/inside", ("run", "topologies/nvlink.yaml"))
    with pytest.raises(RuntimeError, match="(?s)exit 1.*unchanged.*inside.log:\n.*the reason$"):
        samples.record(sample, tmp_path, tmp_path, runner=_fake_labkit(1))
    interrupted = tmp_path / samples.STAGING / "nvlink/.inside.incomplete"
    interrupted.mkdir()  # what labkit leaves of a run stopped by Ctrl-C
    with pytest.raises(KeyboardInterrupt):
        samples.record(sample, tmp_path, tmp_path, runner=_fake_labkit(130))
    assert (old / "manifest.json").read_text() == "old"
    done = samples.record(sample, tmp_path, tmp_path, runner=_fake_labkit(0))
    assert done.sample == sample and done.figures == ()
    assert sorted(p.name for p in old.iterdir()) == ["summary.json"]
    assert not (tmp_path / samples.STAGING / "nvlink/inside.previous").exists()
    assert not interrupted.exists()  # the next recording cleared what was left


def test_samples_list_prints_each_sample_and_the_total(capsys):
    assert cli.main(["samples", "--list", "--only", "nvlink"]) == 0
    out = capsys.readouterr().out
    assert "nvlink/inside" in out and "nvlink/across" in out and "bottleneck" not in out
    assert "traffic[kind=job].ranks=[g1,g2,g5,g6]" in out.replace("\n", "")  # not markup
    assert "2 samples, about " in out


def test_a_dirty_tree_is_refused_before_anything_records(monkeypatch):
    monkeypatch.setattr(samples, "git_revision", lambda: "abc-dirty")
    with pytest.raises(samples.SamplesError, match="commit \\(or stash\\) first"):
        samples.check_revision(False)
    assert samples.check_revision(True) == "abc-dirty"


def test_recordings_and_figures_do_not_make_the_revision_dirty(tmp_path):
    """make samples replaces data/sample/ and docs/figures/ as it goes: the samples after
    the first still name the clean commit; a changed line of code does not."""
    from dataclasses import replace

    from labkit.model import paths
    from labkit.runs import provenance

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    for f in ("code.py", "data/sample/run.json", "docs/figures/f.svg"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("1")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    with paths.use(replace(paths.current(), repo=tmp_path)):
        (tmp_path / "data/sample/run.json").write_text("2")
        (tmp_path / "docs/figures/f.svg").write_text("2")
        assert not provenance.git_revision().endswith("-dirty")
        (tmp_path / "code.py").write_text("2")
        assert provenance.git_revision().endswith("-dirty")
