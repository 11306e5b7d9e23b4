"""Per-rank parts (gdsl/dist/part.py), without MPI: every edge is owned
exactly once (1.5D: once per process row's share), the parts reassemble the
graph, the peer tables line up, and files round-trip or are refused."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdsl.diagnostics import GdslError
from gdsl.dist.part import build_parts, load_part, parse_spec, save_part
from gdsl.graph.graph import Graph


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 40))
    e = draw(st.integers(0, 120))
    src = draw(st.lists(st.integers(0, n - 1), min_size=e, max_size=e))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=e, max_size=e))
    rng = np.random.default_rng(e)
    return Graph.from_edges(np.array(src, np.int64), np.array(dst, np.int64), n,
                            features=rng.random((n, 3), dtype=np.float32), labels=np.zeros(n, np.int64),
                            masks={"train": np.ones(n, bool)})


def _edges(g):
    return sorted(zip(g.src.tolist(), g.dst.tolist()))


@settings(max_examples=40, deadline=None)
@given(graphs(), st.sampled_from(["rows(hash)", "rows(random)", "rows(block)", "vertex_cut", "features",
                                  "redistribute", "replicate"]), st.integers(1, 5))
def test_every_edge_owned_once_and_parts_reassemble(g, plan, P):
    parts = build_parts(parse_spec(plan), g, P)
    owners = parts if plan != "replicate" else parts[:1]
    eids = np.concatenate([p.eid for p in owners])
    assert sorted(eids.tolist()) == list(range(g.num_edges))          # each edge exactly once
    got = sorted((int(p.gid[s]), int(p.owned_rows[d])) for p in owners for s, d in zip(p.src, p.dst))
    assert got == _edges(g)                                            # the parts reassemble the graph
    counted = np.concatenate([p.owned_rows[p.counted] for p in parts])
    assert sorted(counted.tolist()) == list(range(g.num_nodes))        # each vertex's loss counted once
    for p in parts:                                                    # features travel with their rows
        if plan != "features":
            assert np.array_equal(p.features, g.features.numpy()[p.owned_rows])
    if plan.startswith("rows"):
        sizes = [p.n_own for p in parts]
        assert max(sizes) - min(sizes) <= 1                            # balanced rows
        for r, p in enumerate(parts):                                  # halo tables line up
            for q, o in enumerate(parts):
                assert np.array_equal(o.owned_rows[o.send_idx[r]], p.gid[p.recv_idx[q]])


@settings(max_examples=25, deadline=None)
@given(graphs(), st.sampled_from([(4, 2), (8, 2), (9, 3)]))
def test_rows_replicated_covers_each_block_row_once_per_team(g, pc):
    P, c = pc
    parts = build_parts(parse_spec(f"rows_replicated({c})"), g, P)
    for i in range(P // c):
        team = parts[i * c:(i + 1) * c]
        eids = np.concatenate([p.eid for p in team])
        dst_in_team = {int(e) for e, d in enumerate(g.dst.tolist()) if d in set(team[0].owned_rows.tolist())}
        assert sorted(eids.tolist()) == sorted(dst_in_team)            # the team's edges, split among members


def test_vertex_cut_reports_replication_and_tree_tables_line_up():
    from gdsl.graph.synthetic import rmat_graph
    g = rmat_graph(500, 8)
    parts = build_parts(parse_spec("vertex_cut"), g, 4)
    assert 1.0 <= parts[0].meta["replication_factor"] <= 4.0
    for r, p in enumerate(parts):
        for q, o in enumerate(parts):
            assert np.array_equal(p.gid[p.send_idx[q]], o.gid[o.recv_idx[r]])   # leaf rows = root rows


def test_part_files_round_trip_and_are_checked(tmp_path):
    from gdsl.graph.synthetic import rmat_graph
    g = rmat_graph(200, 6)
    parts = build_parts(parse_spec("rows(hash)"), g, 2)
    for p in parts:
        save_part(p, tmp_path, {"program": "abc"})
    back = load_part(tmp_path, 1, 2, expect={"program": "abc"})
    assert np.array_equal(back.gid, parts[1].gid) and back.spec == parts[1].spec
    assert all(np.array_equal(a, b) for a, b in zip(back.send_idx, parts[1].send_idx))
    with pytest.raises(GdslError, match="written for rank 1 of 2, but this is rank 1 of 3"):
        load_part(tmp_path, 1, 3)
    with pytest.raises(GdslError, match="partition mismatch: program"):
        load_part(tmp_path, 0, 2, expect={"program": "xyz"})
    with pytest.raises(GdslError, match="missing partition file for rank 2"):
        load_part(tmp_path, 2, 3)
    (tmp_path / "part-0.npz").write_bytes(b"\x80\x04pickle")
    with pytest.raises(GdslError, match="not a gdsl partition file"):
        load_part(tmp_path, 0, 2)


def _resave(path: Path, edit) -> None:
    """`path` rewritten with `edit(arrays)` applied and its header kept (what a hand edit does)."""
    with np.load(path) as z:
        a = {k: z[k].copy() for k in z.files}
    edit(a)
    np.savez(path, **a)


def _drop_digest(a: dict) -> None:
    """The header as an earlier gdsl wrote it: no `content`."""
    header = json.loads(bytes(a["header"]).decode())
    del header["content"]
    a["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)


@pytest.mark.parametrize("what, edit", [
    ("features scaled", lambda a: a.__setitem__("features", a["features"] * 3)),
    ("edge ids moved out of range", lambda a: a.__setitem__("src", a["src"] + 100000)),   # was an IndexError
    ("a mask flipped", lambda a: a.__setitem__("mask.train", ~a["mask.train"])),
])
def test_a_part_file_edited_after_it_was_written_is_refused(tmp_path, what, edit):
    """helper-13: the header (program, graph, partition key) was checked, the
    arrays were trusted: scaled features trained silently on them."""
    from gdsl.graph.synthetic import rmat_graph
    g = rmat_graph(200, 6)
    g.masks["train"] = torch.arange(200) % 2 == 0
    for p in build_parts(parse_spec("rows(hash)"), g, 2):
        save_part(p, tmp_path, {"program": "abc"})
    load_part(tmp_path, 1, 2)   # as written: accepted
    _resave(tmp_path / "part-1.npz", edit)
    with pytest.raises(GdslError, match=r"part-1.npz: its arrays are not the ones `gdsl partition` wrote"):
        load_part(tmp_path, 1, 2)
    _resave(tmp_path / "part-0.npz", _drop_digest)
    with pytest.raises(GdslError, match=r"part-0.npz: written by an earlier gdsl, without the digest"):
        load_part(tmp_path, 0, 2)


def test_the_digest_takes_empty_and_odd_arrays():
    """helper-14: a [0, k] array (a rank with no rows, F < P under `features`) was
    an internal error in memoryview's cast."""
    from gdsl.dist.part import content_digest
    odd = {"e": np.zeros((0, 3), np.float32), "z": np.zeros((4, 0)), "s": np.float64(2.0),
           "be": np.arange(6, dtype=">f4").reshape(2, 3), "t": np.arange(12).reshape(3, 4)[:, ::2],
           "b": np.ones(3, bool)}
    d = content_digest(odd)
    assert d == content_digest({k: np.ascontiguousarray(v) for k, v in odd.items()})
    assert d != content_digest({**odd, "e": np.zeros((0, 2), np.float32)})   # the shape counts, not only bytes


def test_a_part_file_cut_short_says_so(tmp_path):
    from gdsl.dist.part import read_header
    from gdsl.graph.synthetic import rmat_graph
    save_part(build_parts(parse_spec("rows(hash)"), rmat_graph(50, 4), 1)[0], tmp_path, {})
    data = (tmp_path / "part-0.npz").read_bytes()
    (tmp_path / "part-0.npz").write_bytes(data[:len(data) // 2])
    with pytest.raises(GdslError, match=r"an .npz archive cut short or damaged: its zip directory is missing"):
        read_header(tmp_path / "part-0.npz")


@pytest.mark.parametrize("bad,msg", [("rows(foo)", "expected hash, random, block or metis"),
                                     ("grid2d", "unknown partition"),
                                     ("rows_replicated(x)", "must be an integer"),
                                     ("redistribute(x)", "R_A, must be an integer"),
                                     ("redistribute(0)", "R_A must be at least 1")])
def test_bad_specs_are_refused(bad, msg):
    with pytest.raises(GdslError, match=msg):
        parse_spec(bad)


@settings(max_examples=25, deadline=None)
@given(graphs(), st.sampled_from([(2, 1), (4, 1), (4, 2), (6, 3), (6, 2)]))
def test_rdm_row_panels_hold_each_edge_once_per_replica(g, pr):
    """RDM §III-E: R_A replicas of A, each cut into P/R_A row panels held by
    the R_A ranks of a grid row: every in-edge of a panel's rows is on each
    of those ranks, and nowhere else."""
    P, R_A = pr
    parts = build_parts(parse_spec(f"redistribute({R_A})"), g, P)
    edges = _edges(g)
    for i in range(P // R_A):
        row = parts[i * R_A:(i + 1) * R_A]
        lo, hi = (int(v) for v in row[0].extra["panel"])
        want = sorted((s, d) for s, d in edges if lo <= d < hi)
        for p in row:
            assert np.array_equal(p.extra["panel"], [lo, hi])
            got = sorted(zip(p.extra["full_src"].tolist(), (p.extra["full_dst"] + lo).tolist()))
            assert got == want
    assert sum(p.extra["full_src"].size for p in parts) == R_A * g.num_edges
    with pytest.raises(GdslError, match="must divide"):
        build_parts(parse_spec(f"redistribute({P + 1})"), g, P)


def test_delay_only_for_vertex_cut():
    with pytest.raises(GdslError, match="applies to vertex_cut"):
        parse_spec("rows", delay=2)
    assert not parse_spec("vertex_cut", delay=5).exact and parse_spec("vertex_cut").exact


@pytest.mark.parametrize("given", ["rows(hash)", "edge_cut", "edge_cut(metis)", "features", "replicate"])
def test_delay_error_names_the_partition_given(given):
    """The error names the partition as written (edge_cut was reported as `rows`)."""
    with pytest.raises(GdslError) as e:
        parse_spec(given, delay=3)
    assert str(e.value) == f"delay = 3 applies to vertex_cut (DistGNN cd-r / 0c) only, not to {given}"


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 60), rest=st.sampled_from([(), (1,), (7,), (3, 5)]), chunk=st.integers(1, 200),
       seed=st.integers(0, 2 ** 31), data=st.data())
def test_a_ranks_dropout_mask_drawn_in_blocks_is_the_single_process_mask(n, rest, chunk, seed, data):
    # dist/module.keep_mask_rows draws the [n, *rest] mask `chunk` floats at a time (a rank holds one block, not
    # the whole graph's mask): its rows / columns must be the one-draw mask's, or distributed dropout is not exact
    import torch

    from gdsl.dist.module import keep_mask_rows
    whole = torch.rand((n,) + rest, generator=torch.Generator().manual_seed(seed)) >= 0.4
    rows = torch.tensor(data.draw(st.permutations(range(n))), dtype=torch.int64)[: data.draw(st.integers(0, n))]
    # the ranks' float32 masks (0/1 floats, dtype=torch.float32) are the same mask
    dtype = data.draw(st.sampled_from([torch.bool, torch.float32]))
    got = keep_mask_rows(n, rest, torch.Generator().manual_seed(seed), 0.4, rows=rows, chunk=chunk, dtype=dtype)
    assert torch.equal(got, whole.index_select(0, rows).to(dtype))
    if rest:
        lo = data.draw(st.integers(0, rest[-1]))
        hi = data.draw(st.integers(lo, rest[-1]))
        got = keep_mask_rows(n, rest, torch.Generator().manual_seed(seed), 0.4, cols=(lo, hi), chunk=chunk,
                             dtype=dtype)
        assert torch.equal(got, whole[..., lo:hi].to(dtype))


def test_parts_of_a_changed_file_or_another_split_are_refused(tmp_path, capsys):
    """The files' graph hash covers every feature row, the labels and the masks (was: the edges, the feature
    shape and the first 64 rows, so changed later rows, labels or masks, or `--split 1` against split 0's
    files, ran on the stale copies without a word; `gdsl partition` had no --split; helper-70). Refused by
    the launcher, before mpiexec."""
    from gdsl.cli import main
    rng = np.random.default_rng(7)
    n = 100
    base = dict(src=rng.integers(0, n, 400), dst=rng.integers(0, n, 400),
                features=rng.standard_normal((n, 8)).astype(np.float32), labels=rng.integers(0, 3, n),
                train_masks=rng.random((2, n)) < 0.5, val_masks=rng.random((2, n)) < 0.3,
                test_masks=rng.random((2, n)) < 0.3)
    data = tmp_path / "g.npz"
    gcn = str(Path(__file__).resolve().parent.parent / "programs" / "gcn.gd")

    def run_on(parts, *extra):
        capsys.readouterr()
        rc = main(["run", gcn, "--data", str(data), "--np", "2", "--parts", str(parts), "--epochs", "1", *extra])
        return rc, capsys.readouterr().err

    np.savez(data, **base)
    for split in (0, 1):
        assert main(["partition", gcn, "--data", str(data), "--np", "2", "--partition", "rows(hash)",
                     "--split", str(split), "--out", str(tmp_path / f"p{split}")]) == 0
    rc, err = run_on(tmp_path / "p0", "--split", "1")
    assert rc == 1 and "p0: partitioned for other labels or masks (another --split, or the data file's labels " \
                       "or masks changed since); partition again" in err, err
    for change in ("features", "labels"):
        z = {k: v.copy() for k, v in base.items()}
        if change == "features":
            z["features"][64:] = 0   # beyond the 64 rows the hash read
        else:
            z["labels"] = (z["labels"] + 1) % 3
        np.savez(data, **z)
        rc, err = run_on(tmp_path / "p0")
        want = "another graph (not" if change == "features" else "other labels or masks"
        assert rc == 1 and f"partitioned for {want}" in err, (change, err)
    # split 1's files fit a --split 1 run: the check passes (no launch here)
    from gdsl.dist.cli_run import _check_existing
    from gdsl.graph.io import load_graph
    np.savez(data, **base)
    import gdsl
    _check_existing(tmp_path / "p1", 2, gdsl.compile(gcn), load_graph(str(data), split=1), None)
    with pytest.raises(GdslError, match="other labels or masks"):
        _check_existing(tmp_path / "p1", 2, gdsl.compile(gcn), load_graph(str(data), split=0), None)
