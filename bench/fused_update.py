"""Fused UPDATE measurements (issue 3, DistGNN-MB's fused update): what the
numba backend fuses around its aggregations, against the unfused ops, on one
benchmark graph.  Run with the main environment's Python:

    python bench/fused_update.py --graph uniform100k [--reps 7]

One JSON line per measurement (prefixed `@@`, as the peer scripts); run.py
runs it per graph and puts the table in RESULTS.md.  Each pair is measured
interleaved (A, B, A, B, ...), median wall and CPU time per call:

- epilogue: a layer's tail, dropout(relu(t + b)) on N x 128 with its
  backward: the reference's torch ops (add, relu, torch.rand >= p, mul, div)
  against the numba backend's one-pass epilogue kernel (kept: it is what
  NumbaModule runs);
- scale: SAGE's mean as the IR has it, aggregate(copy_src, sum) then mul by
  the vertex constant 1 / degree, forward and backward, against the scale
  fused into the aggregation's epilogue (kept);
- bias: GCN's dense-first second layer, the 16-wide aggregation by the
  constant edge weights, and the bias add after it (forward): the add's
  share bounds what fusing it into the aggregation's epilogue could save;
- gemm: GCN's sparse-first first layer, aggregation then @ W (128 x 128):
  the kernel plus torch's GEMM against one Numba kernel that aggregates a
  row and multiplies it by W while it is in cache (forward only);
- wperm: aggregation by constant edge weights (GCN's normalisation, f = 128,
  forward and the backward to x) reading the weights through the edge ids
  against reading them permuted into CSR slot order (kept);
- head_dot: GAT's attention scores (z * a_l).sum(-1), (z * a_r).sum(-1) on
  z [N, 4, 32], forward and backward, torch's ops against one pass (kept);
- linear: x @ W (N x 128 by 128 x 128), forward and backward, torch's
  matmul against torch's GEMM writing into huge-page outputs (kept).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import common  # noqa: E402
import graphs  # noqa: E402


def _fused_agg_gemm():
    from numba import njit, prange

    @njit(parallel=True, cache=True, fastmath={"contract"})
    def agg_gemm(chunks, indptr, indices, w, x, W, a, t, zero):
        """a[v] = sum_j w[j] x[indices[j]] (w in slot order), t[v] = a[v] @ W."""
        F = x.shape[1]
        C = W.shape[1]
        for c in prange(chunks.shape[0] - 1):
            for v in range(chunks[c], chunks[c + 1]):
                o = a[v]
                for d in range(F):
                    o[d] = zero
                j = indptr[v]
                end = indptr[v + 1]
                while j + 4 <= end:
                    x0 = x[indices[j]]
                    x1 = x[indices[j + 1]]
                    x2 = x[indices[j + 2]]
                    x3 = x[indices[j + 3]]
                    s0 = w[j]
                    s1 = w[j + 1]
                    s2 = w[j + 2]
                    s3 = w[j + 3]
                    for d in range(F):
                        o[d] += (x0[d] * s0 + x1[d] * s1) + (x2[d] * s2 + x3[d] * s3)
                    j += 4
                while j < end:
                    x0 = x[indices[j]]
                    s0 = w[j]
                    for d in range(F):
                        o[d] += x0[d] * s0
                    j += 1
                tv = t[v]
                for q in range(C):
                    tv[q] = zero
                for k in range(F):
                    ak = o[k]
                    Wk = W[k]
                    for q in range(C):
                        tv[q] += ak * Wk[q]

    return agg_gemm


def pair(name: str, what: str, a: tuple, b: tuple, reps: int, meta: dict) -> None:
    """Time a = (label, fn) against b = (label, fn), interleaved."""
    fa, fb = a[1], b[1]
    fa()
    fb()
    res = {a[0]: [], b[0]: []}
    for _ in range(reps):
        for label, f in (a, b):
            c0 = time.process_time()
            t0 = time.perf_counter()
            f()
            res[label].append((time.perf_counter() - t0, time.process_time() - c0))
    out = {**meta, "exp": name, "what": what}
    for label, ts in res.items():
        out[label] = {"median_s": statistics.median(t for t, _ in ts), "cpu_median_s": statistics.median(c for _, c in ts)}
    out["order"] = [a[0], b[0]]
    common.emit(out)
    common.log(f"  {name}: {a[0]} {out[a[0]]['median_s'] * 1e3:.1f} ms, {b[0]} {out[b[0]]['median_s'] * 1e3:.1f} ms")


def exp_epilogue(n: int, gen, reps: int, meta: dict) -> None:
    """dropout(relu(t + b)), p = 0.5, forward + backward."""
    import torch

    from gdsl.backends.numba import dense

    t = torch.randn(n, 128, generator=gen).requires_grad_()
    b = torch.zeros(128).requires_grad_()
    g = torch.randn(n, 128, generator=gen)

    def torch_epi():
        keep = torch.rand((n, 128), generator=torch.Generator().manual_seed(5)) >= 0.5
        y = torch.relu(t + b) * keep / 0.5
        torch.autograd.grad(y, (t, b), g)

    def fused_epi():
        y = dense.epilogue(t, b, "relu", 0.5, 5)
        torch.autograd.grad(y, (t, b), g)

    pair("epilogue", "dropout(relu(t + b)) on N x 128, forward + backward",
         ("torch ops", torch_epi), ("fused kernel", fused_epi), reps, meta)


def exp_scale(name: str, n: int, gen, reps: int, meta: dict) -> None:
    """SAGE's mean on the raw graph: aggregate then mul, or the scale in the kernel."""
    import torch

    from gdsl.backends.numba import CSRGraph, ops

    src, dst, _ = graphs.load(name, "raw")
    G = CSRGraph.build(torch.from_numpy(src), torch.from_numpy(dst), n)
    del src, dst
    x = torch.randn(n, 128, generator=gen).requires_grad_()
    g = torch.randn(n, 128, generator=gen)
    inv = (1.0 / G.in_csr.degree.clamp(min=1).double()).float()

    def unfused_scale():
        y = ops.aggregate(G, x, None, "copy_src", "sum") * inv.unsqueeze(1)
        torch.autograd.grad(y, x, g)

    def fused_scale():
        y = ops.aggregate(G, x, None, "copy_src", "sum", oscale=inv)
        torch.autograd.grad(y, x, g)

    pair("scale", "aggregate(copy_src, sum) * 1/degree on N x 128, forward + backward",
         ("aggregate, then mul", unfused_scale), ("scale in the epilogue", fused_scale), reps, meta)


def exp_gcn(name: str, n: int, gen, reps: int, meta: dict) -> None:
    """On the GCN graph (symmetric + self loops, constant edge weights): the
    bias after the 16-wide aggregation; aggregation + GEMM; the weights by
    edge id or in CSR order."""
    import numpy as np
    import torch

    from gdsl.backends.numba import CSRGraph, ops

    src, dst, _ = graphs.load(name, "sym_loops")
    G = CSRGraph.build(torch.from_numpy(src), torch.from_numpy(dst), n)
    deg = G.in_csr.degree.double()
    w = (1.0 / torch.sqrt(deg[torch.from_numpy(dst)] * deg[torch.from_numpy(src)])).float()
    del src, dst
    wp = ops.permute_edge_data(G, w)
    h16 = torch.randn(n, 16, generator=gen)
    b16 = torch.randn(16, generator=gen)

    def agg16():
        return ops.aggregate(G, h16, w, "mul", "sum", w_perm=wp)

    def agg16_bias():
        return ops.aggregate(G, h16, w, "mul", "sum", w_perm=wp) + b16

    pair("bias", "16-wide aggregation by constant edge weights, without / with the bias add after it, forward "
         "(the difference bounds what a bias in the aggregation's epilogue saves; its backward, the sum of the "
         "gradient over rows, stays either way)",
         ("aggregate", agg16), ("aggregate + bias add", agg16_bias), reps, meta)

    x128 = torch.randn(n, 128, generator=gen)
    W = torch.randn(128, 128, generator=gen) * 0.1
    kern = _fused_agg_gemm()
    csr = G.in_csr
    aa = np.empty((n, 128), np.float32)
    tt = np.empty((n, 128), np.float32)

    def unfused_gemm():
        return ops.aggregate(G, x128, w, "mul", "sum", w_perm=wp) @ W

    def fused_gemm():
        kern(csr.chunks, csr.indptr, csr.indices, wp[0].numpy(), x128.numpy(), W.numpy(), aa, tt, np.float32(0))

    fused_gemm()
    err = float((torch.from_numpy(tt) - unfused_gemm()).abs().max())
    common.log(f"  gemm: fused kernel agrees with aggregate + mm to {err:.2g}")
    pair("gemm", "aggregation then @ W (128 x 128) on N x 128, forward",
         ("aggregate + torch mm", unfused_gemm), ("fused kernel", fused_gemm), reps, meta)

    xg = x128.clone().requires_grad_()
    g128 = torch.randn(n, 128, generator=gen)

    def by_eid():
        torch.autograd.grad(ops.aggregate(G, xg, w, "mul", "sum"), xg, g128)

    def by_slot():
        torch.autograd.grad(ops.aggregate(G, xg, w, "mul", "sum", w_perm=wp), xg, g128)

    pair("wperm", "aggregation by constant edge weights on N x 128, forward + backward to x",
         ("weights by edge id", by_eid), ("weights in CSR order", by_slot), reps, meta)


def exp_dense(n: int, gen, reps: int, meta: dict) -> None:
    """GAT's attention scores; the GEMM into huge-page outputs."""
    import torch

    from gdsl.backends.numba import dense

    z = torch.randn(n, 4, 32, generator=gen).requires_grad_()
    al = torch.randn(4, 32, generator=gen).requires_grad_()
    ar = torch.randn(4, 32, generator=gen).requires_grad_()
    gl, gr = torch.randn(n, 4, generator=gen), torch.randn(n, 4, generator=gen)

    def torch_dots():
        el, er = (z * al).sum(-1), (z * ar).sum(-1)
        torch.autograd.grad((el, er), (z, al, ar), (gl, gr))

    def fused_dots():
        el, er = dense.head_dot(z, al, ar)
        torch.autograd.grad((el, er), (z, al, ar), (gl, gr))

    pair("head_dot", "GAT's two attention-score dots of z [N, 4, 32], forward + backward",
         ("torch ops", torch_dots), ("one pass", fused_dots), reps, meta)

    x = torch.randn(n, 128, generator=gen).requires_grad_()
    W = (torch.randn(128, 128, generator=gen) * 0.1).requires_grad_()
    g = torch.randn(n, 128, generator=gen)

    def torch_mm():
        torch.autograd.grad(x @ W, (x, W), g)

    def huge_mm():
        torch.autograd.grad(dense.linear(x, W), (x, W), g)

    pair("linear", "x @ W (N x 128 by 128 x 128), forward + backward",
         ("torch matmul", torch_mm), ("GEMM into huge pages", huge_mm), reps, meta)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if a.graph not in graphs.ALL:   # (was: a KeyError traceback)
        ap.error(f"--graph: unknown {a.graph!r} (choose from {', '.join(graphs.ALL)})")
    if a.reps < 1 or a.threads < 1:
        ap.error("--reps and --threads must be at least 1")
    import torch

    torch.set_num_threads(a.threads)
    meta = {"graph": a.graph}
    n = graphs.ALL[a.graph][1]
    gen = torch.Generator().manual_seed(0)
    exp_epilogue(n, gen, a.reps, meta)
    exp_scale(a.graph, n, gen, a.reps, meta)
    exp_gcn(a.graph, n, gen, a.reps, meta)
    exp_dense(n, gen, a.reps, meta)


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", str(os.cpu_count() or 1))
    main()
