"""gdsl/runtime/files.py: output files are checked before the work and
written atomically; the end of a run writes every file and raises the right
failure. Cases a mutation audit found untested."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gdsl.diagnostics import GdslError
from gdsl.runtime.files import check_json_path, finish_run, save_state_dict, write_atomic, write_json

ROOT = Path(__file__).resolve().parent.parent


def test_an_input_spelt_another_way_is_still_refused(tmp_path, monkeypatch):
    """The run's program given as `g.gd` and the output as its absolute path
    (or through a symlinked folder) is the same file: refused."""
    prog = tmp_path / "g.gd"
    prog.write_text("graph G\n")
    (tmp_path / "link").symlink_to(tmp_path)
    monkeypatch.chdir(tmp_path)
    for out, given in ((str(prog), "g.gd"), ("g.gd", str(prog)), (str(tmp_path / "link" / "g.gd"), str(prog))):
        with pytest.raises(GdslError, match="is this run's input"):
            check_json_path(out, inputs=(given, None))
    assert prog.read_text() == "graph G\n"


def test_save_state_dict_checks_its_destination_itself(tmp_path):
    """`save_state_dict` (also rank 0's, after a distributed run) refuses a
    pipe rather than replacing it by the rename."""
    import torch
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(GdslError, match="not a regular file"):
        save_state_dict(str(fifo), {"W": torch.ones(2)})
    assert fifo.is_fifo() and os.listdir(tmp_path) == ["pipe"]


def test_json_is_strict_at_any_depth(tmp_path):
    """NaN and infinities become null, inside lists and dicts too (the file
    is strict JSON)."""
    p = tmp_path / "m.json"
    write_json(str(p), {"loss": float("nan"), "epochs": [{"loss": float("inf")}, 1.5, [float("-inf")]]})
    text = p.read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}")) == {
        "loss": None, "epochs": [{"loss": None}, 1.5, [None]]}


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "out.json"
    p.write_text("old\n")

    def half(fh):
        fh.write("partial")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        write_atomic(p, half)
    assert p.read_text() == "old\n" and os.listdir(tmp_path) == ["out.json"]


def test_a_written_file_has_the_umasks_permissions(tmp_path):
    """A new file is readable as the user's other files are (0o666 less the
    umask), not the temporary file's private 0o600."""
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.txt", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


class _Boom:
    def __init__(self, exc):
        self.exc = exc

    def __call__(self):
        raise self.exc


def test_finish_run_raises_a_files_failure_before_stdouts(capsys):
    """stdout failing (a full disk) and a file failing: the file's error is
    raised (exit 1 with its message) and the other one printed."""
    wrote = []
    with pytest.raises(GdslError, match="--json m.json: could not be written"):
        finish_run(_Boom(OSError(28, "No space left on device")),
                   [_Boom(GdslError("--json m.json: could not be written")), lambda: wrote.append(1)])
    assert wrote == [1]   # the next file is written all the same
    assert "gdsl: error: [Errno 28] No space left on device" in capsys.readouterr().err


def test_finish_run_says_nothing_of_a_reader_that_left(capsys):
    """`gdsl run ... | head`: a broken pipe is not reported as an error
    (exit 141 comes from the caller), even when a file failed too."""
    with pytest.raises(GdslError, match="m.pt"):
        finish_run(_Boom(BrokenPipeError(32, "Broken pipe")), [_Boom(GdslError("--save m.pt: could not be written"))])
    assert capsys.readouterr().err == ""


def test_discard_stdout_points_fd_1_at_dev_null():
    """What is still written for a failed stdout goes nowhere (was: failed
    again at exit)."""
    code = ("import os\nfrom gdsl.runtime.files import discard_stdout\n"
            "discard_stdout()\nos.write(1, b'still here')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout == "", (r.stdout, r.stderr)
