"""A tiny lit-style runner: `# RUN:` lines in a test file, checked by filecheck.

Supported RUN forms (`%s` is the test file, `%root` the repository root):
    # RUN: gdsl ARGS... | filecheck %s [--check-prefix=P]
    # RUN: not gdsl ARGS... 2>&1 | filecheck %s [--check-prefix=P]
`gdsl` runs in-process (tests stay fast); filecheck is the PyPI `filecheck`
package, run as `python -m filecheck` with the output on stdin.
"""
from __future__ import annotations

import contextlib
import io
import shlex
import subprocess
import sys
from pathlib import Path


def run_lines(path: Path) -> list[str]:
    return [line.split("RUN:", 1)[1].strip() for line in path.read_text().splitlines() if "RUN:" in line]


def run_gdsl(argv: list[str]) -> tuple[int, str, str]:
    from gdsl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


ROOT = Path(__file__).resolve().parent.parent


def expand(cmd: str, path: Path) -> str:
    return cmd.replace("%root", str(ROOT)).replace("%s", str(path))


def check(path: Path, run: str) -> None:
    cmd, _, fc = run.partition("|")
    words = shlex.split(expand(cmd, path))
    expect_fail = words[0] == "not"
    if expect_fail:
        words = words[1:]
    merge = "2>&1" in words
    words = [w for w in words if w != "2>&1"]
    assert words[0] == "gdsl", f"RUN line must start with gdsl: {run}"
    code, out, err = run_gdsl(words[1:])
    if expect_fail:
        assert code != 0, f"expected failure, got exit 0\n{out}{err}"
    else:
        assert code == 0, f"exit {code}\n{err}"
    text = out + (err if merge else "")
    fc_words = shlex.split(fc.replace("%s", str(path)))
    assert fc_words[0] == "filecheck"
    r = subprocess.run([sys.executable, "-m", "filecheck", *fc_words[1:]], input=text, capture_output=True, text=True)
    assert r.returncode == 0, f"filecheck failed for {path.name}:\n{r.stdout}{r.stderr}\n--- output was:\n{text}"
