"""Errors of distributed runs, and how a rank reports one.

A rank that fails reports `gdsl: error: rank R: MESSAGE` and calls
MPI_Abort. Started by `gdsl run --np P` (gdsl.dist.launch), it writes the
report to the run directory instead of stderr, and the launcher prints the
reports once each after the ranks have stopped: the same message from
several ranks once, naming them; an error every rank raises alike
(`AllRanksError`) without a rank. Started by another launcher (mpiexec,
srun: there is no run directory), the rank prints the report itself, in
one write, so that two ranks' lines never run together.
"""
from __future__ import annotations

import json
import os
import time

from gdsl.diagnostics import GdslError


class AllRanksError(GdslError):
    """An error every rank raises at the same point with the same message
    (after a collective, or from what every rank has alike: the program,
    the checkpoint index): reported once, without a rank."""


def error_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"rank-{rank}.error")


def report(rank: int, message: str, all_ranks: bool, run_dir: str | None, located: bool = False) -> None:
    """Report a rank's failure (see the module docstring); `located`: the
    message is a rendered compile error (`file:line:col: error: ...`),
    printed as it is when every rank has it."""
    if run_dir:
        path = error_path(run_dir, rank)
        try:
            with open(path + ".tmp", "w") as f:
                json.dump({"rank": rank, "message": message, "all_ranks": all_ranks, "located": located}, f)
            os.replace(path + ".tmp", path)   # whole or absent: another rank's abort may kill this one
            return
        except OSError:
            pass
    if all_ranks and rank != 0:
        time.sleep(5)   # rank 0 reports it and its MPI_Abort stops this rank first
    if all_ranks and rank == 0:
        text = message + "\n" if located else f"gdsl: error: {message}\n"
    else:
        text = f"gdsl: error: rank {rank}: {message}\n"
    try:
        os.write(2, text.encode())
    except OSError:
        pass


def mark_waiting(run_dir: str, rank: int) -> None:
    """This rank stopped the run after waiting --comm-timeout seconds in an
    MPI call (gdsl/dist/worker.py, `_stop_waiting`)."""
    try:
        with open(os.path.join(run_dir, f"rank-{rank}.waiting"), "w"):
            pass
    except OSError:
        pass


def not_joined(run_dir: str, reports: dict, P: int) -> str | None:
    """When every rank that reported timed out waiting in MPI (--comm-timeout)
    and some ranks did not: the line naming those, which were not in any
    MPI call (the ranks out of step with the others report where they
    waited, as the others do). Else None."""
    try:
        waiting = {int(n[5:-8]) for n in os.listdir(run_dir) if n.startswith("rank-") and n.endswith(".waiting")}
    except (OSError, ValueError):
        return None
    if not waiting or not set(reports) <= waiting or len(waiting) >= P:
        return None
    rest = [r for r in range(P) if r not in waiting]
    who = f"rank {rest[0]}" if len(rest) == 1 else f"ranks {', '.join(map(str, rest))}"
    lines = [f"gdsl: error: {who} never joined: busy or hung outside MPI for that long (a deadlock, a hung "
             "file system, an endless loop)"]
    for r in rest:   # where each one was, when the first waiting rank asked (worker.py, `_ask_for_stacks`)
        frames = main_thread_stack(run_dir, r)
        if frames:
            lines.append(f"  rank {r} was here (most recent call first):")
            lines += ["    " + f for f in frames[:STACK_FRAMES]]
            if len(frames) > STACK_FRAMES:
                lines.append(f"    ... ({len(frames) - STACK_FRAMES} more)")
    return "\n".join(lines)


STACK_FRAMES = 12   # the innermost frames of a stuck rank that the launcher prints


def stack_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"rank-{rank}.stack")


def main_thread_stack(run_dir: str, rank: int) -> list[str]:
    """The frames of rank R's main thread, innermost first (`File "...", line N
    in f`), from its faulthandler dump (rank-R.stack: a first line `main
    thread 0x<id>`, then one dump per request); [] when there is none."""
    try:
        with open(stack_path(run_dir, rank), errors="replace") as f:
            head, *lines = f.read().splitlines()
    except (OSError, ValueError):
        return []
    if not head.startswith("main thread 0x"):
        return []
    ident = head[len("main thread "):]
    frames: list[str] = []
    mine = False
    for line in lines:
        if line.endswith("(most recent call first):"):   # `Thread 0x...` / `Current thread 0x...`
            if mine:
                break   # the first dump's main thread is enough
            mine = line.split()[-5] == ident
        elif mine and line.startswith("  File "):
            frames.append(line.strip())
    return frames


def read_reports(run_dir: str) -> dict[int, tuple[str, bool, bool]]:
    """rank -> (message, all_ranks, located) of the ranks that reported a failure."""
    out: dict[int, tuple[str, bool, bool]] = {}
    try:
        names = os.listdir(run_dir)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("rank-") and name.endswith(".error")):
            continue
        try:
            with open(os.path.join(run_dir, name)) as f:
                d = json.load(f)
            out[int(d["rank"])] = (str(d["message"]), bool(d.get("all_ranks")), bool(d.get("located")))
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue
    return out


def format_reports(reports: dict[int, tuple[str, bool, bool]], P: int) -> list[str]:
    """One line (or block, for a located compile error) per distinct message,
    in order of the lowest rank that reported it."""
    groups: dict[str, list[int]] = {}
    everywhere: set[str] = set()
    located: set[str] = set()
    for r in sorted(reports):
        msg, all_ranks, loc = reports[r]
        groups.setdefault(msg, []).append(r)
        if all_ranks:
            everywhere.add(msg)
        if loc:
            located.add(msg)
    lines = []
    for msg, ranks in groups.items():
        if msg in everywhere or (len(ranks) == P and P > 1):
            lines.append(msg if msg in located else f"gdsl: error: {msg}")
        elif len(ranks) == 1:
            lines.append(f"gdsl: error: rank {ranks[0]}: {msg}")
        else:
            lines.append(f"gdsl: error: ranks {', '.join(map(str, ranks))}: {msg}")
    return lines
