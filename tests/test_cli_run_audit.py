"""Audit of gdsl/dist/cli_run.py (mutation testing, session 26): checks made
before the ranks start, the partition cache under a foreign launcher, and
what `gdsl run --np` says around the launch (launch() itself replaced:
test_launch_audit.py and the MPI tests cover it). All in-process."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import pytest

import gdsl
from gdsl.diagnostics import GdslError
from gdsl.dist.cli_run import _cache_name, _run_as_rank, check_delay
from helpers import gdsl_here

ROOT = Path(__file__).resolve().parent.parent
GCN, SAGE = str(ROOT / "programs" / "gcn.gd"), str(ROOT / "programs" / "sage.gd")


def test_a_delay_up_to_the_epochs_is_allowed():
    """cd-r with r = epochs delivers its first partials in the last epoch:
    the message says `give r <= epochs`, so r = epochs passes."""
    check_delay(3, 3)
    check_delay("none", 1)
    check_delay(0, 1)
    with pytest.raises(GdslError, match=r"delay = 4 .* give r <= 3"):
        check_delay(4, 3)


def test_parts_written_with_another_delay_are_refused(tmp_path):
    """--delay is compared with the partition in --parts like --halo and
    --partition are (test_dist_errors checks those)."""
    d = tmp_path / "parts"
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", "vertex_cut", "--delay", "2", "--out", str(d))
    assert r.returncode == 0, r.stderr
    r = gdsl_here("run", GCN, "--np", "2", "--parts", str(d), "--delay", "0", "--epochs", "1")
    assert r.returncode == 1
    assert f"gdsl: error: {d}: partitioned with delay = 2, but --delay asks for 0; partition again or drop --delay" \
        in r.stderr, r.stderr


def _args(**kw) -> argparse.Namespace:
    base = dict(partition=None, delay=None, halo=None, seed=0, mem_per_rank=None, np_=None, parts=None)
    return argparse.Namespace(**{**base, **kw})


def test_the_partition_cache_is_keyed_by_every_plan_argument():
    """docs/distributed.md: under a foreign launcher rank 0 partitions into
    .gdsl-parts/<program>-<plan>-<P>/, <plan> a hash of the graph and
    --partition, --delay, --halo, --seed, --mem-per-rank: another value of
    any of them (or another P) must not reuse a partition."""
    prog = gdsl.compile(GCN)
    cora, citeseer = gdsl.load_graph("cora"), gdsl.load_graph("citeseer")
    base = _cache_name(_args(), prog, cora, 2)
    assert base == _cache_name(_args(), prog, cora, 2)
    others = {
        "P": _cache_name(_args(), prog, cora, 4),
        "graph": _cache_name(_args(), prog, citeseer, 2),
        "program": _cache_name(_args(), gdsl.compile(SAGE), cora, 2),
        "partition": _cache_name(_args(partition="rows(random)"), prog, cora, 2),
        "delay": _cache_name(_args(delay=2), prog, cora, 2),
        "halo": _cache_name(_args(halo="bcast"), prog, cora, 2),
        "seed": _cache_name(_args(seed=1), prog, cora, 2),
        "mem": _cache_name(_args(mem_per_rank="4G"), prog, cora, 2),
    }
    assert len(set(others.values()) | {base}) == len(others) + 1, others
    assert all("/" not in n for n in others.values())


def test_the_ranks_get_the_run_flags():
    """What the launcher hands every rank (gdsl/dist/worker.py): the seed
    above all (dropout masks and the initial weights depend on it; the plans
    reproduce the single-process run of the same --seed)."""
    from gdsl.dist.cli_run import worker_args
    prog = gdsl.compile(GCN, hidden=8)
    args = argparse.Namespace(program=GCN, train=None, epochs=7, seed=5, json="o.json", save="p.pt", report="comm",
                              checkpoint="ck", checkpoint_every=2, resume=None, log_every=3, backend=None,
                              comm_timeout=30.0, data="citeseer", split=1)
    w = worker_args(args, prog, "/parts")
    assert w.pop("data").endswith("citeseer.npz") and w.pop("split") == 1   # for --json (helper-70)
    assert w == {"program": GCN, "train": None, "overrides": prog.overrides, "parts": "/parts", "epochs": 7,
                 "seed": 5, "json": "o.json", "save": "p.pt", "report": "comm", "checkpoint": "ck",
                 "checkpoint_every": 2, "resume": None, "log_every": 3, "backend": "reference",
                 "comm_timeout": 30.0}
    assert prog.overrides == {"hidden": 8}


@pytest.mark.parametrize("rank", [0, 1])
def test_np_must_match_the_ranks_a_foreign_launcher_started(monkeypatch, capsys, rank):
    """`mpiexec -n 2 gdsl run ... --np 3`: refused on every rank, said once,
    by rank 0 (was: by every rank; helper-72), and before any collective (no
    rank waits for a third)."""
    import types

    import mpi4py

    class Comm:
        def Get_size(self):
            return 2

        def Get_rank(self):
            return rank

        def bcast(self, obj, root=0):
            raise AssertionError("no collective before the check")
    fake = types.SimpleNamespace(COMM_WORLD=Comm())
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    monkeypatch.setattr(mpi4py, "MPI", fake, raising=False)
    assert _run_as_rank(_args(np_=3), None, None) == 1
    said = "gdsl: error: --np 3 but the launcher started 2 ranks\n"
    assert capsys.readouterr().err == (said if rank == 0 else "")


def test_parts_for_other_ranks_under_a_foreign_launcher_names_the_launcher(monkeypatch, capsys, tmp_path):
    """`mpiexec -n 2 gdsl run ... --parts D` with D written for 4 ranks and
    no --np: the rank count came from the launcher (was: "but --np is 2";
    helper-72)."""
    import types

    import mpi4py

    from gdsl.dist.cli_run import choose_spec
    from gdsl.dist.run import write_partition
    from helpers import random_graph
    prog, graph = gdsl.compile(GCN), random_graph()
    write_partition(prog, graph, choose_spec(prog, graph, 4, "rows", None, None, 0, None), 4, tmp_path / "p4")

    class Comm:
        def Get_size(self):
            return 2

        def Get_rank(self):
            return 0

        def bcast(self, obj, root=0):
            return obj
    fake = types.SimpleNamespace(COMM_WORLD=Comm())
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    monkeypatch.setattr(mpi4py, "MPI", fake, raising=False)
    assert _run_as_rank(_args(parts=str(tmp_path / "p4"), backend=None, resume=None), prog, graph) == 1
    assert capsys.readouterr().err == \
        f"gdsl: error: {tmp_path / 'p4'}: partitioned for 4 ranks, but the launcher started 2\n"


# ---------------------------------------------------------------- around launch() (replaced: no MPI)

@pytest.fixture
def fake_launch(monkeypatch):
    """Replace gdsl.dist.launch.launch: record its call, then run `then`."""
    import gdsl.dist.launch as launch_mod

    class Calls(list):
        then = staticmethod(lambda: 0)   # what launch() does after recording: return 0, or raise
    calls = Calls()

    def launch(args, P, extra_env=None, temp_dirs=None):
        calls.append({"args": args, "P": P, "temp_dirs": list(temp_dirs or []),
                      "existed": [Path(d).is_dir() for d in temp_dirs or []]})
        return calls.then()
    monkeypatch.setattr(launch_mod, "launch", launch)
    return calls


def test_a_stopped_run_says_its_save_file_was_not_written(tmp_path, fake_launch):
    """SIGTERM while the ranks train (launch raises Terminated after stopping
    them): exit 143, and a note that --save's file was not written (the
    ranks write it at the end) pointing to --checkpoint; the temporary
    partition directory is removed."""
    from gdsl.dist.launch import Terminated

    def stop():
        raise Terminated(signal.SIGTERM)
    fake_launch.then = stop
    saved, js = tmp_path / "params.pt", tmp_path / "m.json"
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "3", "--save", saved, "--json", js)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert r.stderr.strip().splitlines()[-3:] == [
        "gdsl: terminated (SIGTERM); all ranks stopped",
        f"gdsl: --save {saved}: not written (the ranks were stopped at once; --checkpoint DIR keeps a "
        "stopped distributed run's state)",
        f"gdsl: --json {js}: not written (the ranks were stopped at once)"]   # (was: not said; helper-70)
    (call,) = fake_launch
    assert call["P"] == 2 and call["args"]["save"] == str(saved)
    assert call["existed"] == [True] and not any(Path(d).exists() for d in call["temp_dirs"])


def _one_vertex_npz(path: Path) -> str:
    import numpy as np
    np.savez(path, src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64), features=np.ones((1, 3), np.float32),
             labels=np.array([1]), **{f"{k}_mask": np.ones(1, bool) for k in ("train", "val", "test")})
    return str(path)


def test_idle_ranks_are_warned_of_only_for_plans_that_split_the_vertices(tmp_path, fake_launch):
    """3 ranks for 1 vertex: rows leaves 2 ranks idle (warned); replicate gives
    every rank the whole graph (no warning)."""
    data = _one_vertex_npz(tmp_path / "one.npz")
    warning = "gdsl run: warning: 3 ranks for 1 vertices"
    r = gdsl_here("run", GCN, "--data", data, "--np", "3", "--partition", "rows", "--epochs", "1")
    assert r.returncode == 0 and warning in r.stderr, r.stderr
    r = gdsl_here("run", GCN, "--data", data, "--np", "3", "--partition", "replicate", "--epochs", "1")
    assert r.returncode == 0 and "replicate over 3 ranks" in r.stderr, r.stderr
    assert "warning" not in r.stderr, r.stderr
    assert [c["P"] for c in fake_launch] == [3, 3]


@pytest.mark.parametrize("stop,code,line", [("term", 128 + signal.SIGTERM, "gdsl: terminated (SIGTERM)"),
                                            ("int", 130, "gdsl: interrupted")])
def test_a_run_stopped_while_partitioning_started_no_rank(tmp_path, fake_launch, monkeypatch, stop, code, line):
    """Stopped before any rank started: no "all ranks stopped", no --save
    note (nothing was going to write it), no launch."""
    import gdsl.dist.run as run_mod
    from gdsl.dist.launch import Terminated

    def write_partition(*a, **kw):
        raise Terminated(signal.SIGTERM) if stop == "term" else KeyboardInterrupt
    monkeypatch.setattr(run_mod, "write_partition", write_partition)
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "3", "--save", tmp_path / "p.pt")
    assert r.returncode == code
    assert r.stderr.strip().splitlines()[-1] == line, r.stderr
    assert "--save" not in r.stderr and fake_launch == []


def test_redistribute_without_r_a_is_redistribute_p_against_parts(tmp_path):
    """`--partition redistribute` means redistribute(P) (docs/cli.md). Was:
    accepted for a partition written as redistribute(R) for any R (trained
    R_A = 1 while asking for P), and redistribute(2) at P = 2 refused for one
    written as redistribute, the same plan."""
    from gdsl.dist.cli_run import _check_existing
    prog, cora = gdsl.compile(GCN), gdsl.load_graph("cora")
    for text in ("redistribute(1)", "redistribute"):
        r = gdsl_here("partition", GCN, "--np", "2", "--partition", text, "--out", str(tmp_path / text))
        assert r.returncode == 0, r.stderr
    with pytest.raises(GdslError, match=r"partitioned as redistribute\(1\), but --partition asks for redistribute; partition again"):
        _check_existing(tmp_path / "redistribute(1)", 2, prog, cora, "redistribute")
    _check_existing(tmp_path / "redistribute(1)", 2, prog, cora, "redistribute(1)")
    _check_existing(tmp_path / "redistribute", 2, prog, cora, "redistribute(2)")
    _check_existing(tmp_path / "redistribute", 2, prog, cora, "redistribute")
    with pytest.raises(GdslError, match="but --partition asks for redistribute\\(1\\)"):
        _check_existing(tmp_path / "redistribute", 2, prog, cora, "redistribute(1)")


def test_a_schedule_delay_refused_for_the_flag_plan_says_where_it_came_from(tmp_path):
    """`delay = 3` in the schedule, `--partition rows(hash)` on the command
    line: the refusal says the delay is the schedule's and that --delay 0
    overrides it (was: the bare "delay = 3 applies to vertex_cut ... only";
    helper-72). Refused in the launcher, before any rank starts."""
    src = Path(GCN).read_text() + "\nschedule {\n    partition = vertex_cut\n    delay     = 3\n}\n"
    p = tmp_path / "cd3.gd"
    p.write_text(src)
    r = gdsl_here("run", p, "--np", "2", "--partition", "rows(hash)", "--epochs", "1")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "gdsl: error: delay = 3 applies to vertex_cut (DistGNN cd-r / 0c) only, not to rows(hash) (delay = 3 is "
        "the schedule's hint; --delay 0 runs rows(hash) exactly)"), r.stderr


@pytest.mark.parametrize("plan", ["vertex_cut", "replicate", "features"])
def test_halo_on_a_plan_without_a_halo_exchange_is_refused(plan, tmp_path):
    """--halo on a plan that exchanges no halo rows is refused as --delay on a
    row plan is (was: accepted without a word, the label showing no halo;
    helper-72). Refused in the launcher, before any rank starts."""
    r = gdsl_here("run", GCN, "--np", "2", "--partition", plan, "--halo", "bcast", "--epochs", "1")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        f"gdsl: error: --halo bcast applies to the row plans (rows, edge_cut: how they exchange halo rows) only, "
        f"not to {plan}"), r.stderr
    r = gdsl_here("partition", GCN, "--np", "2", "--partition", plan, "--halo", "bcast", "--out", tmp_path / "p")
    assert r.returncode == 1 and "--halo bcast applies to the row plans" in r.stderr, r.stderr


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_a_parts_directory_that_cannot_be_made_says_so():
    """(was: "/proc/nope: no such file", the errno of mkdir; helper-72)"""
    for cmd in (("partition", GCN, "--np", "2", "--out", "/proc/nope"),
                ("run", GCN, "--np", "2", "--parts", "/proc/nope", "--epochs", "1")):
        r = gdsl_here(*cmd)
        assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
            "gdsl: error: /proc/nope: cannot create the directory ("), r.stderr


def test_a_run_stopped_before_mpiexec_started_says_so_and_leaves_no_checkpoint_dir(tmp_path, fake_launch):
    """A signal between partitioning and mpiexec's start: was "all ranks
    stopped" and "not written (the ranks were stopped at once)", and the
    empty --checkpoint directory left behind (helper-3)."""
    def stop():
        e = KeyboardInterrupt()
        e.gdsl_before_ranks = True   # what launch() marks when no mpiexec ran
        raise e
    fake_launch.then = stop
    js, ck = tmp_path / "m.json", tmp_path / "ck"
    r = gdsl_here("run", GCN, "--np", "2", "--partition", "rows", "--epochs", "3", "--json", js,
                  "--checkpoint", ck)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines()[-3:] == [
        "gdsl: interrupted",
        f"gdsl: --json {js}: not written (the run was stopped before its ranks started)",
        f"gdsl: --checkpoint {ck}: no checkpoint was written"]
    assert not ck.exists()


def test_a_malformed_memory_budget_is_a_usage_error_and_parts_say_they_do_not_use_one(tmp_path, fake_launch):
    """--mem-per-rank that is no size: exit 2 before the data is read, for run
    and partition alike (was: exit 1 after loading it; helper-23's note).
    With --parts the budget cannot change the partition written there: a
    warning says so (was: ignored without a word)."""
    for cmd in ("run", "partition"):
        out = ("--out", tmp_path / "x") if cmd == "partition" else ()
        r = gdsl_here(cmd, GCN, "--np", "2", "--mem-per-rank", "4X", *out)
        assert r.returncode == 2 and "--mem-per-rank: cannot read '4X'" in r.stderr, (cmd, r.stderr)
    d = tmp_path / "parts"
    assert gdsl_here("partition", GCN, "--np", "2", "--partition", "rows", "--out", d).returncode == 0
    r = gdsl_here("run", GCN, "--np", "2", "--parts", d, "--mem-per-rank", "4G", "--epochs", "1")
    assert r.returncode == 0, r.stderr
    assert (f"gdsl run: warning: --mem-per-rank 4G is not used: the plan of the partition in {d} was chosen "
            "when it was written") in r.stderr.splitlines()
    assert len(fake_launch) == 1
