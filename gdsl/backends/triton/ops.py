"""The fused graph ops as torch.autograd.Functions over generated Triton kernels.

Public functions (torch tensors on the graph's device in and out,
independent of the IR): aggregate (with constant vertex / row scales fused
into the kernel), sddmm, edge_softmax, gat_aggregate.  Data is computed in
float32 (accumulating in float32) or float64 (gradcheck), dispatched on the
inputs' dtype.  Backward passes compute only the gradients that
ctx.needs_input_grad asks for, on Triton kernels except a few edge- or
vertex-wise torch ops (gathers of the output gradient, row scalings; noted
where they are).

No kernel uses atomics: every output element has one writer.  A gradient
that flows back to the other endpoint of an edge (d x of an aggregation to
dst, d el of GAT, ...) is an aggregation over the reverse CSR, which the
graph keeps (TritonGraph.out_csr).  The max / min backward is torch ops
(gdsl/backends/maxmin.py, shared with Numba): tied messages share each
element's gradient, as in the reference.
"""
from __future__ import annotations

import math

import torch
import triton

from gdsl.backends.maxmin import maxmin_backward
from gdsl.backends.once import KernelFunction, differentiable_once
from gdsl.backends.triton import codegen
from gdsl.backends.triton.codegen import BINARY, MSGS, SDDMM_OPS, get_kernel
from gdsl.backends.triton.graph import CSR, TritonGraph

_FLOATS = (torch.float32, torch.float64)

# --------------------------------------------------------------------------
# the balanced (row-splitting) variant
# --------------------------------------------------------------------------
# A destination row is one program of the row-parallel kernel: on a
# power-law graph one hub with 10^5 in-edges keeps one SM busy long after
# the others are done.  The balanced variant cuts rows into segments of
# SEG_EDGES slots (one program each) and merges the partial results of the
# rows it cut in a second, row-parallel pass, deterministic and without
# atomics (an atomic add per element would make float sums depend on the
# schedule and would not do max / min with their argmax).  "auto" takes it
# when the longest row has more than BALANCE_RATIO times the mean degree and
# more than SEG_EDGES slots.  On an H100 (bench/RESULTS-gpu.md) auto picks the
# balanced kernel on RMAT 1M, 2.1x faster than row-parallel there; the
# thresholds themselves have not been swept.
BALANCE = "auto"          # "off" | "auto" | "on"
SEG_EDGES = 512
BALANCE_RATIO = 16.0


def set_balance(mode: str, seg_edges: int | None = None) -> tuple[str, int]:
    """mode "off": row-parallel kernels only; "on": always the balanced
    variant; "auto" (default): balanced for skewed degrees.  seg_edges: slots
    per segment.  Returns the previous (mode, seg_edges)."""
    global BALANCE, SEG_EDGES
    if mode not in ("off", "auto", "on"):
        raise ValueError(f"balance mode must be off, auto or on, got {mode!r}")
    if seg_edges is not None and seg_edges < 1:
        raise ValueError(f"seg_edges must be positive, got {seg_edges}")
    prev = (BALANCE, SEG_EDGES)
    BALANCE = mode
    if seg_edges is not None:
        SEG_EDGES = int(seg_edges)
    return prev


def use_balanced(csr: CSR) -> bool:
    if BALANCE == "off" or csr.num_edges == 0:
        return False
    if BALANCE == "on":
        return True
    mean = csr.num_edges / max(1, csr.nrows)
    return csr.max_degree > max(SEG_EDGES, BALANCE_RATIO * mean)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

_DUMMY: dict = {}


def _dummy(device, dtype) -> torch.Tensor:
    key = (str(device), dtype)
    t = _DUMMY.get(key)
    if t is None:
        t = _DUMMY[key] = torch.zeros(1, dtype=dtype, device=device)
    return t


def _data_dtype(*ts) -> torch.dtype:
    dt = None
    for t in ts:
        if t is None:
            continue
        dt = t.dtype if dt is None else torch.promote_types(dt, t.dtype)
    return dt if dt in _FLOATS else torch.float32


def _mat(t: torch.Tensor, dt: torch.dtype, rows: int, cols: int) -> torch.Tensor:
    return t.detach().to(dt).reshape(rows, cols).contiguous()


def _vec(t: torch.Tensor | None, dt: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.detach().to(dt).reshape(-1).contiguous()


def _grid(rows: int, width: int, block: str):
    return lambda meta: (rows, triton.cdiv(width, meta[block]))


def _check_device(g: TritonGraph, **ts) -> None:
    for name, t in ts.items():
        if t is not None and t.device != g.device:
            raise ValueError(f"{name} is on {t.device}, the graph on {g.device} (move it first)")


# --------------------------------------------------------------------------
# raw launchers (no autograd)
# --------------------------------------------------------------------------

def agg_raw(csr: CSR, x2: torch.Tensor | None, w2: torch.Tensor | None, msg: str, reduce: str,
            bcast: str, H: int, D: int, dt: torch.dtype, *, xs: torch.Tensor | None = None,
            rs: torch.Tensor | None = None):
    """out [nrows, H*D] (and arg [nrows, H*D] int64 edge ids for max / min,
    -1 where a row has no edge) of one aggregation over `csr`: out[r] =
    rs[r] * REDUCE over the row's slots (other endpoint c, edge e) of
    MSG(x2[c] * xs[c], w2[e]).  x2 [N, H*D]; w2 [E, H] (bcast "w"),
    [E] / [E, 1] ("s") or [E, H*D]."""
    F = H * D
    dev = csr.device
    if msg not in BINARY:
        bcast = "none"
    if bcast == "w" and H == 1:
        bcast = "s"
    maxmin = reduce in ("max", "min")
    out = torch.empty((csr.nrows, F), dtype=dt, device=dev)
    arg = torch.empty((csr.nrows, F), dtype=torch.int64, device=dev) if maxmin else None
    if csr.nrows == 0 or F == 0:
        return out, arg
    if csr.num_edges == 0:
        out.zero_()
        if arg is not None:
            arg.fill_(-1)
        return out, arg
    balanced = use_balanced(csr)
    sig = {"msg": msg, "reduce": reduce, "bcast": bcast, "xscale": xs is not None, "rscale": rs is not None,
           "balanced": balanced}
    mod = get_kernel("aggregate", **sig)
    name = codegen._agg_name(msg, reduce, codegen.check_aggregate(msg, reduce, bcast), sig["xscale"],
                             sig["rscale"], balanced)
    fd, i64 = _dummy(dev, dt), _dummy(dev, torch.int64)
    args = [csr.indptr, csr.indices, csr.eid,
            x2 if x2 is not None else fd, w2 if w2 is not None else fd,
            xs if xs is not None else fd, rs if rs is not None else fd,
            out, arg if arg is not None else i64]
    if not balanced:
        getattr(mod, name)[_grid(csr.nrows, F, "BLOCK_F")](*args, i64, fd, i64, csr.nrows, F, H, D, csr.deg_key)
        return out, arg
    segs = csr.segments(SEG_EDGES)
    part = torch.empty((segs.num_parts, F), dtype=dt, device=dev) if segs.num_parts else fd
    part_arg = torch.empty((segs.num_parts, F), dtype=torch.int64, device=dev) if (segs.num_parts and maxmin) else i64
    getattr(mod, name)[_grid(segs.num_segments, F, "BLOCK_F")](*args, segs.table, part, part_arg, csr.nrows, F, H,
                                                               D, csr.deg_key)
    if segs.num_parts:
        getattr(mod, name + "_merge")[_grid(int(segs.long_rows.numel()), F, "BLOCK_F")](
            segs.long_rows, segs.long_ptr, part, part_arg, rs if rs is not None else fd, out,
            arg if arg is not None else i64, F)
    return out, arg


def sddmm_raw(g: TritonGraph, a2: torch.Tensor, b2: torch.Tensor, op: str, P: int, K: int,
              dt: torch.dtype) -> torch.Tensor:
    """[E, P] (dot over K) or [E, P*K] (elementwise) from a2, b2 [N, P*K]."""
    E = g.num_edges
    out = torch.empty((E, P if op == "dot" else P * K), dtype=dt, device=g.device)
    if E == 0 or out.numel() == 0:
        return out.zero_()
    mod = get_kernel("sddmm", op=op)
    if op == "dot":
        if K == 0:
            return out.zero_()
        mod.sddmm_dot[lambda m: (triton.cdiv(E, m["BLOCK_E"]), P)](g.src, g.dst, a2, b2, out, E, P, K)
    else:
        F = P * K
        getattr(mod, f"sddmm_{op}")[lambda m: (triton.cdiv(E, m["BLOCK_E"]), triton.cdiv(F, m["BLOCK_F"]))](
            g.src, g.dst, a2, b2, out, E, F)
    return out


def _block_k(K: int) -> int:
    return min(64, 1 << max(0, K - 1).bit_length())


# --------------------------------------------------------------------------
# aggregate
# --------------------------------------------------------------------------

def _classify(g: TritonGraph, x, w, msg: str):
    """(bcast, H, D, feature shape) of one aggregate call."""
    N, E = g.num_nodes, g.num_edges
    if x is not None and x.shape[0] != N:
        raise ValueError(f"x has {x.shape[0]} rows, the graph {N} vertices")
    if w is not None and w.shape[0] != E:
        raise ValueError(f"w has {w.shape[0]} rows, the graph {E} edges")
    if msg == "copy_src":
        if x is None:
            raise ValueError("copy_src needs x")
        fs = tuple(x.shape[1:])
        return "none", 1, math.prod(fs), fs
    if msg == "copy_edge":
        if w is None:
            raise ValueError("copy_edge needs w")
        fs = tuple(w.shape[1:])
        return "none", 1, math.prod(fs), fs
    if x is None or w is None:
        raise ValueError(f"message {msg} needs both x and w")
    fs, wf = tuple(x.shape[1:]), tuple(w.shape[1:])
    if wf == fs:
        return "none", 1, math.prod(fs), fs
    ws = wf
    while ws and ws[-1] == 1:
        ws = ws[:-1]
    if fs[:len(ws)] == ws:
        return "w", math.prod(ws), math.prod(fs[len(ws):]), fs
    raise ValueError(f"edge data of shape {tuple(w.shape)} does not broadcast against vertex data "
                     f"{tuple(x.shape)} (expected [E], [E, *leading feature axes] or [E, *features])")


class _AggregateFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, x, w, msg, reduce, to, info, xs, os_):
        bcast, H, D, fs = info
        dt = _data_dtype(x, w)
        F, N, E = H * D, g.num_nodes, g.num_edges
        csr = g.csr(to)
        Wf = H if bcast == "w" else F
        x2 = _mat(x, dt, N, F) if msg != "copy_edge" else None
        w2 = _mat(w, dt, E, Wf) if msg != "copy_src" else None
        xs, rs = _vec(xs, dt), _vec(os_, dt)
        if reduce == "mean":
            inv = csr.inv_degree(dt)
            rs = inv if rs is None else rs * inv
        base = "sum" if reduce == "mean" else reduce
        out, arg = agg_raw(csr, x2, w2, msg, base, bcast, H, D, dt, xs=xs, rs=rs)
        ctx.g, ctx.msg, ctx.reduce, ctx.to, ctx.info, ctx.dt = g, msg, reduce, to, info, dt
        ctx.arg, ctx.xs, ctx.rs = arg, xs, rs
        ctx.save_for_backward(x, w)
        return out.reshape((csr.nrows,) + fs)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_x, need_w = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        none = (None,) * 6
        if not (need_x or need_w):
            return (None, None, None) + none
        x, w = ctx.saved_tensors
        g, msg, reduce, to, dt = ctx.g, ctx.msg, ctx.reduce, ctx.to, ctx.dt
        xs, rs = ctx.xs, ctx.rs
        bcast, H, D, _ = ctx.info
        F, N, E = H * D, g.num_nodes, g.num_edges
        csr, rev = g.csr(to), g.reverse_of(to)
        Wf = H if bcast == "w" else F
        x2 = _mat(x, dt, N, F) if x is not None else None
        w2 = _mat(w, dt, E, Wf) if w is not None else None
        G = _mat(grad, dt, csr.nrows, F)
        dx = dw = None
        if reduce in ("max", "min"):   # ties share the gradient, as in the reference
            col = (g.src if to == "dst" else g.dst).long()
            dx, dw = maxmin_backward(ctx.arg, G, csr.row_of_edge, col, x2, w2, msg, bcast, H, D, need_x, need_w)
        else:
            # out[v] = rs[v] * sum over e = (u -> v) of MSG(x[u] * xs[u], w[e]):
            # d x[u] = xs[u] * sum over the out-edges of u of rs[v] G[v] (*, / w[e]),
            # the reverse aggregation with the two scales swapped
            if need_x and msg != "copy_edge":
                if msg == "mul":
                    dx, _ = agg_raw(rev, G, w2, "mul", "sum", bcast, H, D, dt, xs=rs, rs=xs)
                elif msg == "div":
                    Gs = G * rs.unsqueeze(1) if rs is not None else G
                    dx, _ = agg_raw(rev, Gs, w2, "div", "sum", bcast, H, D, dt)
                else:  # copy_src, add, sub: d msg / d x = 1
                    dx, _ = agg_raw(rev, G, None, "copy_src", "sum", "none", 1, F, dt, xs=rs, rs=xs)
            if need_w and msg != "copy_src":
                Gs = G * rs.unsqueeze(1) if rs is not None else G
                if msg in ("copy_edge", "add", "sub"):
                    # an edge-wise gather of the output gradient (torch)
                    Gr = Gs.view(csr.nrows, H, D).sum(-1) if bcast == "w" else Gs
                    dw = Gr.index_select(0, csr.row_of_edge)
                    if msg == "sub":
                        dw = dw.neg_()
                else:  # mul, div: x[col] (.) G[row], an sddmm over (src, dst)
                    xsx = x2 * xs.unsqueeze(1) if xs is not None else x2
                    a, b = (xsx, Gs) if to == "dst" else (Gs, xsx)
                    if bcast == "w":
                        dw = sddmm_raw(g, a.contiguous(), b.contiguous(), "dot", H, D, dt)
                    else:
                        dw = sddmm_raw(g, a.contiguous(), b.contiguous(), "mul", 1, F, dt)
                    if msg == "div":
                        dw = dw.div_(w2 * w2).neg_()
        if dx is not None:
            dx = dx.reshape(x.shape).to(x.dtype)
        if dw is not None:
            dw = dw.reshape(w.shape).to(w.dtype)
        return (None, dx, dw) + none


def aggregate(g: TritonGraph, x: torch.Tensor | None, w: torch.Tensor | None, msg: str, reduce: str,
              to: str = "dst", *, xscale: torch.Tensor | None = None,
              oscale: torch.Tensor | None = None) -> torch.Tensor:
    """out[v] = REDUCE over the edges e = (u -> v) of MSG(x[u], w[e]) (to="dst"),
    or over the out-edges of u with x read at the destination (to="src").

    msg: copy_src (x only), copy_edge (w only), add, sub, mul, div (x[.] OP w[e]);
    reduce: sum, max, min (and mean = sum / in-degree).  x: [N, *fs]; w: [E]
    (one scalar per edge), [E, H] with x [N, H, D] (per head, broadcast over
    the trailing axes), or [E, *fs].  Rows without edges are 0.

    Constant scales fused into the kernel (sum and mean; copy_src and mul
    messages): xscale [N] multiplies each gathered vertex, oscale [rows]
    each output row (after the mean's 1 / degree).  Neither gets a gradient."""
    if msg not in MSGS:
        raise ValueError(f"unknown message op {msg!r} (one of {MSGS})")
    if reduce not in ("sum", "max", "min", "mean"):
        raise ValueError(f"unknown reduction {reduce!r} (sum, max, min, mean)")
    csr = g.csr(to)
    info = _classify(g, x, w, msg)
    if msg == "copy_src":
        w = None
    elif msg == "copy_edge":
        x = None
    _check_device(g, x=x, w=w, xscale=xscale, oscale=oscale)
    if xscale is not None or oscale is not None:
        if reduce not in ("sum", "mean"):
            raise ValueError("scales are fused into sum and mean aggregation only")
        if xscale is not None and msg not in ("copy_src", "mul"):
            raise ValueError("a source-vertex scale is fused for copy_src and mul messages only")
        if xscale is not None and xscale.numel() != g.num_nodes:
            raise ValueError(f"xscale has {xscale.numel()} values, the graph {g.num_nodes} vertices")
        if oscale is not None and oscale.numel() != csr.nrows:
            raise ValueError(f"oscale has {oscale.numel()} values, the output {csr.nrows} rows")
    return _AggregateFn.apply(g, x, w, msg, reduce, to, info, xscale, oscale)


# --------------------------------------------------------------------------
# sddmm
# --------------------------------------------------------------------------

class _SddmmFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, a, b, op):
        dt = _data_dtype(a, b)
        N, E = g.num_nodes, g.num_edges
        fs = tuple(a.shape[1:])
        if op == "dot":
            P, K, ofs = math.prod(fs[:-1]), fs[-1], fs[:-1]
        else:
            P, K, ofs = 1, math.prod(fs), fs
        a2, b2 = _mat(a, dt, N, P * K), _mat(b, dt, N, P * K)
        out = sddmm_raw(g, a2, b2, op, P, K, dt)
        ctx.g, ctx.op, ctx.PK, ctx.dt = g, op, (P, K), dt
        ctx.save_for_backward(a, b)
        return out.reshape((E,) + ofs)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_a, need_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if not (need_a or need_b):
            return None, None, None, None
        a, b = ctx.saved_tensors
        g, op, (P, K), dt = ctx.g, ctx.op, ctx.PK, ctx.dt
        N, E, F = g.num_nodes, g.num_edges, P * K
        a2, b2 = _mat(a, dt, N, F), _mat(b, dt, N, F)
        da = db = None
        if op == "dot":
            G = _mat(grad, dt, E, P)
            if need_a:   # da[u, p, :] = sum over out-edges of g[e, p] * b[v, p, :]
                da, _ = agg_raw(g.out_csr, b2, G, "mul", "sum", "w", P, K, dt)
            if need_b:
                db, _ = agg_raw(g.in_csr, a2, G, "mul", "sum", "w", P, K, dt)
        else:
            G = _mat(grad, dt, E, F)
            if op in ("add", "sub"):
                if need_a:
                    da, _ = agg_raw(g.out_csr, None, G, "copy_edge", "sum", "none", 1, F, dt)
                if need_b:
                    db, _ = agg_raw(g.in_csr, None, G, "copy_edge", "sum", "none", 1, F, dt)
                    if op == "sub":
                        db = db.neg_()
            elif op == "mul":
                if need_a:
                    da, _ = agg_raw(g.out_csr, b2, G, "mul", "sum", "none", 1, F, dt)
                if need_b:
                    db, _ = agg_raw(g.in_csr, a2, G, "mul", "sum", "none", 1, F, dt)
            else:  # div: a[u] / b[v]
                if need_a:
                    da, _ = agg_raw(g.out_csr, (1 / b2).contiguous(), G, "mul", "sum", "none", 1, F, dt)
                if need_b:
                    db, _ = agg_raw(g.in_csr, a2, G, "mul", "sum", "none", 1, F, dt)
                    db = db.div_(b2 * b2).neg_()
        if da is not None:
            da = da.reshape(a.shape).to(a.dtype)
        if db is not None:
            db = db.reshape(b.shape).to(b.dtype)
        return None, da, db, None


def sddmm(g: TritonGraph, a: torch.Tensor, b: torch.Tensor, op: str) -> torch.Tensor:
    """Per edge e = (u -> v): dot: sum over the last axis of a[u] * b[v]
    (a, b: [N, *p, k] -> [E, *p]); add, sub, mul, div: a[u] OP b[v]
    (a, b: [N, *fs] -> [E, *fs])."""
    if op not in SDDMM_OPS:
        raise ValueError(f"unknown sddmm op {op!r} (one of {SDDMM_OPS})")
    if a.shape != b.shape:
        raise ValueError(f"sddmm operands differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.shape[0] != g.num_nodes:
        raise ValueError(f"sddmm operands have {a.shape[0]} rows, the graph {g.num_nodes} vertices")
    if op == "dot" and a.dim() < 2:
        raise ValueError("sddmm dot needs a feature axis to sum over")
    _check_device(g, a=a, b=b)
    return _SddmmFn.apply(g, a, b, op)


# --------------------------------------------------------------------------
# edge softmax
# --------------------------------------------------------------------------

def _softmax_launch(kernel, csr: CSR, K: int, *args) -> None:
    bk = _block_k(K)
    kernel[(csr.nrows, triton.cdiv(K, bk))](csr.indptr, csr.eid, *args, K, BLOCK_K=bk)


class _EdgeSoftmaxFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, s):
        dt = _data_dtype(s)
        E = g.num_edges
        K = math.prod(s.shape[1:])
        s2 = _mat(s, dt, E, K)
        y = torch.empty((E, K), dtype=dt, device=g.device)
        if E and K:
            _softmax_launch(get_kernel("edge_softmax").edge_softmax_fwd, g.in_csr, K, s2, y)
        ctx.g, ctx.K, ctx.dt = g, K, dt
        out = y.reshape(s.shape)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return None, None
        (y,) = ctx.saved_tensors
        g, K, dt = ctx.g, ctx.K, ctx.dt
        E = g.num_edges
        G = _mat(grad, dt, E, K)
        y2 = _mat(y, dt, E, K)
        ds = torch.empty((E, K), dtype=dt, device=g.device)
        if E and K:
            _softmax_launch(get_kernel("edge_softmax").edge_softmax_bwd, g.in_csr, K, y2, G, ds)
        return None, ds.reshape(y.shape).to(y.dtype)


def edge_softmax(g: TritonGraph, s: torch.Tensor) -> torch.Tensor:
    """s: [E, *hs]; softmax over the incoming edges of each destination
    (max-subtracted)."""
    if s.shape[0] != g.num_edges:
        raise ValueError(f"s has {s.shape[0]} rows, the graph {g.num_edges} edges")
    _check_device(g, s=s)
    return _EdgeSoftmaxFn.apply(g, s)


# --------------------------------------------------------------------------
# fused GAT aggregation
# --------------------------------------------------------------------------

class _GatFn(KernelFunction):
    @staticmethod
    def forward(ctx, g, el, er, z, slope):
        dt = _data_dtype(el, er, z)
        N = g.num_nodes
        H, D = z.shape[1], z.shape[2]
        F = H * D
        el2, er2, z2 = _mat(el, dt, N, H), _mat(er, dt, N, H), _mat(z, dt, N, F)
        out = torch.empty((N, F), dtype=dt, device=g.device)
        lse = torch.empty((N, H), dtype=dt, device=g.device)
        csr = g.in_csr
        if N and F:
            if g.num_edges == 0:
                out.zero_()
                lse.zero_()
            else:
                get_kernel("gat_aggregate").gat_fwd[_grid(N, F, "BLOCK_F")](
                    csr.indptr, csr.indices, el2, er2, z2, out, lse, H, D, F, float(slope), csr.deg_key)
        ctx.g, ctx.dt, ctx.HD, ctx.slope = g, dt, (H, D), slope
        out = out.reshape(N, H, D)
        ctx.save_for_backward(el, er, z, out, lse)
        return out

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_el, need_er, need_z = ctx.needs_input_grad[1:4]
        if not (need_el or need_er or need_z):
            return None, None, None, None, None
        el, er, z, out, lse = ctx.saved_tensors
        g, dt, (H, D), slope = ctx.g, ctx.dt, ctx.HD, ctx.slope
        N, E, F = g.num_nodes, g.num_edges, H * D
        el2, er2, z2 = _mat(el, dt, N, H), _mat(er, dt, N, H), _mat(z, dt, N, F)
        G = _mat(grad, dt, N, F)
        mod = get_kernel("gat_aggregate")
        dz = del_ = der = None
        if need_z:
            dz = torch.empty((N, F), dtype=dt, device=g.device)
            if E and F:
                csr = g.out_csr
                mod.gat_bwd_z[_grid(N, F, "BLOCK_F")](csr.indptr, csr.indices, el2, er2, lse, G, dz, H, D, F,
                                                      float(slope), csr.deg_key)
            else:
                dz.zero_()
            dz = dz.reshape(z.shape).to(z.dtype)
        if need_el or need_er:
            # delta[v, h] = g[v, h] . out[v, h] (torch), then the raw scores'
            # gradient per edge, then its sums over each source (d el) and
            # each destination (d er): aggregations of it over the two CSRs
            delta = (G.view(N, H, D) * out.to(dt).reshape(N, H, D)).sum(-1).contiguous()
            draw = torch.empty((E, H), dtype=dt, device=g.device)
            if E and H:
                if D:
                    mod.gat_bwd_edge[lambda m: (triton.cdiv(E, m["BLOCK_E"]), H)](
                        g.src, g.dst, el2, er2, lse, z2, G, delta, draw, E, H, D, float(slope))
                else:
                    draw.zero_()
            if need_el:
                del_, _ = agg_raw(g.out_csr, None, draw, "copy_edge", "sum", "none", 1, H, dt)
                del_ = del_.reshape(el.shape).to(el.dtype)
            if need_er:
                der, _ = agg_raw(g.in_csr, None, draw, "copy_edge", "sum", "none", 1, H, dt)
                der = der.reshape(er.shape).to(er.dtype)
        return None, del_, der, dz, None


def gat_aggregate(g: TritonGraph, el: torch.Tensor, er: torch.Tensor, z: torch.Tensor,
                  slope: float = 0.2) -> torch.Tensor:
    """out[v, h, :] = sum over e = (u -> v) of alpha[e, h] * z[u, h, :] with
    alpha = softmax over the in-edges of v of leaky_relu(el[u, h] + er[v, h], slope);
    one pass per destination (online softmax), no E x H x D tensor; the
    backward recomputes alpha from the saved per-(v, h) log-sum-exp."""
    if z.dim() != 3:
        raise ValueError(f"z must be [N, H, D], got {tuple(z.shape)}")
    N, H = z.shape[0], z.shape[1]
    for name, t in (("el", el), ("er", er)):
        if t.shape[0] != N or t.numel() != N * H:
            raise ValueError(f"{name} must be [N, H] = [{N}, {H}], got {tuple(t.shape)}")
    if N != g.num_nodes:
        raise ValueError(f"z has {N} rows, the graph {g.num_nodes} vertices")
    _check_device(g, el=el, er=er, z=z)
    return _GatFn.apply(g, el, er, z, float(slope))
