"""The Numba backend as an `nn.Module`: fused graph ops on generated Numba
kernels, the dense matmuls on torch's GEMM, semantics identical to the
reference backend.

Only the fused ops change implementation (`aggregate`, `sddmm`,
`gat_aggregate`, `edge_softmax`); a fused op whose form the kernels do not
cover (e.g. `sddmm sub`, a broadcast the kernels do not take) runs on the
reference implementation, and `kernel_plan()` says which ran where.

On top of that, a few op groups run as one kernel or one GEMM
(`fusion_plan()` lists them; all keep the reference's values, dropout masks
included, up to float rounding):

* `mul(aggregate(..), c)` with `c` a vertex constant (the 1 / degree of
  SAGE's mean): the scale is applied in the aggregation's epilogue (and, in
  the backward, to the gathered rows of the reverse aggregation) instead of
  as one more pass over an N x F tensor.
* `dropout(act(add(s, b)))` (act: relu, elu; flatten / reshape between them
  allowed; any two of the three): one elementwise pass (dense.epilogue) that
  draws the reference's dropout mask (its per-(seed, step, op) generator),
  keeping a uint8 mask instead of a float one.  A lone `dropout` runs on the
  same kernel.
* aggregation by a constant edge tensor (`edge_const`, e.g. GCN's
  1 / sqrt(deg(u) deg(v))): the tensor is permuted once into the slot order
  of the CSR the kernel walks (and of the reverse CSR, for the backward), so
  it is read sequentially instead of through the edge ids.
* dense: `x @ W1` and `x @ W2` of one tensor as one GEMM with the weights
  side by side; `x1 @ W1 + x2 @ W2` as one output (mm, then addmm into it);
  `dot(z, a1)`, `dot(z, a2)` (GAT's attention scores) in one pass over z.
  Every vertex-by-param matmul runs through dense.linear (torch's GEMM into a
  huge-page output).
"""
from __future__ import annotations

import math

import torch

from gdsl.backends import capturing, eager_under_torch_compile
from gdsl.backends.numba import dense
from gdsl.backends.numba import ops as nb
from gdsl.backends.numba.graph import CSRGraph
from gdsl.backends.reference.executor import ReferenceModule, refuse_arguments
from gdsl.backends.reference.linear import drop_fusions, run_linear
from gdsl.graph.graph import Graph
from gdsl.ir.core import Module, Op

# Per-edge int64 tensors the reference executor derives to evaluate edge
# constants; once those are evaluated (at bind time) the Numba module never
# reads them again (4 x E x 8 bytes: 1.2 GiB on a 40M-edge graph).
_DERIVED_EDGE_DATA = ("src_degree", "dst_degree", "src_out_degree", "dst_out_degree")
_ACTS = ("relu", "elu")
_VIEWS = ("flatten", "reshape")
_ACT_FNS = {"relu": torch.relu, "elu": torch.nn.functional.elu}   # the reference's, for the fallback path


def kernel_signature(op: Op) -> tuple[str, dict] | None:
    """(kernel op, signature) that runs `op` on Numba, or None for torch."""
    if op.name == "aggregate":
        msg = op.attrs["msg"]
        if msg in ("copy_src", "copy_edge"):
            return "aggregate", {"msg": msg, "reduce": op.attrs["reduce"], "bcast": "none"}
        x, w = op.operands
        if w.type.shape == x.type.shape:
            bcast = "none"
        elif len(w.type.shape) < len(x.type.shape) and tuple(x.type.shape[: len(w.type.shape)]) == tuple(w.type.shape):
            bcast = "w"  # one value per edge (and head), shared by the trailing feature axes
        else:
            return None
        return "aggregate", {"msg": msg, "reduce": op.attrs["reduce"], "bcast": bcast}
    if op.name == "sddmm":
        a, b = op.operands
        if op.attrs["op"] not in ("dot", "add", "mul") or a.type.shape != b.type.shape:
            return None
        return "sddmm", {"op": op.attrs["op"]}
    if op.name == "edge_softmax":
        return "edge_softmax", {}
    if op.name == "gat_aggregate":
        return "gat_aggregate", {}
    return None


def _nm(v) -> str:
    """A value's name in fusion_plan() lines: its SSA hint, else its op's name."""
    return f"%{v.hint}" if getattr(v, "hint", None) else f"<{v.owner.name if v.owner is not None else 'value'}>"


def _plain_matmul(op: Op) -> bool:
    """vertex [N, din] @ param [din, *out]: one GEMM (dense.linear)."""
    if op.name != "matmul":
        return False
    x, w = op.operands
    return (x.type.domain == "vertex" and len(x.type.shape) == 1 and w.type.domain == "param"
            and len(w.type.shape) >= 2)


def plan_fusion(module: Module) -> tuple[dict[Op, tuple], set[Op]]:
    """The op groups that run as one kernel: ({anchor op: spec}, {ops folded
    into an anchor}).  The anchor computes the group's values at its point
    of the program and the other ops of the group are skipped: for a chain
    (aggregate -> scale, add -> act -> dropout, add of two matmuls) its last
    op, after all of its inputs (and at the dropout's own position); for ops
    sharing an input (two matmuls of one tensor, dots of one tensor with
    params) the first of them, once every operand is defined.
    spec: ("aggregate", aggregate op, vertex_const op),
    ("epilogue", input value, bias value or None, act, dropout op or None, [view ops]),
    ("matmul2", matmul op, matmul op of the same left operand) (the anchor
    computes both results), ("addmm", matmul op, matmul op) or ("head_dot",
    [dot ops of one vertex tensor with params]) (the anchor computes all)."""
    fused: dict[Op, tuple] = {}
    skip: set[Op] = set()
    f = module.main
    users = f.uses()
    results = {id(v) for v in f.results}

    def sole_user(v) -> Op | None:
        us = users.get(v, [])
        return us[0] if len(us) == 1 and id(v) not in results else None

    claimed: set[Op] = set()
    pos = {op: i for i, op in enumerate(f.ops)}

    def plain_mm(op: Op | None) -> bool:
        return op is not None and _plain_matmul(op) and len(op.operands[1].type.shape) == 2

    # two matmuls of the same vertex tensor (SAGE's h @ Ws and h @ Wn of a
    # dense-first layer): one GEMM with the weights side by side, split
    mms = [op for op in f.ops if plain_mm(op)]
    for i, m1 in enumerate(mms):
        if m1 in claimed:
            continue
        for m2 in mms[i + 1:]:
            if m2 in claimed or m2.operands[0] is not m1.operands[0]:
                continue
            w2 = m2.operands[1].owner
            if w2 is not None and pos[w2] > pos[m1]:
                continue  # the second weight is not there yet at the first matmul
            fused[m1] = ("matmul2", m1, m2)
            skip.add(m2)
            claimed.update((m1, m2))
            break
    # dot(z, a_k) of one vertex tensor with parameters of its feature shape
    # (GAT's el, er): one pass over z for all of them (dense.head_dot)
    dots: dict = {}
    for op in f.ops:
        if op.name != "dot" or op.attrs.get("broadcast") not in (None, "same", "lead"):
            continue
        z, a = op.operands
        if (z.type.domain == "vertex" and a.type.domain == "param" and tuple(z.type.shape) == tuple(a.type.shape)
                and 1 <= len(z.type.shape) <= 2):
            dots.setdefault(z, []).append(op)
    for ds in dots.values():
        first = ds[0]
        group = [d for d in ds if d is first or d.operands[1].owner is None
                 or pos[d.operands[1].owner] < pos[first]]
        fused[first] = ("head_dot", group)
        skip.update(group[1:])
        claimed.update(group)
    # add(x1 @ W1, x2 @ W2) -> addmm (SAGE's h @ Ws + a @ Wn): one pass less
    for op in f.ops:
        if op.name != "add" or op in claimed:
            continue
        a, b = op.operands
        ma, mb = a.owner, b.owner
        if (a is b or not plain_mm(ma) or not plain_mm(mb) or ma in claimed or mb in claimed
                or sole_user(a) is not op or sole_user(b) is not op):
            continue
        fused[op] = ("addmm", ma, mb)
        skip.update((ma, mb))
        claimed.update((op, ma, mb))
    # aggregate -> mul by a vertex constant: the scale in the epilogue
    for op in f.ops:
        if (op.name != "aggregate" or kernel_signature(op) is None
                or op.attrs["reduce"] not in ("sum", "mean") or op.attrs["msg"] not in ("copy_src", "mul")):
            continue
        m = sole_user(op.result)
        if m is None or m.name != "mul":
            continue
        a, c = m.operands
        if c is op.result:
            a, c = c, a
        if (a is not op.result or c is op.result or c.owner is None or c.owner.name != "vertex_const"
                or tuple(c.type.shape) != ()):
            continue
        fused[m] = ("aggregate", op, c.owner)
        skip.add(op)
        claimed.update((op, m))
    # add(s, bias) -> act -> [views] -> dropout
    for op in f.ops:
        if op in claimed:
            continue
        chain, bias, x, act = [op], None, None, "none"
        if op.name == "add":
            s, b = op.operands
            if s.type.domain == "param":
                s, b = b, s
            if (s.type.domain not in ("vertex", "edge") or b.type.domain != "param"
                    or tuple(b.type.shape) != tuple(s.type.shape) or not s.type.shape):
                continue
            x, bias = s, b
            nxt = sole_user(op.result)
            if nxt is not None and nxt.name in _ACTS and nxt not in claimed:
                act = nxt.name
                chain.append(nxt)
                nxt = sole_user(nxt.result)
        elif op.name in _ACTS and op.operands[0].type.domain in ("vertex", "edge"):
            x, act = op.operands[0], op.name
            nxt = sole_user(op.result)
        else:
            continue
        views = []
        while nxt is not None and nxt.name in _VIEWS and nxt not in claimed:
            views.append(nxt)
            nxt = sole_user(nxt.result)
        drop = nxt if (nxt is not None and nxt.name == "dropout" and nxt not in claimed) else None
        if drop is not None:
            chain += views + [drop]
        else:
            views = []
        if drop is None and (act == "none" or bias is None):
            continue  # a lone bias add or activation: torch's op is one pass already
        anchor = chain[-1]
        fused[anchor] = ("epilogue", x, bias, act, drop, views)
        skip.update(chain[:-1])
        claimed.update(chain)
    return fused, skip


class NumbaModule(ReferenceModule):
    uses_torch_sparse = False   # the kernels replace the reference's torch.sparse path

    def __init__(self, module: Module, graph: Graph, fuse: bool = True) -> None:
        super().__init__(module, graph)
        self.csr = CSRGraph.build(self.gd.src, self.gd.dst, self.gd.num_nodes)
        self._kernels = {op: kernel_signature(op) for op in module.main.ops}
        for k in _DERIVED_EDGE_DATA:
            if k not in self.gd.graph.edata:
                self.gd.edge_env.pop(k, None)
        self._fused, self._skip = plan_fusion(module) if fuse else ({}, set())
        drop_fusions(self._fused, self._skip, self._lin_anchor, self._lin_skip)   # the order pass's groups win
        self._wperm: dict = {}
        self._exact: dict[Op, bool] = {}
        self._mask_rows = None

    def _converted(self) -> None:
        self._wperm = {}   # edge weights permuted to CSR order, from the converted constants

    def kernel_plan(self) -> list[tuple[str, str]]:
        """(op, 'numba <kernel> <signature>' or 'torch') for each fused op."""
        out = []
        for op, k in self._kernels.items():
            if op.name in ("aggregate", "sddmm", "gat_aggregate", "edge_softmax"):
                out.append((op.name, "torch (reference)" if k is None else f"numba {k[0]} {k[1]}"))
        return out

    def fusion_plan(self) -> list[str]:
        """One line per op chain that runs as one kernel."""
        out = []
        for anchor, spec in self._fused.items():
            if spec[0] == "head_dot":
                out.append(f"dot of {_nm(spec[1][0].operands[0])} with {len(spec[1])} params -> "
                           + ", ".join(f"{_nm(d.result)}" for d in spec[1]) + ": one pass")
            elif spec[0] == "matmul2":
                _, m1, m2 = spec
                out.append(f"matmul {_nm(m1.result)}, {_nm(m2.result)} of the same {_nm(m1.operands[0])}: "
                           "one GEMM with the weights side by side")
            elif spec[0] == "addmm":
                out.append(f"add of two matmuls -> {_nm(anchor.result)}: one GEMM output (mm, then addmm into it)")
            elif spec[0] == "aggregate":
                _, agg, c = spec
                out.append(f"aggregate[{agg.attrs['msg']}, {agg.attrs['reduce']}] * vertex_const "
                           f"{c.attrs['expr']} -> {_nm(anchor.result)}: row scale in the aggregation epilogue")
            else:
                _, _x, bias, act, drop, views = spec
                parts = (["add bias"] if bias is not None else []) + ([act] if act != "none" else []) \
                    + [v.name for v in views] + ([f"dropout {drop.attrs['p']}"] if drop is not None else [])
                out.append(f"{' -> '.join(parts)} -> {_nm(anchor.result)}: one epilogue pass")
        for op in self.ir.main.ops:
            if op.name == "aggregate" and self._edge_const_w(op) is not None:
                out.append(f"aggregate[mul] by edge_const -> {_nm(op.result)}: edge data permuted into CSR order")
        return out

    # ---- running
    @eager_under_torch_compile   # a graph break inside torch.compile, not a trace of the launch code
    def forward(self, x=None, *extra, **named):
        refuse_arguments(extra, named)
        self._features_given(x)
        if capturing():   # torch.export / jit.trace / torch.func: the reference's plain torch ops
            return self.plain_forward(x, *extra)
        self.begin_forward(extra, x)   # the reference's checks and dropout mask key
        return self.run_ops(x)

    def exec_op(self, op: Op, env: dict, x) -> None:
        if op in self._lin_anchor:   # a backward order autograd would not pick (reference/linear.py)
            env[op.result] = run_linear(self._lin_anchor[op], env)
            return
        spec = self._fused.get(op)
        if spec is None:
            env[op.result] = self.run_op(op, [env[v] for v in op.operands], x)
        elif spec[0] == "aggregate":
            _, agg, c = spec
            env[op.result] = self._aggregate(agg, [env[v] for v in agg.operands], oscale=self._consts[c])
        elif spec[0] == "head_dot":
            group = spec[1]
            outs = dense.head_dot(env[group[0].operands[0]], *[env[d.operands[1]] for d in group])
            for d, t in zip(group, outs):
                env[d.result] = t
        elif spec[0] == "matmul2":
            _, m1, m2 = spec
            w1, w2 = env[m1.operands[1]], env[m2.operands[1]]
            y = dense.linear(env[m1.operands[0]], torch.cat([w1, w2], 1))
            env[m1.result], env[m2.result] = torch.split(y, [w1.shape[1], w2.shape[1]], 1)
        elif spec[0] == "addmm":
            _, ma, mb = spec
            env[op.result] = dense.linear(env[ma.operands[0]], env[ma.operands[1]],
                                          env[mb.operands[0]], env[mb.operands[1]])
        else:
            _, xv, bv, act, drop, views = spec
            env[op.result] = self._epilogue(env[xv], env[bv] if bv is not None else None, act, drop, views, x)

    def loss(self, out: torch.Tensor) -> torch.Tensor:
        """The reference's loss, with the mask's row indices computed once
        (out[mask] runs a nonzero over the mask in the forward and again in
        the backward, every epoch)."""
        op = self.loss_op
        if op is None or op.attrs["mask"] == "all" or op.attrs["fn"] not in ("cross_entropy", "nll") or capturing():
            return super().loss(out)   # (under torch.func: no cached tensor may cross transform levels)
        self.check_loss_output(out)
        target = self.loss_target()   # checked in the reference's order: the target, then the mask
        self.check_class_ids(target, out)
        mask = self.loss_mask()
        if mask.dtype != torch.bool or mask.shape[0] != out.shape[0]:
            return super().loss(out)
        hit = self._mask_rows   # (mask, its version, rows): a mask changed in place is seen
        if hit is None or hit[0] is not mask or hit[1] != mask._version:
            hit = self._mask_rows = (mask, mask._version, mask.nonzero().squeeze(1))
        rows = hit[2]
        target = target.index_select(0, rows)
        out = out.index_select(0, rows)
        fn = torch.nn.functional.cross_entropy if op.attrs["fn"] == "cross_entropy" else torch.nn.functional.nll_loss
        return fn(out, target)

    def _dropout_seed(self, op: Op) -> int:
        # the reference's per-(seed, step, op) generator seed (ReferenceModule.dropout);
        # _dropout_agrees checks the masks against it once per op
        return self.mask_seed(op)

    def _dropout_agrees(self, op: Op, shape, dtype) -> bool:
        """Whether the kernel's mask for dropout `op` is the reference's
        (ReferenceModule.dropout on a tensor of ones); checked on the op's first
        training call, the answer kept.  False (e.g. a subclass drawing masks
        differently) sends the op to the reference's dropout for good."""
        ok = self._exact.get(op)
        if ok is None:
            ones = torch.ones(shape, dtype=dtype)
            want = ReferenceModule.dropout(self, op, ones) != 0
            got = dense.epilogue(ones, None, "none", op.attrs["p"], self._dropout_seed(op)) != 0
            ok = self._exact[op] = bool(torch.equal(want, got))
        return ok

    def _epilogue(self, t, b, act: str, drop: Op | None, views: list, x):
        p = drop.attrs["p"] if (drop is not None and self.training) else 0.0
        shape = t.shape
        if views:
            probe = t.new_empty((1,) + tuple(t.shape[1:]))   # the views' shapes, on one row
            for v in views:
                probe = self.run_op(v, [probe], x)
            shape = (t.shape[0],) + tuple(probe.shape[1:])
        if dense.epilogue_supported(t, b) and (p == 0.0 or self._dropout_agrees(drop, shape, t.dtype)):
            y = dense.epilogue(t, b, act, p, self._dropout_seed(drop) if p > 0 else None)
            return y.reshape(shape)
        y = t + b if b is not None else t
        if act != "none":
            y = _ACT_FNS[act](y)
        for v in views:
            y = self.run_op(v, [y], x)
        return ReferenceModule.dropout(self, drop, y) if drop is not None else y

    def _edge_const_w(self, op: Op):
        if op.name != "aggregate" or op.attrs["msg"] != "mul" or op.attrs["reduce"] not in ("sum", "mean"):
            return None
        if self._kernels.get(op) is None:
            return None
        w = op.operands[1].owner
        return w if (w is not None and w.name == "edge_const") else None

    def _aggregate(self, op: Op, vals: list, oscale=None):
        msg = op.attrs["msg"]
        xv = None if msg == "copy_edge" else vals[0]
        wv = vals[0] if msg == "copy_edge" else (vals[1] if len(vals) > 1 else None)
        wp = None
        wop = self._edge_const_w(op)
        if wop is not None:
            key = (id(wop), op.attrs["to"])
            wp = self._wperm.get(key)
            if wp is None:
                wp = self._wperm[key] = nb.permute_edge_data(self.csr, self._consts[wop], op.attrs["to"])
        return nb.aggregate(self.csr, xv, wv, msg, op.attrs["reduce"], op.attrs["to"], oscale=oscale, w_perm=wp)

    def run_op(self, op: Op, vals: list, x):
        name = op.name
        if name == "dropout":
            t = vals[0]
            if not (self.training and op.attrs["p"] > 0 and isinstance(t, torch.Tensor)):
                return t
            return self._epilogue(t, None, "none", op, [], x)
        if name == "matmul" and _plain_matmul(op):
            return dense.linear(vals[0], vals[1])
        k = self._kernels.get(op)
        if k is None:
            return super().run_op(op, vals, x)
        if name == "aggregate":
            return self._aggregate(op, vals)
        if name == "sddmm":
            return nb.sddmm(self.csr, vals[0], vals[1], op.attrs["op"])
        if name == "edge_softmax":
            return nb.edge_softmax(self.csr, vals[0])
        el, er, z = vals  # gat_aggregate; scores [N, *h], z [N, *h, D]: heads flattened to one axis
        n, heads = z.shape[0], math.prod(z.shape[1:-1])   # (reshape(n, -1) fails for n = 0)
        out = nb.gat_aggregate(self.csr, el.reshape(n, heads), er.reshape(n, heads),
                               z.reshape(n, heads, z.shape[-1]), float(op.attrs["slope"]))
        return out.reshape(z.shape)


def module_kernel_sources(module: Module) -> str:
    """The generated source of every Numba kernel an optimised module uses."""
    from gdsl.backends.numba.codegen import kernel_source

    seen, parts = set(), []
    for op in module.main.ops:
        k = kernel_signature(op)
        if k is None:
            if op.name in ("aggregate", "sddmm", "gat_aggregate", "edge_softmax"):
                parts.append(f"# {op.name} {op.attrs}: runs on torch (no kernel for this form)\n")
            continue
        key = (k[0], tuple(sorted(k[1].items())))
        if key in seen:
            continue
        seen.add(key)
        parts.append(kernel_source(k[0], **k[1]))
    fused, _ = plan_fusion(module)
    for op in module.main.ops:
        spec = fused.get(op)
        if spec is not None and spec[0] == "epilogue":
            kop, sig = "epilogue", {"act": spec[3], "bias": spec[2] is not None, "drop": spec[4] is not None}
        elif spec is None and op.name == "dropout":
            kop, sig = "epilogue", {"act": "none", "bias": False, "drop": True}
        elif spec is not None and spec[0] == "head_dot":
            kop, sig = "head_dot", {}
        else:
            continue
        key = (kop, tuple(sorted(sig.items())))
        if key not in seen:
            seen.add(key)
            parts.append(kernel_source(kop, **sig))
    return "\n\n".join(parts) if parts else "# no fused graph ops: nothing runs on Numba\n"
