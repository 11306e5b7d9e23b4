"""helper-28: review of 7a156e1..19f0716 (start-up GC, empty directory flags,
order hints on two aggregations) and the fixes it made: `gdsl plan --json`
written when stdout fails, an empty `--profile` a usage error, the docs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")
sys.path.insert(0, str(Path(__file__).parent))

from helpers import gdsl_here  # noqa: E402


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_plan_json_is_written_when_stdout_fails(tmp_path):
    """`gdsl plan --json F > /dev/full`: was exit 1 and F never written (the
    table's print failed before the file was written); now F is written, as
    `gdsl run` writes its files, and the exit is still 1 for stdout. The file
    is the one a plan with a working stdout writes."""
    full_js, ok_js = tmp_path / "full.json", tmp_path / "ok.json"
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "gdsl", "plan", GCN, "--data", "cora", "--np", "4",
                            "--json", str(full_js)], stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert r.returncode == 1, r.stderr
    assert "gdsl: error: no space left on device" in r.stderr, r.stderr
    assert full_js.exists(), r.stderr
    ok = gdsl_here("plan", GCN, "--data", "cora", "--np", "4", "--json", ok_js)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(full_js.read_text()) == json.loads(ok_js.read_text())
    assert "choice:" in ok.stdout and ok.stdout.startswith(f"plan for {GCN}: P=4")


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_profile_is_a_usage_error(value, tmp_path):
    """`gdsl plan --profile "$P"` with P unset: was `gdsl: error: .: is a
    directory, not a profile file`, exit 1 (the empty path read as '.');
    now a usage error like the other empty path flags, before any work."""
    js = tmp_path / "p.json"
    out = gdsl_here("plan", GCN, "--np", "2", "--data", "cora", "--json", js, "--profile", value)
    assert out.returncode == 2, out.stderr
    assert "gdsl plan: error: --profile: empty (give a profile file)" in out.stderr, out.stderr
    assert "is a directory" not in out.stderr and not js.exists()


def test_docs_say_the_order_refusal_covers_a_second_aggregation():
    """docs/language.md (order hints and linearity) says e5cd43c's refusal: a
    hint on a call whose other aggregation is reordered is refused too, naming
    the one left; its example is the error gdsl gives."""
    text = " ".join((ROOT / "docs" / "language.md").read_text().split())
    section = text[text.index("### Order hints and linearity"):]
    assert "The refusal also applies when the hint's call has another aggregation before a `@` that the pass " \
           "does reorder" in section
    assert "the message gathered into 'a2' (line 13) does not fold to that form" in section
    import gdsl
    from test_unseen_audit26 import TWO_AGGS
    source = TWO_AGGS + "schedule { order L#2 = dense_first }\n"
    assert source.splitlines()[12].strip() == "gather a2 = sum(m2)"   # line 13, as the doc says
    with pytest.raises(gdsl.CompileError) as e:
        gdsl.compile(source).module()
    assert "the message gathered into 'a2' (line 13) does not fold to that form" in str(e.value)


def test_cli_docs_list_the_empty_profile_and_the_plan_json_on_a_failed_stdout():
    text = (ROOT / "docs" / "cli.md").read_text()
    usage = next(line for line in text.splitlines() if line.startswith("| 2 | usage error"))
    assert "`plan --profile`" in usage
    assert "`gdsl plan: error: --profile: empty (give a profile file)`" in text
    assert "(and `gdsl plan`'s `--json`) are written all the same" in text


def test_compile_keeps_the_collector_held_as_architecture_md_says():
    """7a156e1: plan, run, partition and calibrate release the collector after
    their imports; compile (and passes) never do, which architecture.md now
    says (it read: collection resumes, for every gdsl process)."""
    import gc

    from gdsl.cli import main
    from gdsl.runtime import startup
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    assert "`gdsl compile` and `gdsl passes` keep it held to their end" in text
    was = gc.isenabled()
    try:
        startup.hold()
        assert main(["compile", GCN]) == 0
        assert not gc.isenabled()
    finally:
        startup._held[0] = False
        if was:
            gc.enable()
