"""helper-25: the 1.5D layout (rows_replicated(c) held the rank's own block
twice) and `gdsl plan` read as an HPC user sizing a run (numbers recomputed
by hand from docs/cost-model.md's formulas; units never in e-notation)."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gdsl.diagnostics import GdslError
from gdsl.dist.part import build_parts, load_part, parse_spec, save_part
from helpers import gdsl_here, random_graph

ROOT = Path(__file__).resolve().parents[1]


def _blocks(n, nb):
    """Contiguous block rows, sizes differing by at most one (own arithmetic)."""
    sizes = [n // nb + (1 if b < n % nb else 0) for b in range(nb)]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return [np.arange(starts[b], starts[b + 1]) for b in range(nb)]


@pytest.mark.parametrize("P,c", [(2, 1), (3, 1), (4, 2), (8, 2), (9, 3)])
def test_rows_replicated_local_rows_hold_each_row_once(P, c):
    g = random_graph(n=57, e=300, seed=P + c)
    src, dst = g.src.numpy(), g.dst.numpy()
    parts = build_parts(parse_spec(f"rows_replicated({c})"), g, P)
    blocks = _blocks(g.num_nodes, P // c)
    s = P // (c * c)
    for r, pr in enumerate(parts):
        i, j = divmod(r, c)
        stage = list(range(j * s, (j + 1) * s))     # CAGNET Alg. 2 line 5: q = j s + k
        want = np.concatenate([blocks[i]] + [blocks[q] for q in stage if q != i])
        assert np.unique(pr.gid).size == pr.gid.size, f"rank {r}: a row held twice"
        assert np.array_equal(pr.gid, want)
        assert np.array_equal(pr.owned_rows, blocks[i])
        # the edges: into block i, from the stage blocks, each once, through the local ids
        inside = np.isin(dst, blocks[i]) & np.isin(src, np.concatenate([blocks[q] for q in stage]))
        got = sorted(zip(pr.gid[pr.src].tolist(), pr.owned_rows[pr.dst].tolist()))
        assert got == sorted(zip(src[inside].tolist(), dst[inside].tolist()))
    if c == 1:   # exactly 1D's rows: N rows per rank at most (was N + N/P)
        assert all(pr.n_local == g.num_nodes for pr in parts)


def test_rows_replicated_part_of_the_old_layout_is_refused(tmp_path):
    g = random_graph(n=30, e=120)
    pr = build_parts(parse_spec("rows_replicated(1)"), g, 2)[0]
    own = np.arange(pr.n_own)
    pr.gid = np.concatenate([pr.gid[:pr.n_own], pr.gid])          # own block twice, as before
    pr.in_degree = np.concatenate([pr.in_degree[own], pr.in_degree])
    pr.out_degree = np.concatenate([pr.out_degree[own], pr.out_degree])
    save_part(pr, tmp_path, {})
    with pytest.raises(GdslError, match="earlier gdsl.*partition again"):
        load_part(tmp_path, 0, 2)


def test_units_never_in_e_notation():
    from gdsl.cost.choose import _fmt_count, fmt_bytes, fmt_time
    assert fmt_bytes(1020 * 2 ** 20) == "0.996 GiB"          # was '1.02e+03 MiB'
    assert fmt_bytes(999 * 2 ** 20) == "999 MiB"
    assert fmt_time(0.9996) == "1 s"                          # was '1e+03 ms'
    assert fmt_time(0.0009996) == "1 ms"
    assert fmt_time(1234.5) == "1230 s"                       # was '1.23e+03 s'
    assert _fmt_count(999.7e3) == "1M"                        # was '1e+03k'
    assert _fmt_count(2.5e15) == "2500T"


def _plan(P, *extra):
    r = gdsl_here("plan", ROOT / "programs" / "gcn.gd", "--dims", "N=10M,E=100M,F=128,C=40", "--np", P, *extra)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r


def test_plan_table_for_100M_edges_matches_hand_arithmetic(tmp_path):
    out = tmp_path / "p.json"
    r = _plan(64, "--mem-per-rank", "1G", "--json", out)
    # the table's memory, time and count columns: never '1.02e+03 MiB'
    cols = [ln.split(")")[-1] for ln in r.stdout.splitlines() if re.match(r"^[*P! ]{2,4}\w+\(|^[*P! ]{2,4}\w+ ", ln)]
    assert cols and not any("e+" in c for c in cols), r.stdout
    d = json.loads(out.read_text())
    prof, cand = d["profile"], {c["plan"]: c for c in d["candidates"]}
    N, E, P = 1e7, 1e8, 64
    al, be, gs, gg = prof["alpha"], prof["beta"], prof["gamma_spmm"], prof["gamma_gemm"]
    # narrow orders: 128 -> 16 dense-first, 16 -> 40 sparse-first: every SpMM 16 wide, 4 of them
    # rows: the ranks' default alltoallv moves the hash partition's halo, S w per SpMM with
    # S = (N - N/P)(1 - (1 - 1/P)^(E/N)), P-1 messages (was CAGNET's broadcast, (P-1)/P N w;
    # helper-34); weight all-reduce f_{l-1} f_l, lg P messages once per epoch (sync_grads)
    S = (N - N / P) * (1 - (1 - 1 / P) ** (E / N))
    rows = cand["rows(partition=hash)"]
    assert rows["words_per_rank"] == pytest.approx(4 * S * 16 + 128 * 16 + 16 * 40)
    assert rows["messages_per_rank"] == pytest.approx(4 * (P - 1) + math.log2(P))
    # 1.5D c=2: N w/c + N w c/P per SpMM, (P/c^2) lg(P/c^2) messages; Y: lg P once (the ranks
    # all-reduce over all P, not CAGNET's lg(P/c) per layer)
    rr = cand["rows_replicated(c=2)"]
    assert rr["words_per_rank"] == pytest.approx(4 * (N * 16 / 2 + N * 16 * 2 / P) + 128 * 16 + 16 * 40)
    assert rr["messages_per_rank"] == pytest.approx(4 * (P / 4) * math.log2(P / 4) + math.log2(P))
    # edge cut, hash halo S; S w per SpMM
    ec = [c for k, c in cand.items() if k.startswith("edge_cut")][0]
    assert ec["words_per_rank"] == pytest.approx(4 * S * 16 + 128 * 16 + 16 * 40)
    # compute: SpMM bytes 4 (2 nnz + nnz w + rows w) / gamma_spmm + GEMM flops / gamma_gemm
    nnz, n = E / P, N / P
    spmm = 4 * 4 * (2 * nnz + nnz * 16 + n * 16) / gs
    gemm = 2 * n * (128 * 16 + 16 * 40 + 2 * 16 * 40 + 128 * 16) / gg   # no G^0
    assert ec["compute"] == pytest.approx(spmm + gemm)
    assert ec["comm"] == pytest.approx(al * ec["messages_per_rank"] + be * ec["words_per_rank"])
    assert ec["time"] == pytest.approx(ec["compute"] + ec["comm"])
    assert d["choice"] == min((c for c in d["candidates"] if c["fits"]), key=lambda c: c["time"])["plan"]


@pytest.mark.mpi
def test_rows_replicated_1_trains_as_one_process():
    pytest.importorskip("mpi4py")
    args = [str(ROOT / "programs" / "gcn.gd"), "--data", "cora", "--epochs", "3"]
    loss = lambda text: [float(x) for x in re.findall(r"^epoch \d+/\d+\s+loss (\S+)", text, re.M)]
    one = gdsl_here("run", *args)
    assert one.returncode == 0, one.stderr
    r = subprocess.run([sys.executable, "-m", "gdsl", "run", *args, "--np", "2", "--partition",
                        "rows_replicated(1)"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = loss(r.stdout + r.stderr), loss(one.stdout + one.stderr)
    assert len(a) == len(b) == 3 and a == pytest.approx(b, rel=1e-4), (a, b)
