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
the backward recomputes every edge's message with torch ops ([E, F], as the
reference's own backward does), reads the winner's value through `arg` (so
the comparison is with the value as recomputed, and the winner always ties
with itself), counts the ties per output element and hands each tied edge
its share. The Numba backend runs the usual form, a max / min of `src.x`,
on two kernels instead (numba/codegen.py gen_maxmin_ties: [rows, F] and
[N, F] temporaries, not [E, F]).
"""
from __future__ import annotations

import torch


def _edge_weights(w2: torch.Tensor, bcast: str, D: int, E: int, F: int) -> torch.Tensor:
    """Edge data w2 ([E, H] per head, [E, F], or [E, 1]) as [E, F]."""
    if bcast == "w":
        return w2.repeat_interleave(D, dim=1)
    return w2 if w2.shape[1] == F else w2.expand(E, F)


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
    rows = row_of_edge.long()
    cols = col_of_edge.long()
    xv = x2.index_select(0, cols) if (x2 is not None and msg != "copy_edge") else None
    wv = _edge_weights(w2, bcast, D, E, F) if (w2 is not None and msg != "copy_src") else None
    if msg == "copy_src":
        m = xv
    elif msg == "copy_edge":
        m = wv
    else:
        m = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[msg](xv, wv)
    a = arg.reshape(-1, F).long()
    has = a >= 0
    if E == 0:   # no edge won anything
        return (torch.zeros_like(x2) if need_x and x2 is not None else None,
                torch.zeros_like(w2) if need_w and w2 is not None else None)
    won = m.gather(0, a.clamp(min=0))                      # [rows, F]: the winner's message
    hit = (m == won.index_select(0, rows)) & has.index_select(0, rows)
    hitf = hit.to(G.dtype)
    count = torch.zeros_like(G).index_add_(0, rows, hitf)
    share = hitf * (G / count.clamp(min=1)).index_select(0, rows)   # [E, F]
    dx = dw = None
    if need_x and msg != "copy_edge":
        d = share if msg in ("copy_src", "add", "sub") else (share * wv if msg == "mul" else share / wv)
        dx = torch.zeros_like(x2).index_add_(0, cols, d)
    if need_w and msg != "copy_src":
        if msg in ("copy_edge", "add"):
            d = share
        elif msg == "sub":
            d = -share
        elif msg == "mul":
            d = share * xv
        else:
            d = -share * xv / (wv * wv)
        if bcast == "w":
            dw = d.view(E, H, D).sum(-1)
        elif w2.shape[1] != F:
            dw = d.sum(1, keepdim=True)
        else:
            dw = d
    return dx, dw
