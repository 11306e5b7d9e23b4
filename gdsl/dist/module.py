"""The distributed executor: one rank's share of a compiled program.

`DistModule` runs the same optimised IR as the reference backend, op by op
with the same torch code, on this rank's rows. What differs is where rows
come from and where partial results go, and that is the plan:

  reading `src.x`      (a scatter, or a fused aggregate/sddmm/attention)
                       needs the rows of x the local edges read: 1D fetches
                       the halo (HaloExchange), 1.5D the column's blocks
                       (BlockBcast); vertex-cut and replicate have them locally
  gather / aggregate   reduce local edges into a partial result, completed by
                       the plan: nothing (1D: a vertex's in-edges are local),
                       an all-reduce in the process row (1.5D), the split-vertex
                       tree (vertex-cut, delayed for cd-r / skipped for 0c)
  the first layer      P3 (features): every op up to the first `sync` runs on
                       all vertices and this rank's feature columns; the sync
                       pulls the summed rows to their owners
  aggregate (RDM)      redistribute rows -> columns, aggregate over the whole
                       graph (A on every rank), columns -> rows

Gradients flow back through the same collectives (gdsl/dist/functions.py);
parameter gradients are all-reduced by the trainer (`sync_grads`).
"""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gdsl.backends import gemm
from gdsl.backends.reference.executor import (
    ReferenceModule,
    broadcast_modes,
    float_mask,
    plan_hoist,
    refuse_arguments,
    reshape_targets,
    scatter_extremum,
)
from gdsl.backends.reference.graphdata import GraphData
from gdsl.backends.reference.linear import plan_linear, run_linear, sparse_mm
from gdsl.diagnostics import GdslError
from gdsl.dist import functions as fn
from gdsl.dist.comm import Comm, waiting
from gdsl.dist.kernels import LocalKernels
from gdsl.dist.part import RankPart
from gdsl.dist.support import _namer, check_delay, check_supported, feature_input, feature_region
from gdsl.graph.partition import feature_slices
from gdsl.ir.core import Module, Op, Value

_EDGE_READERS = {"src", "dst", "gather", "edge_softmax", "aggregate", "sddmm", "gat_aggregate"}


def _rows2d(h: torch.Tensor) -> torch.Tensor:
    """h as [rows, everything else] (reshape(n, -1) fails when a rank holds no rows)."""
    return h.reshape(h.shape[0], int(np.prod(h.shape[1:], dtype=np.int64)))


def _view(own_pos: np.ndarray, src, dst, in_deg, out_deg, edata: dict, graph, device: torch.device) -> GraphData:
    """A GraphData over local arrays, on the rank's device: vertex values are
    the rows `own_pos` of the local space; `src` indexes the local space,
    `dst` the vertex rows."""
    gd = GraphData.__new__(GraphData)
    gd.graph, gd.num_nodes = graph, int(own_pos.size)
    gd.src, gd.dst = fn.as_tensor(src, device), fn.as_tensor(dst, device)
    ind, outd = fn.as_tensor(in_deg, device), fn.as_tensor(out_deg, device)
    pos = fn.as_tensor(own_pos, device)
    ind_own, outd_own = ind[pos], outd[pos]
    gd.vertex_env = {"degree": ind_own, "out_degree": outd_own}
    gd.edge_env = {"src_degree": ind[gd.src], "dst_degree": ind_own[gd.dst],
                   "src_out_degree": outd[gd.src], "dst_out_degree": outd_own[gd.dst],
                   **{k: fn.as_tensor(v, device) for k, v in edata.items()}}
    return gd


def _tie_counts(m: torch.Tensor, idx: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Per element of a partial max / min `out` (rows: idx of each message of
    `m`): how many local messages attain it (0 for a row without one)."""
    with torch.no_grad():
        hit = (m == out.index_select(0, idx)).to(out.dtype)
        return torch.zeros_like(out).index_add_(0, idx, hit)


class DistModule(ReferenceModule):
    """One rank of a distributed plan, as a torch Module (forward returns the
    rows this rank computes; `loss` and `metrics` are global).

    `device`: where the rank's graph, features, params and activations live
    (the CPU, or the rank's GPU for --backend triton: `kernels.rank_device`);
    the collectives stage device tensors through host buffers (comm.host)."""

    def __init__(self, module: Module, part: RankPart, comm: Comm, backend: str = "reference",
                 device: torch.device | str | None = None) -> None:
        nn.Module.__init__(self)
        self.ir, self.part, self.comm = module, part, comm
        self.device = dev = torch.device("cpu" if device is None else device)
        self._vn = _namer(module)  # value -> its name in the IR dump, for comm labels
        self.spec = part.spec
        strategy = self.spec.strategy
        self.graph = SimpleNamespace(
            features=None if part.features is None else fn.as_tensor(part.features, dev),
            labels=None if part.labels is None else fn.as_tensor(part.labels, dev),
            masks={k: fn.as_tensor(v, dev) for k, v in part.masks.items()},
            ndata={k: fn.as_tensor(v, dev) for k, v in part.ndata.items()}, edata={})
        self.gd = _view(part.own_pos, part.src, part.dst, part.in_degree, part.out_degree, part.edata, self.graph,
                        dev)
        self.full = None
        if "full_src" in part.extra:
            ex = part.extra
            edata = {k[len("full_edata."):]: v for k, v in ex.items() if k.startswith("full_edata.")}
            rows = np.arange(*(int(v) for v in ex["panel"])) if "panel" in ex else np.arange(part.num_nodes)
            self.full = _view(rows, ex["full_src"], ex["full_dst"], ex["full_in_degree"],
                              ex["full_out_degree"], edata, self.graph, dev)
        self.src_index, self.dst_index = self.gd.src, self.gd.dst
        # global ids of my rows and edges, in host memory: the dropout masks are drawn there
        self.row_gid = torch.from_numpy(part.owned_rows)
        self.edge_gid = torch.from_numpy(part.eid)
        self.counted = fn.as_tensor(part.counted, dev)
        self._create_params(module)   # drawn on the host, as one process draws them
        self.to(dev)
        self.feature_input = feature_input(module)
        self._reshape_to = reshape_targets(module)
        self._modes = broadcast_modes(module)
        self.loss_op = next((op for op in module.main.ops if op.name == "loss"), None)
        self._consts: dict = {}
        self._scalars: dict = {}   # ReferenceModule._scalar's, filled as the ops run
        self._spmm = {}
        self.local_params: set[str] = set()   # model-parallel params (P3 layer 1): not all-reduced
        self.cols_region: set[Value] = set()
        self._delay_state: dict = {}
        self._invariant_kept: dict = {}   # approximate vertex cut: invariant aggregations, completed once
        self._rank_hoist: dict | None = None   # exact plans: the invariant values, from the first forward
        self._rank_hoist_plan = None
        self._delay_restore: dict = {}   # op position -> DelayPipe state from a checkpoint
        self.epoch = 0
        P = comm.size
        with waiting("allgather of the block sizes"):
            self.block_rows = np.array(comm.comm.allgather(part.n_own), np.int64) if P > 1 else np.array([part.n_own])
        self._check_supported(module)
        if strategy in ("rows", "features", "redistribute"):
            self._halo = self._make_halo()
        if strategy == "rows_replicated":
            grid = part.extra["grid"]
            self.teams, self.c, self.team, self.member = (int(v) for v in grid)
            self.row_comm = comm.split(self.team, self.member)     # the c members of my process row
            self.col_comm = comm.split(self.member, self.team)     # process column: one per team
            starts = part.extra["block_starts"]
            self.stages = [(int(q), int(starts[q + 1] - starts[q])) for q in part.extra["stage_blocks"]]
        if strategy == "vertex_cut":
            self._tree = fn.SplitCombine(comm, part.send_idx, part.recv_idx, dev)
            if self.spec.delay != 0:
                self._partial_scale = self._make_partial_scale()
            if self.spec.delay == "none":
                self._replicas = self._replica_counts()
        if strategy == "redistribute":
            # RDM §III-E: grid row i = ranks i R_A .. i R_A + R_A - 1 (row panel i of A),
            # grid column j = the ranks holding column slice j of every panel
            R_A = P if self.spec.arg is None else int(self.spec.arg)
            i, j = divmod(comm.rank, R_A)
            self.rdm_replicas = R_A
            self.rdm_row = comm.split(i, j) if R_A < P else comm
            self.rdm_col = comm.split(j, i) if R_A < P else None
            self.rdm_row_rows = self.block_rows[i * R_A:(i + 1) * R_A]
            self.rdm_panel_rows = self.block_rows.reshape(-1, R_A).sum(1)
        if strategy == "features":
            self._mark_feature_region(module)
        self._plan_fast_spmm(module)
        self.backend = backend
        self.kernels = None if backend == "reference" else \
            LocalKernels(backend, self.gd.src, self.gd.dst, part.own_pos, part.n_local, strategy, dev)
        self._lin_anchor, self._lin_skip = plan_linear(self, module)
        self._check_linear_groups()

    # ---------------------------------------------------------------- set-up
    def _make_halo(self) -> fn.HaloExchange:
        part = self.part
        halo_pos = None
        if self.spec.halo == "bcast":
            # position of each halo row in the gathered blocks (rank order, owned rows in gid order)
            with waiting("allgather of the owned rows"):
                owned = self.comm.comm.allgather(part.owned_rows)
            pos = {}
            off = 0
            for q, rows in enumerate(owned):
                pos[q] = (off, rows)
                off += rows.size
            out = []
            for q in range(self.comm.size):
                ids = part.gid[part.recv_idx[q]]
                start, rows = pos[q]
                out.append(start + np.searchsorted(rows, ids))
            halo_pos = np.concatenate(out) if out else np.zeros(0, np.int64)
        return fn.HaloExchange(self.comm, part.send_idx, part.recv_idx, part.own_pos, part.n_local,
                               self.spec.halo, self.block_rows, halo_pos, self.device)

    def _check_supported(self, module: Module) -> None:
        """Refuse, before any communication, an op the plan cannot run exactly."""
        check_supported(self.spec.strategy, module, self._vn)
        check_delay(self.spec.delay if self.spec.strategy == "vertex_cut" else 0, module, self._vn)

    def _mark_feature_region(self, module: Module) -> None:
        """P3 §3.1-3.2: layer 1 up to its sync runs model-parallel on this rank's
        feature columns of all vertices (`feature_region`)."""
        kind, self.local_params = feature_region(module, self._vn)
        self.cols_region = {v for v, k in kind.items() if k in ("cols", "partial")}
        self.region_kind = kind
        lo, hi = (int(v) for v in self.part.extra["feature_cols"])
        self.feature_cols = (lo, hi)

    def _plan_fast_spmm(self, module: Module) -> None:
        """As the reference: copy/edge-constant sum aggregations as one CSR product
        (local rows x local+halo columns), for the views they run in."""
        for op in module.main.ops:
            if op.name != "aggregate" or op.attrs["reduce"] != "sum" or op.attrs["msg"] not in ("copy_src", "mul") \
                    or op.attrs["to"] != "dst":
                continue
            if op.attrs["msg"] == "mul" and (op.operands[1].owner is None or op.operands[1].owner.name != "edge_const"):
                continue
            gd = self._gd_for(op)
            w = None if op.attrs["msg"] == "copy_src" else self._const(op.operands[1].owner, gd)
            vals = torch.ones(gd.src.numel(), device=gd.src.device) if w is None else w.to(torch.float32)
            n_cols = self.part.num_nodes if gd is self.full else self.part.n_local
            if self.spec.strategy == "rows_replicated":
                n_cols = self.part.n_local
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._spmm[op] = torch.sparse_coo_tensor(torch.stack([gd.dst, gd.src]), vals,
                                                         (gd.num_nodes, n_cols)).coalesce().to_sparse_csr()

    def linear_spmm(self, agg: Op):
        return None   # local products need the halo rows: linear.py goes through run_op

    def _check_linear_groups(self) -> None:
        """A backward order other than autograd's own (linear.py) runs its SpMMs
        through `run_op` in both directions; on the plans where that is not the
        same computation, a backward order the order pass chose by cost falls
        back to autograd's own (the same gradients; was: every rank refused it,
        telling the user to drop hint options they never wrote), and one a hint
        chose is refused."""
        keep = {}
        for anchor, runner in self._lin_anchor.items():
            g = runner.g
            why = self._linear_unsupported(g)
            if why is None:
                keep[anchor] = runner
            elif g.agg.attrs.get("order_grad_by") == "hint":
                raise GdslError(f"{self._vn(g.out)} ({g.agg.attrs.get('scope', '')}): {why}")
        if len(keep) != len(self._lin_anchor):
            self._lin_anchor = keep
            self._lin_skip = {op for r in keep.values() for op in r.g.ops[:-1]}

    def _linear_unsupported(self, g) -> str | None:
        """Why this plan cannot run group `g`'s chosen backward order, or None."""
        opts = f"backward = {g.bwd} with memoize = {str(g.memo).lower()} is not implemented"
        if any(op.result in self.cols_region for op in g.ops):
            return f"{opts} in P3's model-parallel first layer (partition = features)"
        if self.spec.strategy == "redistribute" and self.rdm_replicas < self.comm.size:
            return (f"{opts} for redistribute({self.rdm_replicas}) (R_A < P), which runs autograd's own backward "
                    "order (drop the order hint's backward/memoize options)")
        if self.spec.strategy == "rows_replicated":
            return (f"{opts} for rows_replicated (1.5D) plans, which run autograd's own backward order (drop the "
                    "order hint's backward/memoize options)")
        if self.spec.strategy == "vertex_cut" and self.spec.delay != 0:
            return (f"a chosen backward order is not implemented with delayed aggregation (delay = "
                    f"{self.spec.delay}); drop the order hint's backward/memoize options")
        return None

    # ---------------------------------------------------------------- views
    def _in_full(self, op: Op) -> bool:
        if self.spec.strategy == "redistribute":
            return op.name == "aggregate" or (op.result is not None and op.result.type.domain == "edge")
        return op.result in self.cols_region

    def _gd_for(self, op: Op) -> GraphData:
        return self.full if self.full is not None and self._in_full(op) else self.gd

    def _const(self, op: Op, gd: GraphData):
        key = (op, id(gd))
        if key not in self._consts:
            if op.name == "vertex_const":
                self._consts[key] = gd.vertex_const(op.attrs["expr"])
            elif op.name == "edge_const":
                self._consts[key] = gd.edge_const(op.attrs["expr"])
            else:
                self._consts[key] = gd.vertex_env["degree"]
        return self._consts[key]

    # ---------------------------------------------------------------- forward
    def _follow_params(self) -> None:
        """The ranks' params stay float32 (gdsl's own training loop)."""

    def forward(self, x: torch.Tensor | None = None, *extra, **named) -> torch.Tensor:
        refuse_arguments(extra, named)   # model(x, edge_index=ei): a gdsl error (was: Python's bare TypeError)
        self.begin_forward(extra)
        self._ext_cache: dict[Value, torch.Tensor] = {}
        env, hoisted = self._rank_hoisted(x)
        for op in self.ir.main.ops:
            if op.name == "loss" or op in self._lin_skip or op in hoisted:
                continue
            self._exec(op, env, x)
        return env[self.ir.main.results[0]]

    def _exec(self, op: Op, env: dict, x) -> None:
        if op in self._lin_anchor:
            env[op.result] = run_linear(self._lin_anchor[op], env)
        else:
            env[op.result] = self.run_op(op, [env[v] for v in op.operands], x)

    def _rank_hoisted(self, x) -> tuple[dict, frozenset]:
        """The values the IR marks invariant (no param, no dropout: SGC's
        S^K X, with their halo exchanges), computed by the first forward and
        kept, as `gdsl run` keeps them in one process (ReferenceModule
        `_hoisted`; was: every rank computed them again in every forward).
        Every rank decides alike (the plan and the IR are the same on all),
        so the collectives inside them run once on every rank. Exact plans
        only: a delayed (cd-r, 0c) aggregation's value changes from epoch to
        epoch (the approximate vertex cut completes its invariant ones once,
        `_invariant_kept`); and not for features given to the forward."""
        if x is not None or self.spec.delay != 0:
            return {}, frozenset()
        if self._rank_hoist_plan is None:   # a linear group (order hints) runs whole or not at all
            self._rank_hoist_plan = plan_hoist(self.ir, [set(r.g.ops) for r in self._lin_anchor.values()],
                                               set(self._lin_skip))
        plan = self._rank_hoist_plan
        if not plan.keep:
            return {}, frozenset()
        if self._rank_hoist is None:
            env: dict = {}
            with torch.no_grad():   # no param, no input requiring grad: nothing to differentiate
                for op in plan.run:
                    self._exec(op, env, x)
            self._rank_hoist = {v: env[v] for v in plan.keep}
        return dict(self._rank_hoist), plan.ops

    def run_op(self, op: Op, vals: list, x):  # noqa: C901 - the plan's dispatch
        n = op.name
        self._cur = op
        full = self.full is not None and self._in_full(op)
        if n in ("vertex_const", "edge_const", "degree"):
            return self._const(op, self._gd_for(op) if self.spec.strategy != "redistribute" else self._const_view(op))
        if n == "sync":
            if self.spec.strategy == "features" and op.operands[0] in self.cols_region:
                return fn.PullRows.apply(vals[0], self.comm, self.block_rows, f"{self._vn(op.result)} sync(pull)")
            return vals[0]
        if full:
            return self._run_full(op, vals, x)
        if n == "src":
            return self._ext(op.operands[0], vals[0]).index_select(0, self.src_index)
        if self.kernels is not None and self.kernels.takes(op):
            return self._on_kernel(op, vals)
        if n == "aggregate" and op in self._spmm:
            h = self._ext(op.operands[0], vals[0])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = sparse_mm(self._spmm[op], _rows2d(h))
            out = out.reshape((out.shape[0],) + tuple(h.shape[1:]))
            return self._complete(out, "sum", op)
        if n == "aggregate":
            vals = list(vals)
            if op.attrs.get("adjoint") and self.spec.strategy == "vertex_cut":
                # A^T of a gradient (linear.py): a split vertex's gradient is the sum
                # of its replicas' shares, so combine them before the local product
                # (the result stays one share per replica, as autograd keeps it)
                vals[0] = self._tree.exact(vals[0], f"{self._vn(op.result)} aggregate^T", "sum")
            if op.attrs["to"] == "dst" and op.attrs["msg"] != "copy_edge":
                vals[0] = self._ext(op.operands[0], vals[0])
            self._cur = op
            return self.aggregate(op, vals)
        if n == "gather":
            self._cur = op
            return self.gather(vals[0], op.attrs["reduce"], op.attrs["to"])
        if n == "sddmm":
            return super().run_op(op, [self._ext(op.operands[0], vals[0]), vals[1]], x)
        if n == "gat_aggregate":
            el, er, z = vals
            return super().run_op(op, [self._ext(op.operands[0], el), er, self._ext(op.operands[2], z)], x)
        if n == "flatten" and op.result.type.domain in ("vertex", "edge"):
            return _rows2d(vals[0])   # a rank may hold no rows
        return super().run_op(op, vals, x)

    def _on_kernel(self, op: Op, vals: list):
        """`op` on the backend's kernel over the local graph (gdsl/dist/kernels.py),
        completed by the plan as the torch path's partial result would be."""
        if op.name == "gat_aggregate":
            el, er, z = vals
            return self.kernels.gat(op, self._ext(op.operands[0], el), er, self._ext(op.operands[2], z))
        msg, reduce = op.attrs["msg"], op.attrs["reduce"]
        x = None if msg == "copy_edge" else self._ext(op.operands[0], vals[0])
        w = vals[0] if msg == "copy_edge" else (vals[1] if len(vals) > 1 else None)
        r = "sum" if reduce == "mean" else reduce
        self._cur = op
        out = self.kernels.aggregate(op, x, w, r)
        ties = None
        if r != "sum" and self.spec.strategy in ("rows_replicated", "vertex_cut"):
            # the kernel keeps no messages: count the ties on the torch path's messages
            mv = [w] if msg == "copy_edge" else [x] + ([w] if w is not None else [])
            ties = _tie_counts(self.messages(op, mv), self.dst_index, out)
        out = self._complete(out, r, op, "dst", ties)
        if reduce == "mean":
            deg = self.gd.vertex_env["degree"].clamp(min=1).to(out.dtype)
            out = out / deg.reshape((-1,) + (1,) * (out.dim() - 1))
        return out

    def _const_view(self, op: Op) -> GraphData:
        # RDM: an edge constant feeds the whole-graph aggregation; a vertex constant the local rows
        return self.full if op.name == "edge_const" else self.gd

    def _run_full(self, op: Op, vals: list, x):
        """An op on the whole graph: P3 layer 1 (columns of all vertices) or an RDM aggregation."""
        n = op.name
        consts = ("vertex_const", "edge_const", "degree")
        vals = [self._const(v.owner, self.full) if v.owner is not None and v.owner.name in consts else val
                for v, val in zip(op.operands, vals)]
        if self.spec.strategy == "redistribute" and n == "aggregate":
            h = vals[0]
            flat = _rows2d(h)
            # column slices of the tensor's width (linear.py also passes gradients and
            # recomputations through this op), one per replica of A's row panel
            cols = feature_slices(int(flat.shape[1]), self.rdm_replicas)
            label = f"{self._vn(op.result)} aggregate"
            hc = flat if self.rdm_row.size == 1 else \
                fn.Redistribute.apply(flat, self.rdm_row, self.rdm_row_rows, cols, True, label + " rows->cols")
            if self.rdm_col is not None:
                # R_A < P: the SpMM on panel i needs this column slice of every panel
                # (RDM §III-E: the input broadcast within the column group); backward:
                # the gradients summed back onto their panel (reduce-scatter)
                hc = fn.GatherRows.apply(hc, self.rdm_col, self.rdm_panel_rows, label + " bcast(col)")
            if op in self._spmm:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = sparse_mm(self._spmm[op], hc)
            else:
                sub = self._swap(self.full)
                self._plain_gather = True   # the whole graph on this rank: nothing to complete
                try:
                    out = super().aggregate(op, [_rows2d(hc), *vals[1:]])
                finally:
                    self._swap(sub)
                    self._plain_gather = False
            back = out if self.rdm_row.size == 1 else \
                fn.Redistribute.apply(out.contiguous(), self.rdm_row, self.rdm_row_rows, cols, False,
                                      label + " cols->rows")
            return back.reshape((back.shape[0],) + tuple(h.shape[1:]))
        if n == "matmul":
            lo, hi = self.feature_cols
            return gemm.matmul(vals[0], vals[1][lo:hi])
        # the backend's kernels are built on this rank's local graph, not the whole one: torch here
        if n == "aggregate" and op in self._spmm:
            h = vals[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return sparse_mm(self._spmm[op], _rows2d(h)).reshape(h.shape)
        if n == "input":
            return self.graph.features if x is None else x
        saved = self._swap(self.full)
        self._plain_gather = True   # the whole graph on this rank (P3's columns): nothing to complete
        try:
            return ReferenceModule.run_op(self, op, vals, x)
        finally:
            self._plain_gather = False
            self._swap(saved)

    def _swap(self, gd: GraphData) -> GraphData:
        """Point the reference code's graph fields at another view; returns the old one."""
        old = self.gd
        self.gd, self.src_index, self.dst_index = gd, gd.src, gd.dst
        return old

    # ---------------------------------------------------------------- rows the edges read
    def _ext(self, value: Value, x: torch.Tensor) -> torch.Tensor:
        """x with the rows this rank's edges read appended (cached per value)."""
        s = self.spec.strategy
        if s in ("replicate", "vertex_cut"):
            return x
        if value in self._ext_cache:
            return self._ext_cache[value]
        label = f"{self._vn(value)} src rows"
        if s == "rows_replicated":
            out = torch.cat([x, fn.BlockBcast.apply(x, self.col_comm, self.stages, self.team, label)])
        else:
            out = self._halo.fetch(x, label)
        self._ext_cache[value] = out
        return out

    # ---------------------------------------------------------------- completing partial reductions
    def gather(self, m: torch.Tensor, reduce: str, to: str) -> torch.Tensor:
        if getattr(self, "_plain_gather", False):
            return ReferenceModule.gather(self, m, reduce, to)
        idx = self.dst_index if to == "dst" else self.src_index
        rows = self.part.n_own if to == "dst" else self.part.n_local
        if self.spec.strategy in ("replicate", "vertex_cut"):
            rows = self.part.n_own
        out_shape = (rows,) + tuple(m.shape[1:])
        r = "sum" if reduce == "mean" else reduce
        ties = None
        if r == "sum":
            out = m.new_zeros(out_shape).index_add(0, idx, m)
        else:
            # an empty partial must not win a max/min: rows with no local edge hold -inf (+inf)
            partial = self.spec.strategy in ("rows_replicated", "vertex_cut") or to == "src"
            out = scatter_extremum(m, idx, rows, r, empty=(float("-inf") if r == "max" else float("inf"))
                                   if partial else 0.0)
            ties = _tie_counts(m, idx, out) if partial else None
        op = getattr(self, "_cur", None)
        out = self._complete(out, r, op, to, ties)
        if r in ("max", "min"):
            out = torch.where(torch.isfinite(out), out, torch.zeros_like(out))
        if reduce == "mean":
            deg = (self.gd.vertex_env["degree"] if to == "dst" else self.gd.vertex_env["out_degree"]).clamp(min=1)
            out = out / deg.reshape((-1,) + (1,) * (out.dim() - 1))
        return out

    def _complete(self, partial: torch.Tensor, reduce: str, op: Op | None, to: str = "dst",
                  ties: torch.Tensor | None = None) -> torch.Tensor:
        """This rank's partial aggregate completed as the plan does; `ties`
        (max / min): each element's count of local edges attaining the partial."""
        s = self.spec.strategy
        label = f"{self._vn(op.result)} {op.name}" if op is not None and op.result is not None else "gather"
        if s == "replicate" or (s == "vertex_cut" and op is not None and op.attrs.get("adjoint")):
            return partial
        if s in ("rows", "features", "redistribute"):
            if to == "dst":
                return partial
            if reduce in ("max", "min"):
                return self._halo.reduce_extremum(partial, label + " (to src)", reduce, ties)
            return self._halo.reduce(partial, label + " (to src)")
        if s == "rows_replicated":
            if reduce == "sum":
                return fn.AllReduce.apply(partial, self.row_comm, label + " allreduce(row)")
            return fn.AllReduceExtremum.apply(partial, ties, self.row_comm, label + " allreduce(row)", reduce)
        # vertex_cut
        delay = self.spec.delay
        if delay == 0 or not self.training:
            # cd-0; and every evaluation pass: the accuracy of the trained
            # weights is measured with complete aggregates
            return self._tree.exact(partial, label, reduce, ties)
        if op is not None and op.attrs.get("invariant"):
            # the same in every step (mark-invariant: no param, no dropout), such as a weighted
            # in-degree `sum(w)`: a graph constant, completed once, exactly, and kept. Delayed (cd-r)
            # or left partial (0c), a vertex with no local in-edge got 0 there, and rsqrt(0) a NaN
            # loss at epoch 1 (helper-68); computing it again each epoch would give the same values.
            kept = self._invariant_kept.get(op)
            if kept is None:
                kept = self._invariant_kept[op] = self._tree.exact(partial, label, reduce, ties).detach()
            return kept
        if delay == "none":
            # 0c: remote partial aggregates ignored; a sum over the local in-edges
            # stands for the sum over all of them (`_make_partial_scale`)
            return partial * self._scale_for(partial, to) if reduce == "sum" else partial
        return self._delayed(partial, reduce, op, label, to)

    def _make_partial_scale(self) -> dict[str, torch.Tensor]:
        """Per local row: all its in-edges (out-edges for `to = src`) over the
        ones in this partition. An approximate vertex-cut plan multiplies a
        split vertex's partial sum by it while no remote contribution is
        available (0c always, cd-r until the first one arrives), so the
        partial estimates the complete sum (unbiased were the edges placed at
        random) and a mean stays a mean over the local neighbours; DistGNN's
        own implementation divides its mean aggregation by the local in-degree
        under 0c. Rows whose edges are all local get exactly 1."""
        n = self.part.n_local
        out = {}
        for to, loc, glob in (("dst", self.part.dst, self.part.in_degree), ("src", self.part.src, self.part.out_degree)):
            local = torch.bincount(torch.from_numpy(np.asarray(loc, np.int64)), minlength=n).double()
            whole = torch.from_numpy(np.asarray(glob, np.float64))
            out[to] = torch.where(local > 0, whole / local.clamp(min=1), torch.ones_like(local)).float().to(self.device)
        return out

    def _scale_for(self, partial: torch.Tensor, to: str) -> torch.Tensor:
        return self._partial_scale[to].reshape((-1,) + (1,) * (partial.dim() - 1))

    def _replica_counts(self) -> torch.Tensor:
        """How many partitions hold each of my rows (one all-reduce of N
        counts at start-up, not in the per-epoch accounting)."""
        from gdsl.dist.comm import mpi
        counts = np.zeros(self.part.num_nodes, np.float64)
        counts[self.part.owned_rows] = 1.0
        if self.comm.size > 1:
            with waiting("allreduce of the replica counts"):
                self.comm.comm.Allreduce(mpi().IN_PLACE, counts, op=mpi().SUM)
        return torch.from_numpy(counts[self.part.owned_rows]).float().to(self.device)

    def _delayed(self, partial: torch.Tensor, reduce: str, op: Op, label: str, to: str) -> torch.Tensor:
        """DistGNN cd-r (§5.3, Algorithm 4) on this aggregation's forward (see
        `fn.DelayPipe`); the backward combines the gradients at once (`fn.Delayed`)."""
        if reduce != "sum":
            raise GdslError(f"{label}: delayed aggregation (cd-r) is implemented for sum and mean reductions, "
                            f"not {reduce}")
        if op not in self._delay_state:
            pipe = self._delay_state[op] = fn.DelayPipe(self._tree, self.row_gid, int(self.spec.delay), self.comm,
                                                        label + " fwd")
            saved = self._delay_restore.pop(self.ir.main.ops.index(op), None)
            if saved is not None:
                pipe.load_state_dict(saved)
        return fn.Delayed.apply(partial, self._delay_state[op], self.epoch,
                                self._partial_scale[to], label)

    def finish(self) -> None:
        """Complete outstanding delayed collectives (before exit or a checkpoint)."""
        for pipe in self._delay_state.values():
            pipe.finish()

    def delay_state_dict(self) -> dict:
        """cd-r: each delayed aggregation's pipeline (by the op's position in
        the program), for a checkpoint."""
        ops = self.ir.main.ops
        return {ops.index(op): pipe.state_dict() for op, pipe in self._delay_state.items()}

    def load_delay_state(self, state: dict) -> None:
        """Restore `delay_state_dict()`; each pipeline is rebuilt with it on first use."""
        self._delay_restore = {int(k): v for k, v in state.items()}

    # ---------------------------------------------------------------- dropout on local rows
    def dropout_keep(self, op: Op, x: torch.Tensor, gen: torch.Generator, p: float) -> torch.Tensor:
        """The single-process mask's entries of my rows (columns), drawn on the
        host from the same generator and moved to the rank's device; as 0/1
        floats where the reference keeps them so (ReferenceModule.dropout_keep)."""
        return self._keep_on_host(op, x, gen, p, torch.float32 if float_mask(x) else torch.bool).to(x.device)

    def _keep_on_host(self, op: Op, x: torch.Tensor, gen: torch.Generator, p: float,
                      dtype: torch.dtype = torch.bool) -> torch.Tensor:
        t = op.result.type
        if t.domain in ("vertex", "edge"):
            n = self.part.num_nodes if t.domain == "vertex" else self.part.num_edges
            if op.result in self.cols_region:  # P3: all rows (every edge), this rank's columns
                return keep_mask_rows(n, tuple(x.shape[1:-1]) + (int(t.shape[-1]),), gen, p, cols=self.feature_cols,
                                      dtype=dtype)
            rows = self.row_gid[: x.shape[0]] if t.domain == "vertex" else self.edge_gid
            return keep_mask_rows(n, tuple(x.shape[1:]), gen, p, rows=rows, dtype=dtype)
        return (torch.rand(x.shape, generator=gen) >= p).to(dtype)

    # ---------------------------------------------------------------- inputs, loss, metrics
    def _input(self, op: Op, x):
        t = op.result.type
        if t.dtype == "i64":
            return self.graph.labels
        if t.domain == "edge":
            return self.gd.edge_env[op.attrs["name"]]
        if op.attrs["name"] == self.feature_input:
            return self.graph.features if x is None else x
        if op.attrs["name"] in self.graph.ndata:   # a further vertex input: this rank's owned rows
            return self.graph.ndata[op.attrs["name"]]
        raise GdslError(f"vertex input '{op.attrs['name']}' has no data on this rank (graph.ndata has "
                        f"{', '.join(self.graph.ndata) or 'none'})")

    def _loss_rows(self):
        op = self.loss_op
        mask = self.graph.masks.get(op.attrs["mask"]) if op.attrs["mask"] != "all" else None
        rows = self.counted if mask is None else (mask & self.counted)
        return rows

    def loss(self, out: torch.Tensor) -> torch.Tensor:
        """This rank's share of the global loss: the sum over its counted rows
        divided by the global number of rows, so the shares add up to the
        single-process mean (and so do their gradients)."""
        op = self.loss_op
        if op is None:
            raise GdslError("the program has no train block with a loss")
        rows = self._loss_rows()
        total = self.comm.allreduce_scalars([float(rows.sum())])[0]
        weight = None
        if self.training and getattr(self, "_replicas", None) is not None:
            # 0c: each partition trains on its own graph, so every replica of a
            # labelled vertex carries the loss on its own (partial) neighbourhood,
            # weighted 1 / replicas: each vertex still weighs 1 in the total
            mask = self.graph.masks.get(op.attrs["mask"]) if op.attrs["mask"] != "all" else None
            rows = torch.ones_like(self.counted) if mask is None else mask.clone()
            weight = 1.0 / self._replicas[rows]
        target = self._input(op.operands[1].owner, None)[rows]   # the loss's target input: Y, or X (mse)
        o = out[rows]
        fn_ = op.attrs["fn"]
        red = "sum" if weight is None else "none"
        if fn_ == "cross_entropy":
            s = F.cross_entropy(o, target, reduction=red)
        elif fn_ == "nll":
            s = F.nll_loss(o, target, reduction=red)
        else:   # bce, mse: the reference's mean over rows and columns (a [F] target: F columns per row)
            o2 = _rows2d(o)
            t2 = target.to(o.dtype).reshape(o2.shape)
            if fn_ == "bce":
                s = F.binary_cross_entropy_with_logits(o2, t2, reduction=red)
            else:
                s = F.mse_loss(o2, t2, reduction=red)
            s = s.sum(-1) / max(1, o2.shape[1]) if red == "none" else s / max(1, o2.shape[1])
        if weight is not None:
            s = (s * weight).sum()
        return s / max(total, 1.0)

    def sync_grads(self) -> None:
        """All-reduce (sum) the parameter gradients, one flat buffer (CAGNET
        §IV-A-4's Y all-reduce); P3's model-parallel layer-1 weights stay local."""
        params = [(k, p) for k, p in self._params.items() if k not in self.local_params]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in params]
        if not grads or self.comm.size == 1:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.comm.allreduce_(flat, "param grads")
        off = 0
        for (_, p), g in zip(params, grads):
            k = g.numel()
            p.grad = flat[off: off + k].view_as(p).clone()
            off += k


# host floats per draw of a dropout mask (16 MiB of float32)
DRAW_CHUNK = 1 << 22


def keep_mask_rows(n: int, rest: tuple, gen: torch.Generator, p: float, rows: torch.Tensor | None = None,
                   cols: tuple[int, int] | None = None, chunk: int = DRAW_CHUNK,
                   dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """Rows `rows` (global ids), or with ``cols=(lo, hi)`` instead every
    row's columns lo:hi, of the single-process keep mask
    ``torch.rand((n,) + rest, generator=gen) >= p``, drawn ``chunk`` floats at
    a time into one buffer: torch's CPU generator fills a tensor one element
    after another, so consecutive blocks of rows get the very numbers of the
    one draw (tests/test_dist_parts.py checks it) while a rank holds one
    block, not the whole [N, F] (or [E, F]) mask; the draw stops after the
    last row wanted. `dtype`: bools, or the same mask as 0/1 floats."""
    inner = int(np.prod(rest, dtype=np.int64))
    step = max(1, min(n, chunk // max(inner, 1)))
    buf = torch.empty((step,) + rest)
    if rows is None:
        lo, hi = cols
        out = torch.empty((n,) + rest[:-1] + (hi - lo,), dtype=dtype)
        for s in range(0, n, step):
            block = buf[: min(n, s + step) - s].uniform_(generator=gen)
            torch.ge(block[..., lo:hi], p, out=out[s:s + block.shape[0]])
        return out
    ordered = bool((rows[1:] > rows[:-1]).all())   # local ids follow global ids: the usual case
    order = None if ordered else torch.argsort(rows, stable=True)
    srt = rows if ordered else rows[order]
    out = torch.empty((rows.shape[0],) + rest, dtype=dtype)
    if rows.shape[0] == 0:
        return out
    for s in range(0, int(srt[-1]) + 1, step):
        e = min(n, s + step)
        block = buf[: e - s].uniform_(generator=gen)   # every row drawn: the stream runs through them
        a, b = int(torch.searchsorted(srt, s)), int(torch.searchsorted(srt, e))
        if a == b:
            continue
        # compared on my rows only (was: the whole block, then my rows picked: P times the comparisons)
        mine = block.index_select(0, srt[a:b] - s)
        if ordered:
            torch.ge(mine, p, out=out[a:b])
        else:
            out[order[a:b]] = mine >= p if dtype == torch.bool else (mine >= p).to(dtype)
    return out
