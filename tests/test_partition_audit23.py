"""helper-23: `gdsl partition` and `gdsl run --np P --parts DIR` as an HPC
user with MPI/METIS/DGL habits uses them. Every plan's files are checked
against the graph with this file's own numpy code (each edge on exactly one
rank, halos and peer tables, degrees, rows, labels, masks, the summary's
counts); a re-partition stopped halfway (Ctrl-C, SIGTERM) must leave no
directory a run takes (was: part-0 of the new partition beside the old
files, which the ranks trained on when only the halo exchange, the features
or the masks differed: a hang until --comm-timeout, or mixed data);
a foreign partition.json is not overwritten; exit codes."""
from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gdsl.cli import main
from gdsl.dist.part import load_part
from test_dist_errors import MPIEXEC, _env, _has_mpi

ROOT = Path(__file__).resolve().parent.parent
GCN, SAGE = str(ROOT / "programs" / "gcn.gd"), str(ROOT / "programs" / "sage.gd")   # sage.gd: no graph options
CORA = ROOT / "gdsl" / "data" / "cora.npz"


def mpi(test):
    return pytest.mark.mpi(pytest.mark.skipif(not _has_mpi(), reason="needs mpi4py and mpiexec")(test))


def gdsl(capsys, *argv) -> tuple[int, str, str]:
    """`gdsl ARGV` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:   # argparse's usage errors
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A directed graph with isolated vertices (30..39), a duplicate edge and
    a self loop, as an .npz of the documented format."""
    rng = np.random.default_rng(5)
    n = 40
    src = np.concatenate([rng.integers(0, 30, 150), [3, 3, 7]])
    dst = np.concatenate([rng.integers(0, 30, 150), [5, 5, 7]])
    train = np.zeros(n, bool)
    train[:20] = True
    train[35] = True
    val = np.zeros(n, bool)
    val[20:30] = True
    path = tmp_path_factory.mktemp("g") / "small.npz"
    np.savez(path, src=src, dst=dst, features=rng.standard_normal((n, 6)).astype(np.float32),
             labels=rng.integers(0, 3, n), train_mask=train, val_mask=val, test_mask=~(train | val))
    return path


def own_graph(npz: Path, self_loops: bool, symmetric: bool):
    """The edges a program's `graph` options make of the file's, computed
    here: symmetric adds each missing reverse edge, self_loops gives every
    vertex exactly one."""
    z = np.load(npz)
    s, d = z["src"].astype(np.int64), z["dst"].astype(np.int64)
    n = z["features"].shape[0]
    if symmetric:
        pairs = sorted(set(zip(s.tolist(), d.tolist())) | set(zip(d.tolist(), s.tolist())))
        s, d = np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)
    if self_loops:
        keep = s != d
        s, d = np.concatenate([s[keep], np.arange(n)]), np.concatenate([d[keep], np.arange(n)])
    return s, d, n, z


def layout_errors(pdir: Path, npz: Path, self_loops=False, symmetric=False) -> list[str]:
    """What is wrong with the partition in `pdir`, as each rank loads it,
    against the graph in `npz` (an empty list: nothing)."""
    s, d, n, z = own_graph(npz, self_loops, symmetric)
    info = json.loads((pdir / "partition.json").read_text())
    P = info["P"]
    assert sorted(p.name for p in pdir.glob("part-*")) == sorted(f"part-{r}.npz" for r in range(P))
    parts = [load_part(pdir, r, P) for r in range(P)]
    strategy = parts[0].spec.strategy
    indeg, outdeg = np.bincount(d, minlength=n), np.bincount(s, minlength=n)
    got, errs = Counter(), []
    owner = np.full(n, -1)
    counted = np.zeros(n, int)
    for r, pr in enumerate(parts):
        own = pr.owned_rows
        gs = pr.gid[pr.src]
        # 1D, 1.5D, P3 and RDM index destinations by computed rows; the vertex cut by local rows
        gd = pr.gid[pr.dst] if strategy in ("vertex_cut", "replicate") else own[pr.dst]
        got.update(zip(gs.tolist(), gd.tolist()))
        counted[own[pr.counted]] += 1
        for what, a, b in (("in-degree", pr.in_degree, indeg[pr.gid]), ("out-degree", pr.out_degree, outdeg[pr.gid]),
                           ("labels", pr.labels, z["labels"][own])):
            if not np.array_equal(a, b):
                errs.append(f"rank {r}: {what}")
        for m in ("train", "val", "test"):
            if not np.array_equal(pr.masks[m], z[f"{m}_mask"][own]):
                errs.append(f"rank {r}: mask {m}")
        if strategy == "features":   # P3: a column slice of every row
            lo, hi = pr.extra["feature_cols"]
            if not np.array_equal(pr.features, z["features"][:, lo:hi]):
                errs.append(f"rank {r}: feature columns")
        elif not np.array_equal(pr.features, z["features"][own]):
            errs.append(f"rank {r}: feature rows")
        for key, mine in (("rows_per_rank", pr.n_own), ("edges_per_rank", pr.src.size),
                          ("local_rows_per_rank", pr.gid.size)):
            if info[key][r] != mine:
                errs.append(f"rank {r}: partition.json {key} {info[key][r]}, the rank loads {mine}")
        if strategy in ("rows", "features", "redistribute"):
            if (owner[own] != -1).any():
                errs.append(f"rank {r}: a row owned twice")
            owner[own] = r
            halo = np.setdiff1d(gs, own)
            if not np.array_equal(np.sort(pr.gid), np.union1d(own, halo)):
                errs.append(f"rank {r}: local rows are not its rows and its halo")
            if info["halo_rows_per_rank"][r] != halo.size:
                errs.append(f"rank {r}: partition.json halo {info['halo_rows_per_rank'][r]}, the edges need "
                            f"{halo.size}")
    if strategy == "replicate":
        got = Counter({k: v // P for k, v in got.items()})
    if strategy in ("rows", "features", "redistribute"):
        if (owner < 0).any():
            errs.append(f"rows without an owner: {np.flatnonzero(owner < 0)[:5]}")
        else:
            for r, pr in enumerate(parts):   # each edge with its destination's owner; the peer tables line up
                if (owner[pr.owned_rows[pr.dst]] != r).any():
                    errs.append(f"rank {r}: an edge into another rank's row")
                received = np.sort(pr.gid[np.concatenate([pr.recv_idx[q] for q in range(P) if q != r] + [[]])
                                          .astype(np.int64)])
                if not np.array_equal(received, np.setdiff1d(pr.gid, pr.owned_rows)):
                    errs.append(f"rank {r}: the rows it receives are not its halo")
                for q in range(P):
                    if q != r:
                        need = pr.gid[pr.recv_idx[q]]
                        sent = parts[q].owned_rows[parts[q].send_idx[r]]
                        if (owner[need] != q).any() or not np.array_equal(need, sent):
                            errs.append(f"rank {r}: the rows from rank {q} are not the ones it sends")
    if strategy == "vertex_cut":
        rf = sum(pr.gid.size for pr in parts) / n
        if abs(info["replication_factor"] - rf) > 1e-3:
            errs.append(f"partition.json replication factor {info['replication_factor']}, the ranks hold {rf:.4f}")
    if not (counted == 1).all():   # every vertex's loss and accuracy counted by exactly one rank
        errs.append(f"vertices counted {sorted(set(counted.tolist()))} times: {np.flatnonzero(counted != 1)[:5]}")
    want = Counter(zip(s.tolist(), d.tolist()))
    if got != want:
        errs.append(f"edges: {sum((want - got).values())} missing, {sum((got - want).values())} extra")
    return errs


PLANS = ("rows(hash)", "rows(random)", "rows(block)", "rows(metis)", "edge_cut", "rows_replicated(1)",
         "rows_replicated(2)", "vertex_cut", "features", "redistribute", "redistribute(2)", "replicate")


@pytest.mark.parametrize("P", [2, 3, 4])
def test_every_plan_puts_each_edge_on_one_rank(capsys, tmp_path, small, P):
    """Each plan `gdsl partition` takes, at P = 2, 3, 4, on a directed graph
    with isolated vertices, a duplicate edge and a self loop: what the ranks
    load is the graph, and partition.json says what they load. Plans P
    cannot run are refused with exit 1 and the reason."""
    for plan in PLANS:
        out = tmp_path / re.sub(r"\W", "_", plan)
        rc, stdout, err = gdsl(capsys, "partition", SAGE, "--data", small, "--np", P, "--partition", plan,
                               "--out", out)
        if (plan == "rows_replicated(2)" and P % 4) or (plan == "redistribute(2)" and P % 2):
            assert rc == 1 and err.startswith(f"gdsl: error: {plan}: ") and "divide" in err, (plan, err)
            assert not out.exists()
            continue
        assert rc == 0, (plan, err)
        assert stdout.startswith(f"wrote {P} partition files to {out} ("), stdout
        assert layout_errors(out, small) == [], plan


@pytest.mark.parametrize("data, P, plan", [(CORA, 3, "rows(metis)"), (CORA, 4, "vertex_cut"),
                                           (ROOT / "gdsl" / "data" / "citeseer.npz", 4, "rows_replicated(2)")])
def test_builtin_graphs_with_graph_options(capsys, tmp_path, data, P, plan):
    """gcn.gd's `graph G (self_loops, symmetric)` on Cora and CiteSeer
    (CiteSeer has isolated vertices): the ranks hold the edges after the
    options, each once."""
    name = data.stem
    rc, _, err = gdsl(capsys, "partition", GCN, "--data", name, "--np", P, "--partition", plan, "--out", tmp_path / "p")
    assert rc == 0, err
    assert layout_errors(tmp_path / "p", data, self_loops=True, symmetric=True) == []


def _headers(pdir: Path) -> dict[str, dict]:
    out = {}
    for f in sorted(pdir.glob("part-*.npz")):
        with np.load(f, allow_pickle=False) as z:
            out[f.name] = json.loads(bytes(z["header"]).decode())
    return out


def _runnable_or_absent(pdir: Path, P: int) -> None:
    """What `gdsl run --parts` requires of a directory it takes: no part-0
    (it partitions again), or every rank's file of one write."""
    names = sorted(p.name for p in pdir.iterdir())
    assert not [x for x in names if "tmp" in x], names   # nothing half-written left
    if "part-0.npz" not in names:
        return
    hs = _headers(pdir)
    assert sorted(hs) == [f"part-{r}.npz" for r in range(P)], names
    ident = {(h["partition"], h["strategy"], h["graph"], h["program"]) for h in hs.values()}
    assert len(ident) == 1, ident


def test_a_repartition_stopped_mid_write_leaves_nothing_a_run_takes(capsys, tmp_path, monkeypatch):
    """Ctrl-C while `gdsl partition` writes a directory that held another
    partition (same rows, other --halo). Was: part-0 of the new one beside
    part-1 and part-2 of the old (their partition key agrees), accepted by
    `gdsl run --parts`; the ranks then ran different exchanges and waited
    for each other until --comm-timeout. Also the temporary file of the
    interrupted write stayed."""
    d = tmp_path / "p"
    assert gdsl(capsys, "partition", GCN, "--np", 3, "--partition", "rows", "--out", d)[0] == 0
    real, calls = np.savez, []

    def savez(path, **arrays):   # the second file: cut short by Ctrl-C
        calls.append(path)
        if len(calls) == 2:
            Path(path).write_bytes(b"PK\x03\x04 half")
            raise KeyboardInterrupt
        return real(path, **arrays)
    monkeypatch.setattr(np, "savez", savez)
    rc, _, err = gdsl(capsys, "partition", GCN, "--np", 3, "--partition", "rows", "--halo", "bcast", "--out", d)
    monkeypatch.undo()
    assert rc == 130 and len(calls) == 2, err
    assert err.endswith("holds no partition a run would take\ngdsl: interrupted\n"), err
    _runnable_or_absent(d, 3)
    # and partitioning again makes it whole
    assert gdsl(capsys, "partition", GCN, "--np", 3, "--partition", "rows", "--halo", "bcast", "--out", d)[0] == 0
    _runnable_or_absent(d, 3)
    assert {h["strategy"] for h in _headers(d).values()} == {"rows(hash) halo=bcast"}


def test_sigterm_mid_write_exits_143_and_leaves_nothing_a_run_takes(tmp_path):
    """SIGTERM (timeout, a batch scheduler) to `gdsl partition` while it
    writes: was the default action (killed, status -15, a temporary file
    left); now as Ctrl-C: exit 143, no part-0, nothing half-written."""
    d = tmp_path / "p"
    script = ("import sys, time\n"
              "import gdsl.dist.part as part\n"
              "real = part.save_part\n"
              "def slow(*a, **k):\n"
              "    r = real(*a, **k)\n"
              "    print('saved', r.name, file=sys.stderr, flush=True)\n"
              "    time.sleep(60)\n"
              "    return r\n"
              "part.save_part = slow\n"
              "from gdsl.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    p = subprocess.Popen([sys.executable, "-c", script, "partition", GCN, "--np", "2", "--partition", "rows",
                          "--out", str(d)], stderr=subprocess.PIPE, text=True, env=_env())
    try:
        line = p.stderr.readline()
        assert line.startswith("saved part-"), line
        p.send_signal(signal.SIGTERM)
        rest = p.stderr.read()
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 143, (rc, rest)
    assert rest.endswith("gdsl: terminated (SIGTERM)\n") and "Traceback" not in rest, rest
    assert not (d / "part-0.npz").exists()
    _runnable_or_absent(d, 2)


def test_a_foreign_partition_json_is_not_overwritten(capsys, tmp_path):
    """--out a directory of other tools' files (a partition.json of one's
    own, notes): was overwritten without a word. Refused before any file is
    written; files of other names stay as they are."""
    d = tmp_path / "mine"
    d.mkdir()
    (d / "partition.json").write_text('{"num_parts": 4, "graph_name": "cora"}\n')   # DGL-like
    (d / "notes.txt").write_text("x")
    rc, out, err = gdsl(capsys, "partition", GCN, "--np", 2, "--partition", "rows", "--out", d)
    assert rc == 1 and out == "", err
    assert err == (f"gdsl: error: {d / 'partition.json'}: exists and is not the summary `gdsl partition` writes; "
                   "partition into another directory, or move that file away\n")
    assert (d / "partition.json").read_text() == '{"num_parts": 4, "graph_name": "cora"}\n'
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt", "partition.json"]


def test_repartitioning_with_fewer_ranks_and_other_options(capsys, tmp_path):
    """P = 4 then P = 2 into one directory: the larger partition's part-2
    and part-3 go, a file of another program named part-9.npz stays, the
    summary and the headers are the new partition's."""
    d = tmp_path / "p"
    assert gdsl(capsys, "partition", GCN, "--np", 4, "--partition", "vertex_cut", "--out", d)[0] == 0
    (d / "part-9.npz").write_bytes(b"not gdsl's")
    rc, _, err = gdsl(capsys, "partition", GCN, "--np", 2, "--partition", "rows(metis)", "--out", d)
    assert rc == 0, err
    assert sorted(p.name for p in d.iterdir()) == ["part-0.npz", "part-1.npz", "part-9.npz", "partition.json"]
    assert json.loads((d / "partition.json").read_text())["P"] == 2
    (d / "part-9.npz").unlink()
    assert layout_errors(d, CORA, self_loops=True, symmetric=True) == []


def test_usage_errors_exit_2_and_errors_exit_1(capsys, tmp_path, small):
    """Usage errors exit 2 with the command's usage; errors exit 1 with one
    line, before anything is chosen or written: --out a file or under one
    was found after the cost model and METIS had run (minutes on a large
    graph); --split -1 was exit 1."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    usage = [("--np", 0, "--out", tmp_path / "x"), ("--out", tmp_path / "x"), ("--np", 2),
             ("--np", 2, "--out", ""), ("--np", 2, "--out", tmp_path / "x", "--split", -1),   # (was: exit 1)
             ("--np", 2, "--out", tmp_path / "x", "--halo", "ring")]
    for extra in usage:
        rc, _, err = gdsl(capsys, "partition", SAGE, "--data", small, *extra)
        assert rc == 2 and "gdsl partition: error: " in err, (extra, err)
    errors = [(("--out", afile), f"gdsl: error: {afile}: exists and is not a directory"),
              (("--out", afile / "sub"), f"gdsl: error: {afile / 'sub'}: cannot create the directory ({afile} is "
                                         "not a directory)"),
              (("--partition", "rows("), "gdsl: error: partition 'rows(': write NAME or NAME(ARG)"),
              (("--partition", "grid2d"), "gdsl: error: --partition grid2d: grid2d and grid3d are modelled"),
              (("--partition", "rows", "--delay", "2"), "gdsl: error: delay = 2 applies to vertex_cut"),
              (("--partition", "rows", "--split", "3"), "gdsl: error: "),
              (("--train", "nope"), "gdsl: error: ")]
    for extra, said in errors:
        args = ("--np", 2, "--out", tmp_path / "y", *extra) if "--out" not in extra else ("--np", 2, *extra)
        rc, out, err = gdsl(capsys, "partition", SAGE, "--data", small, *args)
        assert rc == 1 and err.startswith(said) and out == "", (extra, err)
        assert "partition = auto" not in err, err
    assert not (tmp_path / "y").exists()


def test_idle_ranks_and_one_rank_are_said(capsys, tmp_path, small):
    """More ranks than vertices: `gdsl run --np` warns that ranks get none,
    `gdsl partition` said nothing; one rank: "1 partition file"."""
    rc, out, err = gdsl(capsys, "partition", SAGE, "--data", small, "--np", 48, "--partition", "rows",
                        "--out", tmp_path / "p")
    assert rc == 0 and "gdsl partition: warning: 48 ranks for 40 vertices" in err, err
    rows = json.loads((tmp_path / "p" / "partition.json").read_text())["rows_per_rank"]
    assert rows == [1] * 40 + [0] * 8   # hash: v % P, by this test's own arithmetic
    rc, out, err = gdsl(capsys, "partition", SAGE, "--data", small, "--np", 1, "--out", tmp_path / "q")
    assert rc == 0 and out.startswith(f"wrote 1 partition file to {tmp_path / 'q'} (replicate"), out


def test_help_and_docs_name_the_same_options(capsys):
    """docs/cli.md's usage of `gdsl partition` and `--help` list the same flags."""
    rc, out, _ = gdsl(capsys, "partition", "--help")
    assert rc == 0
    helped = set(re.findall(r"(--[a-z][a-z-]*)", out)) - {"--help"}
    doc = (ROOT / "docs" / "cli.md").read_text()
    usage = doc[doc.index("## gdsl partition"):]
    usage = usage[usage.index("```") + 3:]
    usage = usage[:usage.index("```")]
    assert set(re.findall(r"(--[a-z][a-z-]*)", usage)) == helped


# ------------------------------------------------------------------ ranks


def _launch(*argv, timeout=180):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=_env(), check=False)


def _mixed(capsys, tmp_path, name, first: tuple, second: tuple) -> Path:
    """part-1 of a partition written with `first`, part-0 of the same rows
    written with `second`: what a stale copy on one node leaves."""
    a, b = tmp_path / f"{name}-a", tmp_path / f"{name}-b"
    for d, extra in ((a, first), (b, second)):
        assert gdsl(capsys, "partition", GCN, "--np", 2, "--partition", "rows", "--out", d, *extra)[0] == 0
    shutil.copy(a / "part-1.npz", b / "part-1.npz")
    return b


@mpi
def test_ranks_refuse_files_of_one_partition_written_twice(capsys, tmp_path):
    """The same rows and edges, part-0 written with --halo bcast, part-1 with
    the default: was taken, and the ranks waited in different exchanges until
    --comm-timeout (30 min by default). Features changed between the two
    writes (foreign launcher): was taken, rank 1 trained on the old
    features. Both refused by the ranks before training, naming the file."""
    d = _mixed(capsys, tmp_path, "halo", (), ("--halo", "bcast"))
    t0 = time.monotonic()
    r = _launch(sys.executable, "-m", "gdsl.cli", "run", GCN, "--np", "2", "--parts", str(d), "--epochs", "1",
                "--comm-timeout", "60")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (f"gdsl: error: {d}: part-1.npz belongs to another partition than part-0.npz (a directory refreshed in "
            "part, or a stale copy; written as rows(hash) halo=alltoallv, part-0.npz as rows(hash) halo=bcast)") \
        in r.stderr, r.stderr
    assert time.monotonic() - t0 < 50
    z = dict(np.load(CORA))
    z["features"] = z["features"] * 2
    np.savez(tmp_path / "cora2.npz", **z)
    d = _mixed(capsys, tmp_path, "feat", ("--data", str(CORA)), ("--data", str(tmp_path / "cora2.npz")))
    r = _launch(MPIEXEC, "-n", "2", sys.executable, "-m", "gdsl.cli", "run", GCN, "--data",
                str(tmp_path / "cora2.npz"), "--parts", str(d), "--epochs", "1", "--comm-timeout", "60")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert (f"gdsl: error: {d}: part-1.npz belongs to another partition than part-0.npz (a directory refreshed in "
            "part, or a stale copy; written for another graph)") in r.stderr, r.stderr


@mpi
def test_a_run_partitions_again_where_a_stopped_partition_was(capsys, tmp_path):
    """A directory a stopped `gdsl partition` left (no part-0, the other
    files of the new partition): `gdsl run --np 2 --parts DIR` partitions
    into it again and trains; the files are then one partition."""
    d = tmp_path / "p"
    assert gdsl(capsys, "partition", GCN, "--np", 2, "--partition", "rows", "--out", d)[0] == 0
    (d / "part-0.npz").unlink()
    r = _launch(sys.executable, "-m", "gdsl.cli", "run", GCN, "--np", "2", "--parts", str(d), "--epochs", "2",
                "--partition", "rows(metis)")
    assert r.returncode == 0, r.stderr
    assert "[rows(metis) halo=alltoallv, 2 ranks]" in r.stdout, r.stdout
    assert layout_errors(d, CORA, self_loops=True, symmetric=True) == []
    assert {h["strategy"] for h in _headers(d).values()} == {"rows(metis) halo=alltoallv"}
