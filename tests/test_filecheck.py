"""Golden RUN/CHECK tests: AST and IR dumps after each pass, and error output."""
from pathlib import Path

import pytest

from filecheck_runner import check, run_lines

HERE = Path(__file__).parent / "filecheck"
# .gd files are programs with their own RUN lines; .check files hold only
# RUN/CHECK lines about a program elsewhere (%root/programs/gcn.gd).
CASES = [(p, r) for p in sorted([*HERE.rglob("*.gd"), *HERE.rglob("*.check")]) for r in run_lines(p)]


@pytest.mark.parametrize("path,run", CASES, ids=[f"{p.relative_to(HERE)}:{i}" for i, (p, _) in enumerate(CASES)])
def test_golden(path, run):
    check(path, run)


def test_corpus_is_not_empty():
    assert len(CASES) >= 15
