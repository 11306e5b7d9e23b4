"""The backward of a max / min aggregation, shared by the Numba and Triton
backends: the gradient of each output element is split evenly among the
edges whose message reaches it (ties), as torch's
`scatter_reduce(amax / amin)` does in the reference backend, the oracle.

Ties are common, not a corner case: after a relu many messages are 0, and
equal features (duplicated rows, one-hot inputs) give equal messages.
Giving the whole gradient to the one edge the forward kernel kept (its
`arg`) is also a subgradient, but a different one from the reference's
(was: the Numba and Triton input gradients differed from the reference's
where values tied).

The forward kernels keep the winning edge of each output element (`arg`);
the backward recomputes every edge's message with torch ops, a chunk of
edges at a time (CHUNK_ELEMENTS), computes the winner's value through `arg`
the same way (so the winner always ties with itself), counts the ties per
output element in a first pass and hands each tied edge its share in a
second. The Numba backend runs the usual form, a max / min of `src.x`,
on two kernels instead (numba/codegen.py gen_maxmin_ties: [rows, F] and
[N, F] temporaries, not [E, F]).
"""
from __future__ import annotations

import torch


# the [edges, F] temporaries hold at most this many elements: edges are
# taken in chunks (two passes: count the ties, then hand out the shares)
CHUNK_ELEMENTS = 1 << 24

_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


def _edge_weights(w2: torch.Tensor, bcast: str, D: int, E: int, F: int) -> torch.Tensor:
    """Edge data w2 ([E, H] per head, [E, F], or [E, 1]) as [E, F]."""
    if bcast == "w":
        return w2.repeat_interleave(D, dim=1)
    return w2 if w2.shape[1] == F else w2.expand(E, F)


def _message(msg: str, xv, wv):
    if msg == "copy_src":
        return xv
    if msg == "copy_edge":
        return wv
    return _BINARY[msg](xv, wv)


def maxmin_backward(arg: torch.Tensor, G: torch.Tensor, row_of_edge: torch.Tensor, col_of_edge: torch.Tensor,
                    x2: torch.Tensor | None, w2: torch.Tensor | None, msg: str, bcast: str, H: int, D: int,
                    need_x: bool, need_w: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(d x2, d w2) of out[r, k] = max (or min) over the edges e of row r of
    MSG(x2[col(e), k], w2[e, .]), given the output gradient G [rows, F] and
    the forward's winners `arg` [rows, F] (edge ids, -1 for a row without
    edges). row_of_edge / col_of_edge [E] map each edge id to its output row
    and to the vertex its x is read at."""
    F = H * D
    E = row_of_edge.numel()
    uses_x = x2 is not None and msg != "copy_edge"
    uses_w = w2 is not None and msg != "copy_src"
    dx = torch.zeros_like(x2) if need_x and uses_x else None
    dw = torch.zeros_like(w2) if need_w and uses_w else None
    if E == 0 or (dx is None and dw is None):   # no edge won anything
        return dx, dw
    rows, cols = row_of_edge.long(), col_of_edge.long()

    def edge_messages(c0: int, c1: int):
        xv = x2.index_select(0, cols[c0:c1]) if uses_x else None
        wv = _edge_weights(w2[c0:c1], bcast, D, c1 - c0, F) if uses_w else None
        return _message(msg, xv, wv), xv, wv

    # the winner's message per output element, computed as the edges' are
    e = arg.reshape(-1, F).long().clamp(min=0)   # rows without edges: read, never compared
    k = torch.arange(F, device=G.device)
    xw = x2.reshape(-1)[cols[e] * F + k] if uses_x else None
    ww = None
    if uses_w:
        flat = w2.reshape(-1)
        ww = flat[e * H + torch.div(k, D, rounding_mode="floor")] if bcast == "w" else \
            (flat[e * F + k] if w2.shape[1] == F else flat[e])
    won = _message(msg, xw, ww)
    step = max(1, CHUNK_ELEMENTS // max(1, F))
    chunks = [(c, min(E, c + step)) for c in range(0, E, step)]
    count = torch.zeros_like(G)
    for c0, c1 in chunks:
        m, _, _ = edge_messages(c0, c1)
        count.index_add_(0, rows[c0:c1], (m == won.index_select(0, rows[c0:c1])).to(G.dtype))
    s = G / count.clamp(min=1)
    for c0, c1 in chunks:
        m, xv, wv = edge_messages(c0, c1)
        r = rows[c0:c1]
        share = (m == won.index_select(0, r)).to(G.dtype) * s.index_select(0, r)   # [chunk, F]
        if dx is not None:
            d = share if msg in ("copy_src", "add", "sub") else (share * wv if msg == "mul" else share / wv)
            dx.index_add_(0, cols[c0:c1], d)
        if dw is not None:
            if msg in ("copy_edge", "add"):
                d = share
            elif msg == "sub":
                d = -share
            elif msg == "mul":
                d = share * xv
            else:
                d = -share * xv / (wv * wv)
            if bcast == "w":
                d = d.view(c1 - c0, H, D).sum(-1)
            elif w2.shape[1] != F:
                d = d.sum(1, keepdim=True)
            dw[c0:c1] = d
    return dx, dw
