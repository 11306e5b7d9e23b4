"""helper-37: review of the one-all-reduce / rows(hash) alltoallv pricing,
the CLI and the data-loading changes since 1737c05.

1. `gdsl run --np P --halo bcast` runs the edge cut (rows(metis)) with the
   same allgatherv of whole blocks as rows(hash): (P-1)/P N w words per
   SpMM, measured 86,656 bytes = (2708/2) x 16 x 4 per rank for gcn.gd's
   layer-1 exchange on Cora at P = 2 (`--report comm`). The model priced
   edge_cut at S w whatever --halo said, while rows(hash) followed it.
2. One-hot labels saved as floats (np.eye(C)[y] is float64) were told to
   "store them as integers: labels.astype(np.int64)" (still one-hot, then
   refused for their shape); docs/cli.md promises `labels.argmax(1)`.
   Graph.from_edges said the same. Float 0/1 masks had no fix at all.
"""
import numpy as np
import pytest

from gdsl.cost.choose import candidates
from gdsl.cost.problem import Problem
from gdsl.cost.strategies import edge_cut, rows
from gdsl.diagnostics import GdslError

CORA = dict(N=2708, E=13264, widths=(1433, 16, 7))


# ---------------------------------------------------------------- 1. edge_cut under --halo bcast

def test_edge_cut_under_halo_bcast_is_priced_as_the_broadcast():
    # P = 2, gcn.gd on Cora (narrow order: 16 then 7 wide, both ways): per SpMM (P-1)/P N w =
    # 1354 w words; 4 SpMMs: 1354 x (16 + 7 + 7 + 16) = 62,284 words, plus the all-reduce
    # (1433 x 16 + 16 x 7 = 23,040 words here, params=None) -- the same as rows(halo=bcast).
    pb = Problem(P=2, **CORA)
    cands = {cd.cost.strategy: cd for cd in candidates(pb, strategies=("rows", "edge_cut"), halo=145.0,
                                                       rows_halo=1000.0, rows_exchange="bcast")}
    ec, rw = cands["edge_cut"].cost, cands["rows"].cost
    bc = [o for o in ec.ops if o.op == "bcast"]
    assert len(bc) == 4 and not [o for o in ec.ops if o.op == "halo_exchange"]
    assert sorted(float(o.words) for o in bc) == [1354 * 7, 1354 * 7, 1354 * 16, 1354 * 16]
    assert float(ec.words) == pytest.approx(float(rw.words)) == pytest.approx(1354 * 46 + 1433 * 16 + 16 * 7)
    assert dict(ec.params).get("halo") == "bcast"
    # the default (alltoallv) keeps S w
    ec_a = {cd.cost.strategy: cd for cd in candidates(pb, strategies=("edge_cut",), halo=145.0)}["edge_cut"].cost
    assert sorted(float(o.words) for o in ec_a.ops if o.op == "halo_exchange") == [145 * 7, 145 * 7, 145 * 16, 145 * 16]


def test_edge_cut_exchange_is_checked():
    with pytest.raises(ValueError):
        edge_cut(Problem(P=2, **CORA), 10, exchange="allgather")
    assert float(edge_cut(Problem(P=2, **CORA), 10, exchange="bcast").words) == pytest.approx(
        float(rows(Problem(P=2, **CORA), exchange="bcast").words))


# ---------------------------------------------------------------- 2. data hints

def _cora(tmp_path, **kw):
    d = dict(np.load(__import__("gdsl").__path__[0] + "/data/cora.npz"))
    d.update(kw)
    p = tmp_path / "g.npz"
    np.savez(p, **d)
    return p, d


def test_float_one_hot_labels_say_argmax(tmp_path):
    from gdsl.graph.io import load_graph
    y = dict(np.load(__import__("gdsl").__path__[0] + "/data/cora.npz"))["labels"]
    for lab in (np.eye(7)[y], np.eye(7, dtype=np.float32)[y], np.eye(7, dtype=np.int64)[y]):
        p, _ = _cora(tmp_path, labels=lab)
        with pytest.raises(GdslError, match=r"one-hot rows: save the class ids, labels.argmax\(1\)"):
            load_graph(str(p))


def test_float_ogb_column_labels_say_both_fixes(tmp_path):
    from gdsl.graph.io import load_graph
    y = dict(np.load(__import__("gdsl").__path__[0] + "/data/cora.npz"))["labels"]
    p, _ = _cora(tmp_path, labels=y[:, None].astype(np.float32))
    with pytest.raises(GdslError, match=r"labels\[:, 0\]\.astype\(np\.int64\)"):
        load_graph(str(p))


def test_float_mask_of_zeros_and_ones_says_astype_bool(tmp_path):
    from gdsl.graph.io import load_graph
    m = dict(np.load(__import__("gdsl").__path__[0] + "/data/cora.npz"))["train_mask"]
    p, _ = _cora(tmp_path, train_mask=m.astype(np.float32))
    with pytest.raises(GdslError, match=r"mask.astype\(bool\)"):
        load_graph(str(p))


def test_from_edges_one_hot_labels_say_argmax():
    from gdsl.graph import Graph
    y = np.array([0, 1, 2, 1])
    for lab in (np.eye(3)[y], np.eye(3, dtype=np.int64)[y]):
        with pytest.raises(GdslError, match=r"labels.argmax\(1\)"):
            Graph.from_edges([0, 1, 2], [1, 2, 3], features=np.ones((4, 2)), labels=lab)
    # whole-number float class ids keep their hint
    with pytest.raises(GdslError, match=r"whole numbers: pass them as integers"):
        Graph.from_edges([0, 1, 2], [1, 2, 3], features=np.ones((4, 2)), labels=y.astype(float))


def test_valid_data_loads_without_a_hint_or_warning():
    import warnings

    from gdsl.graph.io import load_graph
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("cora", "citeseer"):
            load_graph(name)


# ---------------------------------------------------------------- 3. P3's halo

def test_features_priced_on_a_given_block_halo():
    # P3's layers >= 2 run on block rows (dist/part.py _features); gcn.gd on Cora at P = 4 the ranks'
    # largest layer-2 halo is 1132 rows (`gdsl run --np 4 --partition features --report comm`: 31,696
    # bytes = 1132 x 7 x 4), the hash estimate 1535. candidates(features_halo=) prices the given one.
    from gdsl.cost.strategies import features
    pb = Problem(P=4, **CORA)
    got = {cd.cost.strategy: cd for cd in candidates(pb, strategies=("features",), features_halo=1132.0,
                                                     measured={"features_halo": "measured"})}["features"]
    assert float(got.cost.words) == pytest.approx(float(features(pb, 1132.0, orders="narrow").words))
    assert any("S=1132 measured" in n for n in got.estimates)
    est = {cd.cost.strategy: cd for cd in candidates(pb, strategies=("features",), halo=140.0,
                                                     measured={"halo": "measured (METIS)"})}["features"]
    assert not any("METIS" in n for n in est.estimates)   # its halo is not the edge cut's


# ---------------------------------------------------------------- 4. auto under --halo bcast

def test_auto_under_halo_bcast_runs_a_non_row_choice_as_priced(capsys):
    # gcn.gd on Cora at P = 8 under --halo bcast: edge_cut and rows(hash) are now priced as the
    # broadcast (1.502 ms), redistribute(R_A=2) is faster (1.5 ms) and is the choice. --halo applies
    # to the row plans only (`--partition redistribute(2) --halo bcast` is refused): the spec the
    # ranks get carries the default exchange and the line says so (was: halo=bcast in the spec, which
    # P3's data-parallel layers would run as an allgatherv, priced as alltoallv).
    import gdsl
    from gdsl.dist.cli_run import choose_spec
    from gdsl.graph.io import load_graph, resolve_data
    from pathlib import Path
    prog = gdsl.compile(str(Path(__file__).resolve().parent.parent / "programs" / "gcn.gd"))
    graph = load_graph(resolve_data(None))
    spec = choose_spec(prog, graph, 8, None, None, "bcast", 0)
    err = capsys.readouterr().err
    assert spec.strategy != "rows", (spec, err)   # not the row plans at this P (the premise)
    assert spec.halo == "alltoallv"
    assert "--halo bcast applies to the row plans (rows, edge_cut) only" in err
    # a row choice keeps the broadcast
    spec2 = choose_spec(prog, graph, 2, None, None, "bcast", 0, quiet=True)
    assert spec2.strategy == "rows" and spec2.halo == "bcast"


def test_parts_written_under_halo_bcast_for_a_non_row_choice_run_with_it(tmp_path, capsys):
    # `gdsl partition --np 8 --halo bcast` (auto: redistribute(2), written with the default
    # exchange) then `gdsl run --parts DIR --halo bcast`: --halo is checked against row plans only
    import gdsl
    from gdsl.cli import main
    from gdsl.dist.cli_run import _check_existing
    from gdsl.graph.io import load_graph, resolve_data
    from pathlib import Path
    gcn = str(Path(__file__).resolve().parent.parent / "programs" / "gcn.gd")
    assert main(["partition", gcn, "--np", "8", "--halo", "bcast", "--out", str(tmp_path / "p")]) == 0
    prog = gdsl.compile(gcn)
    h = _check_existing(tmp_path / "p", 8, prog, load_graph(resolve_data(None)), None, None, "bcast")
    assert h["spec"]["strategy"] != "rows" and h["spec"]["halo"] == "alltoallv"
