"""Behaviour the docs state, found different by an outside user who ran the
docs as a contract (session 29, helper-61); each test checks the fixed side."""
from __future__ import annotations

from pathlib import Path

import pytest

import gdsl

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()


def test_axis_counts_are_english():
    # language.md "Reductions over feature axes": "mean: axis 2 out of range for 2 feature axes"
    # (was "axises"); and "(1 feature axis)" (was "(1 feature axes)")
    src = GCN.replace("    apply     out = s + b\n",
                      "    apply     out = s + b\n    apply     q = mean(reshape(s, [dout, 1]), 2)\n", 1)
    assert src != GCN
    with pytest.raises(gdsl.CompileError, match=r"mean: axis 2 out of range for 2 feature axes\b"):
        gdsl.compile(src)
    two = GCN.replace("input X : vertex f32[F]", "input X : vertex f32[F, 2]", 1)
    with pytest.raises(gdsl.CompileError, match=r"with shape \[din\] \(1 feature axis\), got \[F, 2\]"):
        gdsl.compile(two)


def test_the_pass_lists_in_the_docs_are_the_pipeline():
    """docs/architecture.md's `gdsl passes` block and pipeline diagram, and
    docs/cli.md's count, left out mark-invariant (helper-74)."""
    from helpers import gdsl_here
    out = gdsl_here("passes").stdout
    arch = (ROOT / "docs" / "architecture.md").read_text()
    block = arch.split("$ gdsl passes\n", 1)[1].split("```", 1)[0]
    assert block == out
    names = [ln.split()[0] for ln in out.splitlines()]
    assert "─lower─▶ IR\n    IR " + "".join(f"─{n}─▶ " for n in names[1:]) + "optimised IR" in arch
    words = {8: "eight", 9: "nine", 10: "ten"}
    assert f"(`lower` and the {words[len(names) - 1]} passes)" in (ROOT / "docs" / "cli.md").read_text()
