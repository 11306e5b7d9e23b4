"""helper-29: the `gdsl` process's entry (gdsl/__main__.py: Ctrl-C at any
moment, and while it exits), checkpoint files that are not files, a stopped
`gdsl partition`, and odd arguments a new user tries."""
from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")
sys.path.insert(0, str(Path(__file__).parent))

from helpers import gdsl_here  # noqa: E402, F401


# -- 1. Ctrl-C while the process starts, and while it exits ----------------------------------------

# The child starts the command as the console script does, and says so just before: what comes
# before (the interpreter's own start, `site`, the console script's first lines: about 15 ms) is
# Python's, as for any program.
_STARTED = ("import sys; sys.argv[0] = 'gdsl'\n"
            "from gdsl.__main__ import entry\n"
            "sys.stderr.write('@'); sys.stderr.flush()\n"
            "entry()\n")


def _sigint_as_a_terminal_gives_it() -> None:
    """The child's SIGINT at its default action, as a shell's foreground job
    has it: a test run started in the background by a non-interactive shell
    (`.ci/run &`) ignores SIGINT, its children inherit that, and Python then
    installs no KeyboardInterrupt handler (the command runs to its end)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_after(delay: float, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.Popen([sys.executable, "-c", _STARTED, *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=_sigint_as_a_terminal_gives_it)
    assert p.stderr.read(1) == b"@"
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(args, p.returncode, out.decode(), err.decode())


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02, 0.1, 0.3])
def test_ctrl_c_while_gdsl_starts_says_interrupted_and_exits_130(delay):
    """Was: a Ctrl-C while the console script imported gdsl.cli (argparse,
    gdsl.diagnostics), or while `main` built its parser (before its own
    boundary), printed a Python traceback and the process died by SIGINT
    (status -2)."""
    r = _interrupt_after(delay, "run", GCN, "--epochs", "1", "--backend", "reference")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert r.stderr.endswith("gdsl: interrupted\n"), r.stderr


def test_the_console_script_and_python_m_gdsl_start_at_the_small_entry():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'gdsl = "gdsl.__main__:entry"' in text
    script = Path(sys.executable).parent / "gdsl"
    if script.exists():   # the installed console script (pip install -e . writes it from pyproject.toml)
        assert "from gdsl.__main__ import entry" in script.read_text()
    for argv in ([sys.executable, "-m", "gdsl"],) + (([str(script)],) if script.exists() else ()):
        p = subprocess.Popen([*argv, "run", GCN, "--epochs", "1", "--backend", "reference"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_sigint_as_a_terminal_gives_it)
        time.sleep(0.15)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 130 and err.decode() == "gdsl: interrupted\n", (argv, p.returncode, err)


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          preexec_fn=_sigint_as_a_terminal_gives_it)


def test_a_ctrl_c_in_the_interpreters_teardown_does_not_kill_the_process_by_sigint():
    """Was: after the atexit callbacks Python gives SIGINT back to its default
    action; a Ctrl-C while it then freed the modules (torch's take a while)
    killed the process (status -2), though `gdsl: interrupted` and exit 130
    (or the command's own status) had been decided."""
    r = _child("import os, signal, sys\n"
               "class Late:\n"
               "    def __del__(self, kill=os.kill, pid=os.getpid(), sig=signal.SIGINT):\n"
               "        kill(pid, sig)\n"
               "sys.modules['late'] = Late()   # freed in the teardown, as it empties sys.modules\n"
               "del Late\n"
               "sys.argv = ['gdsl', 'passes']\n"
               "from gdsl.cli import entry\n"
               "entry()\n")
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "lower" in r.stdout


def test_a_ctrl_c_in_an_atexit_callback_ends_the_process_with_the_commands_status():
    """Was: "Exception ignored in atexit callback" and a KeyboardInterrupt
    traceback (torch's and concurrent.futures' callbacks run there)."""
    r = _child("import atexit, os, signal, sys, time\n"
               "import gdsl.cli\n"
               "real = gdsl.cli.cmd_passes\n"
               "def cmd_passes(args):\n"
               "    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(2)))\n"
               "    return real(args) + 5\n"
               "gdsl.cli.cmd_passes = cmd_passes\n"
               "sys.argv = ['gdsl', 'passes']\n"
               "gdsl.cli.entry()\n")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 5 and "lower" in r.stdout, (r.returncode, r.stderr)


def test_a_ctrl_c_after_the_interruption_was_said_keeps_status_130():
    """The first Ctrl-C stops the command (`gdsl: interrupted`, 130); a second
    one while the process exits neither prints a traceback nor turns the
    status into -2."""
    r = _child("import atexit, os, signal, sys\n"
               "import gdsl.cli\n"
               "def cmd_passes(args):\n"
               "    atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
               "    raise KeyboardInterrupt\n"
               "gdsl.cli.cmd_passes = cmd_passes\n"
               "sys.argv = ['gdsl', 'passes']\n"
               "gdsl.cli.entry()\n")
    assert r.returncode == 130 and r.stderr == "gdsl: interrupted\n", (r.returncode, r.stderr)



def test_a_ctrl_c_while_numpy_initialises_is_an_interruption_not_an_internal_error():
    """Was: numpy's C extension, interrupted while it imports `datetime`, raised
    ImportError ("IMPORTANT: PLEASE READ THIS FOR ADVICE ..."): `gdsl:
    internal compiler error`, exit 3."""
    r = _child("import os, signal, sys\n"
               "class Finder:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'datetime' and 'numpy' in sys.modules:   # numpy's C extension, initialising\n"
               "            sys.meta_path.remove(self)\n"
               "            os.kill(os.getpid(), signal.SIGINT)\n"
               "sys.meta_path.insert(0, Finder())\n"
               f"sys.argv = ['gdsl', 'run', {GCN!r}, '--epochs', '1', '--backend', 'reference']\n"
               "from gdsl.cli import entry\n"
               "entry()\n")
    assert r.returncode == 130 and r.stderr == "gdsl: interrupted\n", (r.returncode, r.stderr[-500:])

@pytest.fixture
def python_sigint():
    """SIGINT as Python sets it (an earlier test's handler put aside), given back after the test."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)
    saved = {s: signal.getsignal(s) for s in sigs}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    from gdsl.runtime import signals
    signals.forget_pending()
    for s, h in saved.items():
        signal.signal(s, h)


def _slow_module(tmp_path, monkeypatch, name: str, sig: int) -> None:
    (tmp_path / f"{name}.py").write_text(
        f"import os, signal\nos.kill(os.getpid(), {int(sig)})\nfor _ in range(200_000):\n    pass\ndone = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_ctrl_c_while_the_process_imports_is_raised_when_the_import_ends(tmp_path, monkeypatch, python_sigint):
    """Was: raised inside the import, where numpy's C extension turned it into
    an ImportError (`gdsl: internal compiler error: IMPORTANT: PLEASE READ
    THIS ...`, exit 3) and a pybind11 callback in torch's made the process
    abort (status -6)."""
    from gdsl.runtime import signals
    _slow_module(tmp_path, monkeypatch, "gdsl_audit29_a", signal.SIGINT)
    signals.interrupt_after_imports()
    with pytest.raises(KeyboardInterrupt):
        import gdsl_audit29_a  # noqa: F401
        time.sleep(5)   # the timer's 10 ms look ends it
    assert sys.modules["gdsl_audit29_a"].done   # the import ran to its end


def test_a_sigterm_while_gdsl_run_imports_is_raised_when_the_import_ends(tmp_path, monkeypatch, python_sigint):
    from gdsl.runtime.signals import Terminated, stop_on_signals
    _slow_module(tmp_path, monkeypatch, "gdsl_audit29_b", signal.SIGTERM)
    with pytest.raises(Terminated), stop_on_signals():
        import gdsl_audit29_b  # noqa: F401
        time.sleep(5)
    assert sys.modules["gdsl_audit29_b"].done


def test_a_signal_waiting_for_an_import_also_waits_for_a_held_block(tmp_path, monkeypatch, python_sigint):
    """The optimizer's step (signals_held) is not cut halfway by it."""
    from gdsl.runtime import signals
    (tmp_path / "gdsl_audit29_c.py").write_text(
        "import os, signal, time\n"
        "from gdsl.runtime.signals import signals_held\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "steps = []\n"
        "with signals_held():\n"
        "    time.sleep(0.05)\n"
        "    steps.append(1)\n"
        "steps.append(2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    signals.interrupt_after_imports()
    with pytest.raises(KeyboardInterrupt):
        import gdsl_audit29_c  # noqa: F401
        time.sleep(5)
    assert sys.modules["gdsl_audit29_c"].steps == [1, 2]


# -- 2. a --resume DIR whose files are not files ------------------------------------------------------

def _checkpoint(tmp_path) -> Path:
    d = tmp_path / "ck"
    (d / "epoch-1").mkdir(parents=True)
    (d / "epoch-1" / "rank-1.pt").write_bytes(b"")
    (d / "checkpoint.json").write_text('{"format": "gdsl-checkpoint-1", "epoch": 1, "size": 2, "dir": "epoch-1"}\n')
    return d


@pytest.mark.parametrize("kind, said", [
    ("directory", "is a directory, not a checkpoint file (of rank 0)"),
    ("broken symlink", "is a broken symbolic link to /no/such/rank-0.pt, not a checkpoint file (of rank 0)"),
    ("fifo", "is a FIFO, not a checkpoint file (of rank 0)"),
    ("missing", "missing checkpoint file of rank 0")])
def test_a_rank_file_that_is_not_a_file_is_named_for_what_it_is(tmp_path, kind, said):
    """Was: "missing checkpoint file of rank 0" for a directory or a broken
    symlink (a FIFO, read by a rank under mpiexec, hung it)."""
    from gdsl.diagnostics import GdslError
    from gdsl.dist.run import check_resume
    d = _checkpoint(tmp_path)
    f = d / "epoch-1" / "rank-0.pt"
    if kind == "directory":
        f.mkdir()
    elif kind == "broken symlink":
        f.symlink_to("/no/such/rank-0.pt")
    elif kind == "fifo":
        os.mkfifo(f)
    with pytest.raises(GdslError) as e:
        check_resume(d, 2, None)
    assert str(e.value) == f"{f}: {said}"


def test_a_broken_symlink_for_the_index_or_the_directory_says_so(tmp_path):
    from gdsl.diagnostics import GdslError
    from gdsl.dist.run import read_checkpoint_index
    d = _checkpoint(tmp_path)
    (d / "checkpoint.json").unlink()
    (d / "checkpoint.json").symlink_to(d / "old.json")
    with pytest.raises(GdslError, match=r"checkpoint.json: is a broken symbolic link to .*old.json, not a checkpoint "
                                        r"index$"):
        read_checkpoint_index(d)
    (tmp_path / "gone").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(GdslError, match=r"gone: no checkpoint here \(is a broken symbolic link to .*elsewhere\)$"):
        read_checkpoint_index(tmp_path / "gone")


def test_gdsl_run_resume_names_a_directory_where_a_rank_file_should_be(tmp_path):
    d = _checkpoint(tmp_path)
    (d / "epoch-1" / "rank-0.pt").mkdir()
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--resume", d, "--epochs", "3")
    assert r.returncode == 1, r.stderr
    assert f"gdsl: error: {d}/epoch-1/rank-0.pt: is a directory, not a checkpoint file (of rank 0)" in r.stderr


# -- 3. `gdsl partition` stopped before it wrote anything ----------------------------------------------

def test_a_partition_stopped_before_writing_does_not_name_a_directory_it_never_made(tmp_path, monkeypatch):
    """Was: "stopped before every file was written: DIR holds no partition a
    run would take", DIR never created."""
    import gdsl.dist.part as part

    def build_parts(*a, **k):   # METIS at work when Ctrl-C comes
        raise KeyboardInterrupt
    monkeypatch.setattr(part, "build_parts", build_parts)
    d = tmp_path / "new" / "p"
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "rows", "--out", d)
    assert r.returncode == 130
    assert r.stderr == "gdsl partition: stopped before anything was written\ngdsl: interrupted\n"
    assert not d.exists()


def test_a_partition_stopped_in_its_first_write_removes_the_directory_it_made(tmp_path, monkeypatch):
    import numpy as np

    from gdsl.runtime.signals import Terminated

    def savez(path, **arrays):
        Path(path).write_bytes(b"PK\x03\x04 half")
        raise Terminated(signal.SIGTERM)
    monkeypatch.setattr(np, "savez", savez)
    d = tmp_path / "p"
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "rows", "--out", d)
    assert r.returncode == 143
    assert r.stderr == "gdsl partition: stopped before anything was written\ngdsl: terminated (SIGTERM)\n"
    assert not d.exists()


def test_a_partition_stopped_in_a_directory_that_was_there_names_it(tmp_path, monkeypatch):
    import gdsl.dist.part as part

    def build_parts(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(part, "build_parts", build_parts)
    d = tmp_path / "p"
    d.mkdir()
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "rows", "--out", d)
    assert r.returncode == 130 and d.is_dir()
    assert r.stderr.startswith(f"gdsl partition: stopped before every file was written: {d} holds no partition")


# -- 4. odd arguments a new user tries ------------------------------------------------------------------

@pytest.fixture
def broken(tmp_path) -> Path:
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    return link


@pytest.mark.parametrize("args, said", [
    (["compile", "{link}"], "gdsl: error: {link}: is a broken symbolic link to {to}"),
    (["compile", "{link}/x.gd"], "gdsl: error: {link}/x.gd: is in {link}, a broken symbolic link to {to}"),
    (["run", GCN, "--data", "{link}"], "gdsl: error: {link}: is a broken symbolic link to {to}"),
    (["compile", GCN, "--dump-dir", "{link}"],
     "gdsl: error: --dump-dir {link}: is a broken symbolic link to {to}, not a directory"),
    (["compile", GCN, "--dump-dir", "{link}/d"], "gdsl: error: --dump-dir {link}/d: is in {link}, a broken symbolic "
                                                 "link to {to}"),
    (["partition", GCN, "--np", "2", "--out", "{link}"],
     "gdsl: error: {link}: is a broken symbolic link to {to}, not a directory"),
    (["run", GCN, "--np", "2", "--parts", "{link}"],
     "gdsl: error: {link}: is a broken symbolic link to {to}, not a directory"),
    (["run", GCN, "--np", "2", "--checkpoint", "{link}"],
     "gdsl: error: --checkpoint {link}: is a broken symbolic link to {to} (a checkpoint is a directory)"),
], ids=["program", "program-in-it", "data", "dump-dir", "dump-dir-in-it", "partition-out", "parts", "checkpoint"])
def test_a_broken_symlink_is_named_as_one(broken, args, said):
    """Was: "no such file" (the link is there), "exists and is not a
    directory", `--checkpoint`: "cannot write there (File exists)";
    `partition --out` refused only after the cost model chose the plan."""
    to = os.readlink(broken)
    r = gdsl_here(*[a.format(link=broken) for a in args])
    assert r.returncode == 1
    assert r.stderr == said.format(link=broken, to=to) + "\n", r.stderr


class _ReaderLeaves(io.TextIOBase):
    """stderr a pipe whose reader left after the first line (`gdsl run ... 2>&1 >log | head -1`)."""

    def __init__(self) -> None:
        self.text = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if "\n" in self.text:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        self.text += s
        return len(s)


def test_a_stderr_reader_that_leaves_does_not_stop_the_run_nor_lose_its_files(tmp_path, monkeypatch, capsys):
    """Was: the BrokenPipeError of the next progress line ended the run (exit
    141) in the middle of training, --json and --save not written."""
    from gdsl.cli import main
    js, pt = tmp_path / "r.json", tmp_path / "w.pt"
    monkeypatch.setattr(sys, "stderr", _ReaderLeaves())
    rc = main(["run", GCN, "--epochs", "1", "--backend", "reference", "--json", str(js), "--save", str(pt)])
    text = sys.stderr.text
    monkeypatch.undo()
    assert rc == 141   # as for stdout: the output was cut
    assert text.startswith("gdsl run ") and text.count("\n") == 1
    assert "final (epoch 1)" in capsys.readouterr().out
    assert len(json.loads(js.read_text())["epochs"]) == 1 and pt.stat().st_size > 0


def test_a_dash_for_the_program_says_how_to_read_stdin():
    r = gdsl_here("compile", "-")
    assert r.returncode == 1
    assert r.stderr == "gdsl: error: -: no such file (a program is not read from stdin as '-': give /dev/stdin)\n"


def test_a_file_name_that_is_not_utf8_is_checked_and_written(tmp_path):
    """Was: `gdsl run --json $'\\xff.json'` an internal error (the temporary
    file's name was encoded as UTF-8)."""
    from gdsl.runtime.files import check_json_path, write_atomic
    name = os.fsdecode(bytes(tmp_path) + b"/\xff.json")
    check_json_path(name, "--json")
    write_atomic(Path(name), "{}\n")
    assert os.listdir(bytes(tmp_path)) == [b"\xff.json"]


def test_a_rank_line_that_is_not_utf8_does_not_stop_the_launchers_output(tmp_path, monkeypatch, capsys):
    """Was: the thread that reads the ranks' output died with a
    UnicodeDecodeError traceback (rank 0 printing `wrote $'\\xff.json'`), and
    the ranks' later lines were lost."""
    pytest.importorskip("mpi4py")
    import gdsl.dist.launch as launch_mod
    from gdsl.dist.worker import STDERR_MARK
    script = tmp_path / "fake-mpiexec"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"sys.stdout.buffer.write({STDERR_MARK.encode()!r} + b'wrote \\xffd.json\\n')\n"
                      "sys.stdout.buffer.write(b'a line \\xfe\\n')\n"
                      "sys.stdout.flush()\n"
                      "print('final (epoch 1)')\n")
    script.chmod(0o755)
    monkeypatch.setattr(launch_mod, "find_mpiexec", lambda: str(script))
    rc = launch_mod.launch({}, 2)
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines() == ["a line \\udcfe", "final (epoch 1)"]
    assert err.splitlines() == ["wrote \\udcffd.json"]


def test_a_program_name_that_is_not_utf8_prints_on_a_utf8_only_stdout(tmp_path):
    """Was (a UTF-8 locale, or PYTHONIOENCODING=utf-8): `gdsl compile
    $'\\xff.gd' --print-loc` an internal compiler error, "surrogates not
    allowed"; now the name's own bytes."""
    prog = bytes(tmp_path) + b"/\xff.gd"
    with open(prog, "wb") as f:
        f.write(Path(GCN).read_bytes())
    r = subprocess.run([sys.executable, "-m", "gdsl", "compile", prog, "--print-loc"], cwd=ROOT, capture_output=True,
                       env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"}, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"# " + prog + b":3:1" in r.stdout
