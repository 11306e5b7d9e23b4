"""Output files of the commands (--json, calibrate's --out, compile's
--dump-dir, run's --save): checked before the work, written atomically. No
torch imported here at the top (only `save_state_dict` needs it), so `gdsl
compile` and `gdsl plan` do not import it."""
from __future__ import annotations

import errno
import json
import math
import os
import sys
from pathlib import Path

from gdsl.diagnostics import GdslError


def _finite_or_null(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite_or_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite_or_null(v) for v in x]
    return x


def check_json_path(path: str, flag: str = "--json", inputs=()) -> None:
    """Refuse an unusable output file (--json, calibrate's --out) before the
    work, not after it (single-process and `--np` runs alike): a directory,
    a device or pipe (the atomic rename would replace `/dev/null` with a
    file), one of the run's `inputs` (the program, the data file)."""
    p = Path(path)
    if str(path) == "-":   # (was: a file named '-', and `wrote -`)
        raise GdslError(f"{flag} -: names a file, not stdout (stdout carries gdsl's own output); give a file "
                        "name, e.g. run.json, or ./- for a file of that name")
    if p.is_dir():
        raise GdslError(f"{flag} {p}: is a directory (give a file name)")
    if str(path).endswith(("/", os.sep)):   # was: `newdir/` wrote a file `newdir`
        raise GdslError(f"{flag} {path}: names a directory (ends with '/'; give a file name)")
    if p.exists() and not p.is_file():
        raise GdslError(f"{flag} {p}: not a regular file (a device or pipe would be replaced by a file; give a "
                        "file name)")
    for i in inputs:
        if i is not None and p.exists() and Path(i).exists() and p.resolve() == Path(i).resolve():
            raise GdslError(f"{flag} {p}: is this run's input {i} (it would be overwritten; give another name)")
    parent = p.parent
    if not parent.exists():
        raise GdslError(f"{flag} {p}: no such directory: {parent}")
    if not parent.is_dir():
        raise GdslError(f"{flag} {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise GdslError(f"{flag} {p}: cannot write in {parent} (permission denied)")
    import tempfile
    try:   # os.access passes for root where writing fails (/proc, /sys, a read-only mount): try it
        fd, probe = tempfile.mkstemp(prefix=_temp_prefix(p.name), suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise GdslError(f"{flag} {p}: cannot write in {parent} ({e.strerror or e})") from None


def finish_run(summary, writers) -> None:
    """The end of a run: print its summary on stdout (`summary()`), then
    write the user's files (`writers`, callables), each one even if stdout
    failed (`gdsl run ... | grep -m1 final`, a full disk) or a file before
    it did: the trained params are not lost to a failed metrics file. Then
    the first failure is raised (a file's before stdout's), the others
    printed."""
    import sys
    stdout_failed, failures = [], []
    try:
        summary()
        sys.stdout.flush()
    except OSError as e:
        stdout_failed.append(e)
    for write in writers:
        try:
            write()
        except (OSError, GdslError) as e:
            failures.append(e)
    failures += stdout_failed
    for e in failures[1:]:
        if not isinstance(e, BrokenPipeError):
            print(f"gdsl: error: {e}", file=sys.stderr)
    if failures:
        raise failures[0]


def kept_instead(path: str, epochs: int) -> bool:
    """A run that completed no epoch (Ctrl-C while the kernels compile, a
    loss NaN at epoch 1) does not replace an existing `--json` file with
    an empty record; it says so. True when the file is kept (helper-10:
    the last run's metrics were lost to `"epochs": []`)."""
    import sys
    if epochs or not os.path.lexists(path):
        return False
    kept = "the file there" if os.path.exists(path) else "the link there"   # a dangling symlink
    print(f"gdsl: --json {path}: not written (no epoch completed; {kept} is kept)", file=sys.stderr)
    return True


def write_json(path: str, payload: dict) -> None:
    """Write atomically (`write_atomic`); NaN -> null."""
    check_json_path(path)
    try:
        write_atomic(Path(path), json.dumps(_finite_or_null(payload), indent=2, default=str, allow_nan=False) + "\n")
    except OSError as e:   # the disk filled, the directory went away during the run
        raise GdslError(f"--json {path}: could not be written ({e.strerror or e})") from None


def save_state_dict(path: str, state: dict) -> None:
    """`gdsl run --save FILE`: the trained params as a plain state dict
    (`torch.save`; `model.load_state_dict(torch.load(FILE))` reads it back,
    weights_only as torch.load's default), written by `write_atomic`."""
    check_json_path(path, "--save")
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    try:
        write_atomic(Path(path), lambda fh: torch_save(tensors, fh, Path(path).parent), binary=True)
    except OSError as e:   # the disk filled, the directory went away during the run
        raise GdslError(f"--save {path}: could not be written ({e.strerror or e})") from None


def torch_save(obj, dest, where: Path) -> None:
    """torch.save(obj, dest), a failed write as an OSError: torch's zip
    writer raises a RuntimeError ("PytorchStreamWriter failed writing file",
    "enforce fail at inline_container.cc") when the disk fills (was: an
    internal error, and in `gdsl run --np` the --json after it not written;
    helper-76). `where`: the directory written in."""
    import shutil

    import torch
    try:
        torch.save(obj, dest)
    except RuntimeError as e:
        try:
            free = shutil.disk_usage(where).free
        except OSError:
            free = None
        why = "No space left on device" if free == 0 else \
            "the write failed" + (f" with {free} bytes free there" if free is not None else "")
        raise OSError(errno.ENOSPC if free == 0 else errno.EIO, why) from e


def write_atomic(p: Path, content, binary: bool = False) -> None:
    """Write whole, then rename over the name: a partial file never replaces
    a good one, the temporary file has a fresh name (no file of the user's
    is touched), and a symlink at the name is replaced, not written through.
    `content`: the text, or a function that writes to the open file."""
    import tempfile

    if p.is_dir() and not p.is_symlink():   # was: the rename's error, naming the temporary file
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(p))
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(p.name), suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _temp_prefix(name: str) -> str:
    """The start of a temporary file's name beside `name`: cut, so that a
    legal name of up to 255 bytes still leaves room for mkstemp's random part
    and suffix (was: a 240-255-character --json refused as "File name too
    long" in its directory; helper-76). In the file system's bytes: a name
    that is not UTF-8 (`--json $'\\xff.json'`) was an internal error."""
    return f".{os.fsdecode(os.fsencode(name)[:200])}."


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def discard_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered or written
    for it (the reader left, or the disk is full) does not fail again, at
    exit or in `gdsl run --np`'s output pump (gdsl/dist/launch.py)."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def not_a_file(path: Path) -> str | None:
    """What is at `path` when it is not a regular file to read ("is a
    directory", "is a broken symbolic link to X", "is a FIFO"), or "does not
    exist"; None for a regular file (a symlink to one included)."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            try:
                return f"is a broken symbolic link to {os.readlink(path)}"
            except OSError:
                return "is a broken symbolic link"
        return "does not exist"
    except OSError as e:   # a loop of symlinks, a name too long, no permission on the directory
        return (e.strerror or str(e)).lower()
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return f"is {kind}"



def broken_link(path: str | Path) -> str | None:
    """For a path that is not there, because it or one of its parents is a
    symlink to nothing (mkdir then fails with "File exists", open with "No
    such file"): "is a broken symbolic link to T", or "is in L, a broken
    symbolic link to T"; else None."""
    path = Path(path)
    q = path
    while not q.exists() and q != q.parent:
        if q.is_symlink():
            try:
                to = f" to {os.readlink(q)}"
            except OSError:
                to = ""
            return f"is a broken symbolic link{to}" if q == path else f"is in {q}, a broken symbolic link{to}"
        q = q.parent
    return None


class GuardedStderr:
    """sys.stderr while a command runs (gdsl/cli.py `main`): once writing to it
    fails (its reader left: `gdsl run ... 2>&1 >log | head -1`; a full disk),
    the stream is pointed at /dev/null and what follows is dropped, as for
    stdout (`discard_stdout`). Was: the BrokenPipeError of the next progress
    line ended `gdsl run` (exit 141) in the middle of training, its --json and
    --save not written. `failed` is that error (the status says it at the end)."""

    def __init__(self, stream) -> None:
        self.stream, self.failed = stream, None

    def write(self, text: str) -> int:
        if self.failed is None:
            try:
                return self.stream.write(text)
            except OSError as e:
                self._fail(e)
        return len(text)

    def flush(self) -> None:
        if self.failed is None:
            try:
                self.stream.flush()
            except OSError as e:
                self._fail(e)

    def _fail(self, e: OSError) -> None:
        self.failed = e
        try:   # what the stream still holds, flushed at exit, goes nowhere (not "Exception ignored ...")
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self.stream.fileno())
            os.close(fd)
        except (OSError, ValueError, AttributeError):
            pass

    def isatty(self) -> bool:
        try:
            return self.failed is None and self.stream.isatty()
        except (OSError, ValueError, AttributeError):
            return False

    def __getattr__(self, name):   # fileno, encoding, errors, buffer, ...: the stream's own
        return getattr(self.stream, name)


def tolerant_stdout() -> None:
    """In a gdsl process (the command, an MPI rank): stdout writes a file name
    that is not UTF-8 (`gdsl compile $'\\xff.gd' --print-loc`, rank 0's
    `wrote ...` lines) as the bytes it is, where Python's stdout takes UTF-8
    only (a UTF-8 locale, PYTHONIOENCODING=utf-8): was an internal compiler
    error, "surrogates not allowed". Where stdout is not UTF-8, what it cannot
    encode is escaped (as stderr does)."""
    stream = sys.stdout
    if stream is None or getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
        return
    utf8 = (getattr(stream, "encoding", "") or "").lower().replace("-", "").replace("_", "") == "utf8"
    try:
        stream.reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")
    except (ValueError, OSError, AttributeError):
        pass
