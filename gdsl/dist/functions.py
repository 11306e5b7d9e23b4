"""The collectives of every plan as autograd functions: forward moves data,
backward moves gradients along the transposed pattern, so distributed
training is plain torch autograd over these few ops.

  halo_fetch       1D: the rows a rank's edges read, from their owners
                   (alltoallv of the needed rows, or allgatherv of whole
                   blocks = CAGNET §IV-A's broadcasts); backward returns the
                   halo's partial gradients to the owners
  halo_reduce      the transpose: partial results of halo rows sent to owners
  team_allreduce   1.5D: partial SpMM results summed within a process row
                   (CAGNET §IV-B); backward the same all-reduce
  block_bcast      1.5D: block q broadcast within process column j; backward
                   reduces to the root
  split_combine    vertex-cut: leaves -> root partial aggregates, root ->
                   leaves the total (DistGNN §5.3 Algorithm 4 with r = 0)
  pull_rows        P3: partial activations of all vertices summed onto their
                   owners (reduce-scatter); backward pushes the error
                   gradient back to every rank (allgatherv) (P3 §3.2)
  rows_to_cols / cols_to_rows
                   RDM: all-to-all between row and column slicing (RDM §III)
"""
from __future__ import annotations

import time

import numpy as np
import torch

from gdsl.diagnostics import GdslError
from gdsl.dist.comm import Comm, host, mpi_type, waiting


def as_tensor(a: np.ndarray, device: torch.device | str, dtype=None) -> torch.Tensor:
    """A partition array as a tensor on the rank's device (no copy on the CPU
    when `dtype` is the array's own)."""
    return torch.from_numpy(np.ascontiguousarray(a, dtype=dtype)).to(device)


def _index(a: np.ndarray, device: torch.device | str) -> torch.Tensor:
    return as_tensor(a, device, np.int64)


class _Fn(torch.autograd.Function):
    pass


def _cat(parts: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return torch.cat(parts) if parts else like.new_empty((0,) + tuple(like.shape[1:]))


class HaloExchange:
    """Owner -> readers movement of rows for one 1D partition (send_idx[q]:
    my rows q reads; recv rows from q land at n_own + offsets, in q order)."""

    def __init__(self, comm: Comm, send_idx: list[np.ndarray], recv_idx: list[np.ndarray], own_pos: np.ndarray,
                 n_local: int, mode: str = "alltoallv", block_rows: np.ndarray | None = None,
                 halo_gid_pos: np.ndarray | None = None, device: torch.device | str = "cpu"):
        self.comm, self.mode, self.n_local = comm, mode, n_local
        self.n_own = int(own_pos.size)
        self.own_pos = _index(own_pos, device)
        self.recv_pos = _index(np.concatenate(recv_idx) if recv_idx else np.zeros(0, np.int64), device)
        self.send_all = _index(np.concatenate(send_idx) if send_idx else np.zeros(0, np.int64), device)
        self.send_counts = np.array([s.size for s in send_idx], np.int64)
        self.recv_counts = np.array([r.size for r in recv_idx], np.int64)
        self.block_rows = block_rows          # bcast: rows of every rank's block
        # bcast: the halo rows' positions in the gathered blocks
        self.halo_pos = None if halo_gid_pos is None else _index(halo_gid_pos, device)

    def _place(self, own: torch.Tensor, halo: torch.Tensor) -> torch.Tensor:
        """Own and halo rows into the local space (global-id order)."""
        out = own.new_empty((self.n_local,) + tuple(own.shape[1:]))
        out.index_copy_(0, self.own_pos, own)
        out.index_copy_(0, self.recv_pos, halo)
        return out

    def fetch(self, x: torch.Tensor, label: str) -> torch.Tensor:
        return _Fetch.apply(x, self, label)

    def reduce(self, partial: torch.Tensor, label: str) -> torch.Tensor:
        """[n_local] partial sums -> [n_own]: halo rows added at their owners."""
        return _Reduce.apply(partial, self, label)

    def reduce_extremum(self, partial: torch.Tensor, label: str, reduce: str, ties: torch.Tensor) -> torch.Tensor:
        """[n_local] partial maxima (minima) -> [n_own]: the halo rows' partials
        sent to their owners (all-to-all-v) and combined there. Rows with no
        local edge must hold -inf (+inf). `ties`: each element's count of local
        edges attaining the partial; they travel with the partials, so the
        gradient reaches the attaining partials shared by their counts
        (`tie_shares`: the reference's split) and goes back to the halo rows' ranks."""
        if self.mode == "bcast":
            raise GdslError(f"{label}: {reduce} over outgoing edges (to = src) is implemented for --halo alltoallv")
        own = partial.index_select(0, self.own_pos)
        back = _ToOwners.apply(partial, self, label)
        idx = self.send_all.reshape((-1,) + (1,) * (partial.dim() - 1)).expand_as(back)
        best = own.detach().scatter_reduce(0, idx, back.detach(), "amax" if reduce == "max" else "amin",
                                           include_self=True)
        own_ties = ties.index_select(0, self.own_pos)
        back_ties = self.comm.alltoallv(ties.index_select(0, self.recv_pos).contiguous(), self.recv_counts,
                                        self.send_counts, label + " ties")
        hit_own = own_ties * (own.detach() == best).to(ties.dtype)
        hit_back = back_ties * (back.detach() == best.gather(0, idx)).to(ties.dtype)
        total = hit_own.clone().scatter_add_(0, idx, hit_back).clamp(min=1)

        def zero_valued(v, hit):   # v - v, differentiable, where v attains (no inf - inf elsewhere)
            v = torch.where(hit > 0, v, torch.zeros_like(v))
            return v - v.detach()
        # best, differentiable: each attaining partial enters with its share of the gradient
        return best + zero_valued(own, hit_own) * (hit_own / total) + torch.zeros_like(best).scatter_add(
            0, idx, zero_valued(back, hit_back) * (hit_back / total.gather(0, idx)))

    # forward/backward bodies
    def _fetch(self, x: torch.Tensor, label: str) -> torch.Tensor:
        if self.mode == "bcast":
            blocks = self.comm.allgatherv(x, self.block_rows, label)
            return self._place(x, blocks.index_select(0, self.halo_pos))
        send = x.index_select(0, self.send_all)
        halo = self.comm.alltoallv(send, self.send_counts, self.recv_counts, label)
        return self._place(x, halo)

    def _return(self, g: torch.Tensor, label: str) -> torch.Tensor:
        """The transpose of _fetch: gradient (or partial) rows of the halo summed into owners."""
        own, halo = g.index_select(0, self.own_pos), g.index_select(0, self.recv_pos)
        if self.mode == "bcast":
            full = g.new_zeros((int(self.block_rows.sum()),) + tuple(g.shape[1:]))
            full.index_add_(0, self.halo_pos, halo)
            return own + self.comm.reduce_scatter(full, self.block_rows, label)
        back = self.comm.alltoallv(halo.contiguous(), self.recv_counts, self.send_counts, label)
        return own.index_add(0, self.send_all, back)


class _Fetch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ex: HaloExchange, label: str):
        ctx.ex, ctx.label = ex, label
        return ex._fetch(x.detach(), label + " fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.ex._return(g.contiguous(), ctx.label + " bwd"), None, None


class _ToOwners(torch.autograd.Function):
    """The halo rows of a local-space tensor, sent to their owners (one row
    per (owner row, reader) pair, in send_all order); backward: their
    gradients returned to the halo rows (zero elsewhere)."""

    @staticmethod
    def forward(ctx, partial, ex: HaloExchange, label: str):
        ctx.ex, ctx.label, ctx.shape = ex, label, partial.shape
        halo = partial.detach().index_select(0, ex.recv_pos).contiguous()
        return ex.comm.alltoallv(halo, ex.recv_counts, ex.send_counts, label + " fwd")

    @staticmethod
    def backward(ctx, g):
        ex = ctx.ex
        halo = ex.comm.alltoallv(g.contiguous(), ex.send_counts, ex.recv_counts, ctx.label + " bwd")
        out = g.new_zeros(ctx.shape)
        out.index_copy_(0, ex.recv_pos, halo)
        return out, None, None


class _Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial, ex: HaloExchange, label: str):
        ctx.ex, ctx.label = ex, label
        return ex._return(partial.detach().contiguous(), label + " fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.ex._fetch(g.contiguous(), ctx.label + " bwd"), None, None


class AllReduce(torch.autograd.Function):
    """Sum of partial results over a communicator; every member gets the total.
    Backward: the gradient of each partial is the sum of the members' gradients."""

    @staticmethod
    def forward(ctx, x, comm: Comm, label: str):
        ctx.comm, ctx.label = comm, label
        return comm.allreduce_(x.detach().clone().contiguous(), label + " fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.allreduce_(g.clone().contiguous(), ctx.label + " bwd"), None, None


def tie_shares(x: torch.Tensor, ties: torch.Tensor, out: torch.Tensor, total_of) -> torch.Tensor:
    """Each partial's share of the gradient of a max / min combined from
    partials: the reference (torch's scatter_reduce rule) splits an output's
    gradient evenly among all the edges that tie for it, wherever they are.
    A partial that attains the result holds `ties` of them (its local count),
    so it gets ties / (the ties of all partials that attain it), and its local
    scatter_reduce splits that evenly among its own. `total_of` sums the
    attaining counts over the partials (a collective). Was: every partial
    that attained the result got the whole gradient, so ties across ranks
    (duplicate edges, messages equal after a relu) gave a multiple of it."""
    hit = ties * (x == out).to(ties.dtype)
    return hit / total_of(hit.clone()).clamp(min=1)


class AllReduceExtremum(torch.autograd.Function):
    """max / min of partial results (`ties`: each element's count of local
    edges that attain this partial); the gradient goes to the members whose
    partial attained the result, shared by their tie counts (`tie_shares`)."""

    @staticmethod
    def forward(ctx, x, ties, comm: Comm, label: str, op: str):
        out = comm.allreduce_(x.detach().clone().contiguous(), label + " fwd", op)
        ctx.save_for_backward(tie_shares(x.detach(), ties, out,
                                         lambda h: comm.allreduce_(h.contiguous(), label + " ties")))
        ctx.comm, ctx.label = comm, label
        return out

    @staticmethod
    def backward(ctx, g):
        (share,) = ctx.saved_tensors
        total = ctx.comm.allreduce_(g.clone().contiguous(), ctx.label + " bwd")
        return total * share, None, None, None, None


class BlockBcast(torch.autograd.Function):
    """CAGNET 1.5D: the blocks col_blocks[j] broadcast within process column j,
    stage by stage (Algorithm 2 line 5); backward reduces each to its root.
    The root's own block is not returned (the rank reads it in place: its
    part's local rows hold it once); in the backward the root adds zeros to
    the reduction and its own gradient reaches x directly."""

    @staticmethod
    def forward(ctx, x, comm: Comm, stages: list[tuple[int, int]], my_block: int, label: str):
        ctx.comm, ctx.stages, ctx.my_block, ctx.label = comm, stages, my_block, label
        ctx.xshape = x.shape
        from gdsl.dist.comm import mpi
        MPI = mpi()
        outs = []
        for q, rows in stages:
            # a host buffer (a GPU rank's block is staged through it: comm.host)
            buf = host(x).clone() if q == my_block else torch.empty((rows,) + tuple(x.shape[1:]), dtype=x.dtype)
            t0 = time.perf_counter()
            with waiting(f"bcast '{label} fwd'"):
                comm.comm.Bcast([buf.numpy(), mpi_type(buf)], root=q)
            nbytes = buf.numel() * buf.element_size()
            comm.stats.add("bcast", label + " fwd", nbytes * (comm.size - 1) if q == my_block else 0,
                           0 if q == my_block else nbytes, time.perf_counter() - t0)
            if q != my_block:
                outs.append(buf)
        return _cat(outs, x).to(x.device)

    @staticmethod
    def backward(ctx, g):
        from gdsl.dist.comm import mpi
        MPI = mpi()
        comm = ctx.comm
        out = None
        off = 0
        for q, rows in ctx.stages:
            if q == ctx.my_block:   # not in the output: the own block's gradient went to x directly
                part = torch.zeros((rows,) + tuple(g.shape[1:]), dtype=g.dtype)
            else:
                part = host(g[off: off + rows])
                off += rows
            recv = torch.empty_like(part) if q == ctx.my_block else None
            t0 = time.perf_counter()
            with waiting(f"reduce '{ctx.label} bwd'"):
                comm.comm.Reduce([part.numpy(), mpi_type(part)], None if recv is None else
                                 [recv.numpy(), mpi_type(recv)], op=MPI.SUM, root=q)
            nbytes = part.numel() * part.element_size()
            comm.stats.add("reduce", ctx.label + " bwd", 0 if q == ctx.my_block else nbytes,
                           nbytes * (comm.size - 1) if q == ctx.my_block else 0, time.perf_counter() - t0)
            if recv is not None:
                out = recv.to(g.device)
        if out is None:
            out = g.new_zeros(ctx.xshape)  # not a root in this column's stages
        return out, None, None, None, None


class SplitCombine:
    """DistGNN's split-vertex tree (§5.3, Algorithm 4): leaves send partial
    aggregates to the root, the root reduces them and sends the result back.
    `send_idx[q]`: my leaf rows whose root is q; `recv_idx[q]`: my root rows
    that q holds as leaves (same order on both sides)."""

    def __init__(self, comm: Comm, send_idx: list[np.ndarray], recv_idx: list[np.ndarray],
                 device: torch.device | str = "cpu"):
        self.comm = comm
        self.leaf_all = _index(np.concatenate(send_idx) if send_idx else np.zeros(0, np.int64), device)
        self.root_all = _index(np.concatenate(recv_idx) if recv_idx else np.zeros(0, np.int64), device)
        self.leaf_counts = np.array([s.size for s in send_idx], np.int64)
        self.root_counts = np.array([s.size for s in recv_idx], np.int64)

    def exact(self, partial: torch.Tensor, label: str, reduce: str = "sum",
              ties: torch.Tensor | None = None) -> torch.Tensor:
        """The complete aggregate on every replica; for max / min, `ties` is
        each element's count of local edges attaining the partial (`tie_shares`)."""
        if reduce != "sum" and ties is None:
            raise ValueError("a max / min combine needs the partials' tie counts")
        return _Combine.apply(partial, ties, self, label, reduce)

    def _run(self, x: torch.Tensor, label: str, reduce: str) -> torch.Tensor:
        up = self.comm.alltoallv(x.index_select(0, self.leaf_all), self.leaf_counts, self.root_counts, label + " leaf->root")
        out = x.clone()
        if reduce == "sum":
            out.index_add_(0, self.root_all, up)
        else:
            idx = self.root_all.reshape((-1,) + (1,) * (x.dim() - 1)).expand_as(up)
            out.scatter_reduce_(0, idx, up, "amax" if reduce == "max" else "amin", include_self=True)
        down = self.comm.alltoallv(out.index_select(0, self.root_all), self.root_counts, self.leaf_counts,
                                   label + " root->leaf")
        out.index_copy_(0, self.leaf_all, down)
        return out


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ties, sc: SplitCombine, label: str, reduce: str):
        ctx.sc, ctx.label, ctx.reduce = sc, label, reduce
        out = sc._run(x.detach().contiguous(), label + " fwd", reduce)
        if reduce != "sum":
            ctx.save_for_backward(tie_shares(x.detach(), ties, out,
                                             lambda h: sc._run(h.contiguous(), label + " ties", "sum")))
        return out

    @staticmethod
    def backward(ctx, g):
        # every replica uses the total, so each partial's gradient is the sum of
        # the replicas' gradients: the same tree, summing
        total = ctx.sc._run(g.contiguous(), ctx.label + " bwd", "sum")
        if ctx.reduce != "sum":
            (share,) = ctx.saved_tensors
            total = total * share
        return total, None, None, None, None


class PullRows(torch.autograd.Function):
    """P3 §3.2 pull: partial activations of all N vertices (one per feature
    slice) summed onto the owners of the rows (reduce-scatter); backward
    pushes the rows' error gradient to every rank (allgatherv)."""

    @staticmethod
    def forward(ctx, x, comm: Comm, rows: np.ndarray, label: str):
        ctx.comm, ctx.rows, ctx.label = comm, rows, label
        return comm.reduce_scatter(x.detach().contiguous(), rows, label + " fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.allgatherv(g.contiguous(), ctx.rows, ctx.label + " bwd"), None, None, None


class GatherRows(torch.autograd.Function):
    """Every rank's row block concatenated in rank order (allgatherv); the
    backward sums each block's gradient back onto its rank (reduce-scatter).
    RDM §III-E's broadcast of an SpMM input within a column group."""

    @staticmethod
    def forward(ctx, x, comm: Comm, rows: np.ndarray, label: str):
        ctx.comm, ctx.rows, ctx.label = comm, rows, label
        return comm.allgatherv(x.detach().contiguous(), rows, label + " fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.reduce_scatter(g.contiguous(), ctx.rows, ctx.label + " bwd"), None, None, None


class Redistribute(torch.autograd.Function):
    """RDM §III: between row slicing (block rows, all columns) and column
    slicing (all rows, a slice of the columns) with one all-to-all; backward
    is the opposite redistribution."""

    @staticmethod
    def forward(ctx, x, comm: Comm, rows: np.ndarray, cols: list[tuple[int, int]], to_cols: bool, label: str):
        ctx.args = (comm, rows, cols, label)
        ctx.to_cols = to_cols
        return _redistribute(x.detach(), comm, rows, cols, to_cols, label + " fwd")

    @staticmethod
    def backward(ctx, g):
        comm, rows, cols, label = ctx.args
        return _redistribute(g, comm, rows, cols, not ctx.to_cols, label + " bwd"), None, None, None, None, None


def _redistribute(x: torch.Tensor, comm: Comm, rows: np.ndarray, cols: list[tuple[int, int]], to_cols: bool,
                  label: str) -> torch.Tensor:
    P, me = comm.size, comm.rank
    widths = np.array([hi - lo for lo, hi in cols], np.int64)
    if to_cols:  # x: [rows[me], f] -> [N, widths[me]]
        send = torch.cat([x[:, lo:hi].reshape(-1) for lo, hi in cols]) if P > 1 else x.reshape(-1)
        sc = rows[me] * widths
        rc = rows * widths[me]
        flat = comm.alltoallv(send.contiguous(), sc, rc, label)
        return flat.reshape(int(rows.sum()), int(widths[me]))
    # x: [N, widths[me]] -> [rows[me], f]
    starts = np.concatenate([[0], np.cumsum(rows)])
    send = torch.cat([x[starts[q]:starts[q + 1]].reshape(-1) for q in range(P)])
    sc = rows * widths[me]
    rc = rows[me] * widths
    flat = comm.alltoallv(send.contiguous(), sc, rc, label)
    pieces = torch.split(flat, [int(c) for c in rc])
    return torch.cat([p.reshape(int(rows[me]), int(w)) for p, w in zip(pieces, widths)], dim=1)


class DelayPipe:
    """DistGNN's Delayed Remote Partial Aggregates (§5.3, Algorithm 4) for one
    aggregation. Split vertices are binned into r bins by global id; in epoch
    e the leaves of bin e % r send their partial sums to the roots
    (non-blocking all-to-all-v, lines 10-11); r epochs later the roots receive
    them, add them to their own fresh partial and send the totals back
    (lines 13-16), which the leaves receive another r epochs later (lines
    19-20).

    Every epoch a replica uses its fresh local partial plus the latest remote
    contribution received for its bin: the "stale, partially-aggregated
    remote vertex features" of §5.3. Two refinements of the literal
    algorithm, both measured (docs/distributed.md, "Approximate plans"):
    - a bin keeps its latest remote contribution in the epochs it is not
      refreshed (read literally, lines 13-20 add remote contributions only to
      bin e % r in epoch e and leave the other bins local-only);
    - a leaf keeps its own fresh partial and adds the root's total minus the
      partial it had sent into it (line 20 overwrites the leaf with the
      root's total, its own part as stale as the rest), so every replica is
      fresh local + stale remote, the same function of its input.
    Until a replica's first remote contribution arrives (2r epochs for a
    leaf, r for a root) its partial is rescaled as 0c's (`scale`)."""

    def __init__(self, tree: SplitCombine, row_gid: torch.Tensor, r: int, comm: Comm, label: str):
        self.tree, self.r, self.comm, self.label = tree, r, comm, label
        self.sent: dict[int, tuple] = {}       # epoch -> (requests, buffers) in flight
        self.own_sent: dict[int, torch.Tensor] = {}  # epoch -> the partials my leaves sent then
        self.root_in: dict[int, torch.Tensor] = {}   # bin -> leaves' partials, at my roots
        self.leaf_in: dict[int, torch.Tensor] = {}   # bin -> remote part of the total, at my leaves
        row_gid = row_gid.to(tree.leaf_all.device)
        self.bins = [((row_gid[tree.leaf_all] % r) == b, (row_gid[tree.root_all] % r) == b) for b in range(r)]
        self.counts = []
        for leaf_mask, root_mask in self.bins:
            up = np.array([int(m.sum()) for m in torch.split(leaf_mask, [int(c) for c in tree.leaf_counts])], np.int64)
            rc = np.array([int(m.sum()) for m in torch.split(root_mask, [int(c) for c in tree.root_counts])], np.int64)
            self.counts.append((up, rc))

    def step(self, x: torch.Tensor, e: int, scale: torch.Tensor | None = None) -> torch.Tensor:
        """x (fresh local partial sums) plus the stale remote contributions; starts this epoch's sends."""
        from gdsl.dist.comm import mpi
        tree, b, r = self.tree, e % self.r, self.r
        if (e - r) in self.sent:  # what bin b started r epochs ago has arrived
            reqs, bufs = self.sent.pop(e - r)
            t0 = time.perf_counter()
            with waiting(f"the delayed ialltoallv '{self.label}'"):
                mpi().Request.Waitall(reqs)
            self.comm.stats.add("wait", self.label + " (delayed)", 0, 0, time.perf_counter() - t0)
            # the receive buffers are host memory (on a GPU rank: copied to the device here)
            self.root_in[b] = bufs["up"].to(x.device)
            if "down" in bufs:
                # the root's total of epoch e - r holds what my leaves sent in epoch e - 2r
                self.leaf_in[b] = bufs["down"].to(x.device) - self.own_sent.pop(e - 2 * r)
        out = x.clone()
        if scale is not None and (len(self.root_in) < self.r or len(self.leaf_in) < self.r):
            # some bin still waits for its first remote contribution (the first 2r epochs)
            mult = scale.clone()
            for bb in self.root_in:
                mult[tree.root_all[self.bins[bb][1]]] = 1.0
            for bb in self.leaf_in:
                mult[tree.leaf_all[self.bins[bb][0]]] = 1.0
            out = out * mult.reshape((-1,) + (1,) * (x.dim() - 1))
        for bb, buf in self.root_in.items():
            out.index_add_(0, tree.root_all[self.bins[bb][1]], buf)
        leaf_mask, root_mask = self.bins[b]
        up, rc = self.counts[b]
        row = int(np.prod(x.shape[1:], dtype=np.int64)) if x.dim() > 1 else 1
        up_send = x.index_select(0, tree.leaf_all[leaf_mask]).contiguous()
        self.own_sent[e] = up_send
        # non-blocking MPI on host buffers (a GPU rank stages its sends through
        # host copies), kept alive in `bufs` until the requests complete
        up_host = host(up_send)
        up_recv = torch.empty((int(rc.sum()),) + tuple(x.shape[1:]), dtype=x.dtype)
        reqs = [self._ialltoallv(up_host, up, up_recv, rc, row, "leaf->root")]
        bufs = {"up": up_recv, "keep_up": up_host}
        if b in self.root_in:
            down_send = host(out.index_select(0, tree.root_all[root_mask]))
            down_recv = torch.empty((int(up.sum()),) + tuple(x.shape[1:]), dtype=x.dtype)
            reqs.append(self._ialltoallv(down_send, rc, down_recv, up, row, "root->leaf"))
            bufs.update(down=down_recv, keep=down_send)
        self.sent[e] = (reqs, bufs)
        for bb, buf in self.leaf_in.items():
            out.index_add_(0, tree.leaf_all[self.bins[bb][0]], buf)
        return out

    def _ialltoallv(self, send, sc, recv, rc, row, what):
        from gdsl.dist.comm import mpi
        MPI = mpi()
        sc_e, rc_e = sc * row, rc * row
        sd = np.concatenate([[0], np.cumsum(sc_e)[:-1]]).astype(np.int64)
        rd = np.concatenate([[0], np.cumsum(rc_e)[:-1]]).astype(np.int64)
        me, b = self.comm.rank, send.element_size()
        self.comm.stats.add("ialltoallv", f"{self.label} {what} (delayed)", (sc_e.sum() - sc_e[me]) * b,
                            (rc_e.sum() - rc_e[me]) * b)
        return self.comm.comm.Ialltoallv([send.numpy(), (sc_e, sd), mpi_type(send)],
                                         [recv.numpy(), (rc_e, rd), mpi_type(recv)])

    def finish(self) -> None:
        """Complete the sends in flight; what they received stays for the
        epoch that will use it (so a checkpoint or the end of a run does not
        change the pipeline's contents)."""
        from gdsl.dist.comm import mpi
        for e, (reqs, bufs) in list(self.sent.items()):
            with waiting(f"the delayed ialltoallv '{self.label}'"):
                mpi().Request.Waitall(reqs)
            self.sent[e] = ([], {k: v for k, v in bufs.items() if not k.startswith("keep")})

    def state_dict(self) -> dict:
        """The pipeline's contents after `finish`: what each epoch in flight
        received, the partials my leaves sent, the latest remote contributions."""
        self.finish()
        return {"sent": {e: dict(bufs) for e, (_, bufs) in self.sent.items()},
                "own_sent": dict(self.own_sent), "root_in": dict(self.root_in), "leaf_in": dict(self.leaf_in)}

    def load_state_dict(self, state: dict) -> None:
        self.sent = {int(e): ([], dict(bufs)) for e, bufs in state["sent"].items()}
        self.own_sent = {int(e): t for e, t in state["own_sent"].items()}
        self.root_in = {int(b): t for b, t in state["root_in"].items()}
        self.leaf_in = {int(b): t for b, t in state["leaf_in"].items()}


class Delayed(torch.autograd.Function):
    """cd-r: the forward adds stale remote partial aggregates (DelayPipe); the
    backward combines the replicas' gradients through the tree at once
    (cd-0's backward exchange, blocking), i.e. the remote contributions are
    differentiated as if they were current.

    Measured alternatives (GCN, Cora, P = 4, 200 epochs, seeds 0-2, final
    test accuracy; exact 0.795 / 0.810 / 0.799; both layers dense-first, before
    the order pass aggregated layer 1 sparse-first under cd-r): remote contributions as
    constants (the backward sees local edges only), cd-2 0.768 / 0.792 /
    0.790, cd-5 0.766 / 0.789 / 0.785, no better than 0c: the gradient of a
    split vertex's output never reaches its remote in-neighbours; the
    gradients delayed through a second DelayPipe, cd-5 0.698 / 0.683 / 0.753."""

    @staticmethod
    def forward(ctx, x, fwd: DelayPipe, epoch: int, scale, label: str):
        ctx.tree, ctx.label = fwd.tree, label
        return fwd.step(x.detach().contiguous(), epoch, scale)

    @staticmethod
    def backward(ctx, g):
        return ctx.tree._run(g.contiguous(), ctx.label + " bwd", "sum"), None, None, None, None
