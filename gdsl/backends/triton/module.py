"""The Triton backend as an `nn.Module`: fused graph ops on generated Triton
kernels, everything else on torch (cuBLAS GEMMs, elementwise ops), on the
GPU; semantics identical to the reference backend.

Only the fused ops change implementation (`aggregate`, `sddmm`,
`gat_aggregate`, `edge_softmax`); a fused op whose form the kernels do not
cover (a trailing broadcast, sddmm of differently shaped operands) runs on
the reference implementation, and `kernel_plan()` says which ran where.
One op chain runs as one kernel (`fusion_plan()`): `mul(aggregate(..), c)`
with `c` a vertex constant (the 1 / degree of mean, GCN-style row scales) is
applied in the aggregation's epilogue, and in the backward to the gathered
rows of the reverse aggregation.

Where the data lives: the module moves the bound graph's index tensors,
constants, inputs (features, labels, edge data: copied once and cached) and
its params to `device` (the current CUDA device; the CPU under
TRITON_INTERPRET=1).  `forward(x)` returns the output where `x` is, as
torch modules do; `forward()` (the graph's own features) where the graph's
features are, so that callers that compare it with the graph's labels, as
the trainer's accuracy does, keep working.  Setting `module.output_device`
overrides both: a device, or None to keep the output on the GPU
(benchmarks).
`loss()` takes an output on either device.

Dropout masks (`dropout_masks`): on a GPU, "device" (the default) draws
each mask there from a CUDA generator seeded as the reference seeds its CPU
one (per seed, step and op): reproducible run to run, but not the CPU
backends' masks, as torch's own dropout differs between devices.
"reference" (or GDSL_TRITON_DROPOUT=reference when the module is built)
draws the reference's masks on the host and copies them over, so a run
matches the reference backend bit for bit in its masks; that costs a host
RNG pass and a host-to-device copy per dropout (bench/gpu_profile.py: 9 ms
of a 22 ms GCN step on a 20k x 128 graph, on an H100 machine).  Under
TRITON_INTERPRET=1 both are the reference's masks (the device is the CPU).
"""
from __future__ import annotations

import math

import os

import torch

from gdsl.backends import capturing, eager_under_torch_compile
from gdsl.backends.reference.executor import ReferenceModule, refuse_arguments
from gdsl.backends.reference.linear import drop_fusions, run_linear
from gdsl.backends.triton import default_device
from gdsl.diagnostics import GdslError
from gdsl.graph.graph import Graph
from gdsl.ir.core import Module, Op

FUSED_OPS = ("aggregate", "sddmm", "gat_aggregate", "edge_softmax")
DROPOUT_MASKS = ("device", "reference")


def dropout_masks_setting() -> str:
    """Where a new module's dropout masks come from: $GDSL_TRITON_DROPOUT
    ("device" when unset; the module docstring says what each means)."""
    v = os.environ.get("GDSL_TRITON_DROPOUT", "") or "device"
    if v not in DROPOUT_MASKS:
        raise GdslError(f"GDSL_TRITON_DROPOUT must be one of {', '.join(DROPOUT_MASKS)}, not {v!r}")
    return v


def kernel_signature(op: Op) -> tuple[str, dict] | None:
    """(kernel op, signature) that runs `op` on Triton, or None for torch.
    The aggregate signature leaves out what is decided at launch time (the
    row scales, balanced or row-parallel)."""
    if op.name == "aggregate":
        msg = op.attrs["msg"]
        red = "sum" if op.attrs["reduce"] == "mean" else op.attrs["reduce"]
        if msg in ("copy_src", "copy_edge"):
            return "aggregate", {"msg": msg, "reduce": red, "bcast": "none"}
        x, w = op.operands
        xs, ws = tuple(x.type.shape), tuple(w.type.shape)
        if ws == xs:
            bcast = "none"
        elif op.attrs.get("broadcast") == "trail":
            return None
        elif len(ws) < len(xs) and xs[: len(ws)] == ws:
            bcast = "w" if ws else "s"   # per edge (and head), shared by the trailing feature axes
        else:
            return None
        return "aggregate", {"msg": msg, "reduce": red, "bcast": bcast}
    if op.name == "sddmm":
        a, b = op.operands
        if op.attrs["op"] not in ("dot", "add", "sub", "mul", "div") or a.type.shape != b.type.shape:
            return None
        if op.attrs["op"] == "dot" and not a.type.shape:
            return None
        return "sddmm", {"op": op.attrs["op"]}
    if op.name == "edge_softmax":
        return "edge_softmax", {}
    if op.name == "gat_aggregate":
        return "gat_aggregate", {}
    return None


def plan_fusion(module: Module) -> tuple[dict[Op, tuple], set[Op]]:
    """({mul op: ("aggregate", aggregate op, vertex_const op)}, {aggregate
    ops folded into their mul}): a sum / mean aggregation whose only user
    multiplies it by a scalar vertex constant."""
    fused: dict[Op, tuple] = {}
    skip: set[Op] = set()
    f = module.main
    users = f.uses()
    results = {id(v) for v in f.results}
    for op in f.ops:
        if (op.name != "aggregate" or kernel_signature(op) is None
                or op.attrs["reduce"] not in ("sum", "mean") or op.attrs["msg"] not in ("copy_src", "mul")):
            continue
        us = users.get(op.result, [])
        if len(us) != 1 or id(op.result) in results or us[0].name != "mul":
            continue
        m = us[0]
        a, c = m.operands
        if c is op.result:
            a, c = c, a
        if (a is not op.result or c is op.result or c.owner is None or c.owner.name != "vertex_const"
                or tuple(c.type.shape) != ()):
            continue
        fused[m] = ("aggregate", op, c.owner)
        skip.add(op)
    return fused, skip


class TritonModule(ReferenceModule):
    uses_torch_sparse = False   # the kernels replace the reference's torch.sparse path

    def __init__(self, module: Module, graph: Graph, device=None, fuse: bool = True, output_device="graph") -> None:
        super().__init__(module, graph)
        from gdsl.backends.triton.graph import TritonGraph

        self.device = torch.device(device) if device is not None else default_device()
        feats = graph.features
        self._output_device = (feats.device if feats is not None else torch.device("cpu")) \
            if output_device == "graph" else output_device
        self._follow_input = output_device == "graph"   # forward(x) returns where x is
        self.tg = TritonGraph.build(self.gd.src, self.gd.dst, self.gd.num_nodes, self.device)
        self.dropout_masks = dropout_masks_setting()
        self._kernels = {op: kernel_signature(op) for op in module.main.ops}
        self._fused, self._skip = plan_fusion(module) if fuse else ({}, set())
        drop_fusions(self._fused, self._skip, self._lin_anchor, self._lin_skip)
        self._consts = {op: (t.to(self.device) if isinstance(t, torch.Tensor) else t)
                        for op, t in self._consts.items()}
        self._moved: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        if any(m.device != self.device for m in self.graph.masks.values()):   # the loss's masks, beside its output
            self.graph.masks = {k: m.to(self.device) for k, m in self.graph.masks.items()}
        self.to(self.device)

    def kernel_plan(self) -> list[tuple[str, str]]:
        """(op, 'triton <kernel> <signature>' or 'torch (reference)') per fused op."""
        out = []
        for op, k in self._kernels.items():
            if op.name in FUSED_OPS:
                out.append((op.name, "torch (reference)" if k is None else f"triton {k[0]} {k[1]}"))
        return out

    def fusion_plan(self) -> list[str]:
        return [f"aggregate[{agg.attrs['msg']}, {agg.attrs['reduce']}] * vertex_const {c.attrs['expr']} -> "
                f"%{anchor.result.hint or '<tmp>'}: row scale in the aggregation epilogue"
                for anchor, (_, agg, c) in self._fused.items()]

    # ---- data placement
    @property
    def output_device(self):
        """Where forward() returns its output (None: the module's device)."""
        return self._output_device

    @output_device.setter
    def output_device(self, device) -> None:
        self._output_device, self._follow_input = device, False   # set by the caller: for every call

    def _on_device(self, key: str, t):
        if not isinstance(t, torch.Tensor) or t.device == self.device:
            return t
        hit = self._moved.get(key)
        if hit is None or hit[0] is not t:
            hit = self._moved[key] = (t, t.to(self.device))
        return hit[1]

    @property
    def input_device(self):
        return None   # any: `_input` moves x to the module's device

    def _input(self, op: Op, x):
        t = super()._input(op, x)
        if x is not None and t is x:
            return x.to(self.device)
        return self._on_device(op.attrs["name"], t)

    def dropout_keep(self, op: Op, x: torch.Tensor, gen: torch.Generator, p: float) -> torch.Tensor:
        if self.dropout_masks not in DROPOUT_MASKS:
            raise GdslError(f"dropout_masks must be one of {', '.join(DROPOUT_MASKS)}, not {self.dropout_masks!r}")
        if self.dropout_masks == "reference" or x.device.type == "cpu":
            return super().dropout_keep(op, x, gen, p).to(x.device)
        on_device = torch.Generator(device=x.device).manual_seed(gen.initial_seed())   # the reference's seed
        return torch.rand(x.shape, generator=on_device, device=x.device) >= p

    def loss(self, out: torch.Tensor) -> torch.Tensor:
        self.check_loss_output(out)
        return super().loss(out.to(self.device))

    # ---- running
    @eager_under_torch_compile   # a graph break inside torch.compile, not a trace of the launch code
    def forward(self, x=None, *extra, **named):
        refuse_arguments(extra, named)   # model(x, edge_index=ei): was Python's bare TypeError (helper-22's note)
        self._features_given(x)
        if capturing():   # torch.export / jit.trace / torch.func: the reference's plain torch ops
            out = self.plain_forward(x, *extra)
        else:
            out = self._run(x, extra)
        dev = x.device if self._follow_input and isinstance(x, torch.Tensor) else self._output_device
        if dev is not None and isinstance(out, torch.Tensor):
            out = out.to(dev)
        return out

    def _run(self, x, extra: tuple):
        self.begin_forward(extra, x)   # the reference's checks and dropout mask key
        return self.run_ops(x)

    def exec_op(self, op: Op, env: dict, x) -> None:
        if op in self._lin_anchor:
            env[op.result] = run_linear(self._lin_anchor[op], env)
            return
        spec = self._fused.get(op)
        if spec is None:
            env[op.result] = self.run_op(op, [env[v] for v in op.operands], x)
        else:
            _, agg, c = spec
            env[op.result] = self._aggregate(agg, [env[v] for v in agg.operands], oscale=self._consts[c])

    def _aggregate(self, op: Op, vals: list, oscale=None):
        from gdsl.backends.triton import ops as tr

        msg = op.attrs["msg"]
        xv = None if msg == "copy_edge" else vals[0]
        wv = vals[0] if msg == "copy_edge" else (vals[1] if len(vals) > 1 else None)
        return tr.aggregate(self.tg, xv, wv, msg, op.attrs["reduce"], op.attrs["to"], oscale=oscale)

    def run_op(self, op: Op, vals: list, x):
        k = self._kernels.get(op)
        if k is None or not all(isinstance(v, torch.Tensor) for v in vals):
            return super().run_op(op, vals, x)
        from gdsl.backends.triton import ops as tr

        name = op.name
        if name == "aggregate":
            return self._aggregate(op, vals)
        if name == "sddmm":
            return tr.sddmm(self.tg, vals[0], vals[1], op.attrs["op"])
        if name == "edge_softmax":
            return tr.edge_softmax(self.tg, vals[0])
        el, er, z = vals  # gat_aggregate; scores [N, *h], z [N, *h, D]: heads flattened to one axis
        n, heads = z.shape[0], math.prod(z.shape[1:-1])   # (reshape(n, -1) fails for n = 0)
        out = tr.gat_aggregate(self.tg, el.reshape(n, heads), er.reshape(n, heads),
                               z.reshape(n, heads, z.shape[-1]), float(op.attrs["slope"]))
        return out.reshape(z.shape)


def module_kernel_sources(module: Module) -> str:
    """The generated source of every Triton kernel an optimised module uses
    (the aggregation kernels in their row-parallel form, with the row scale
    where fusion or mean puts one; the balanced variant is the same text with
    a segment table and a merge kernel: kernel_source(..., balanced=True))."""
    from gdsl.backends.triton.codegen import kernel_source

    fused, _ = plan_fusion(module)
    scaled = {spec[1] for spec in fused.values()}
    seen, parts = set(), []
    for op in module.main.ops:
        k = kernel_signature(op)
        if k is None:
            if op.name in FUSED_OPS:
                parts.append(f"# {op.name} {op.attrs}: runs on torch (no kernel for this form)\n")
            continue
        sig = dict(k[1])
        if op.name == "aggregate" and (op.attrs["reduce"] == "mean" or op in scaled):
            sig["rscale"] = True
        key = (k[0], tuple(sorted(sig.items())))
        if key in seen:
            continue
        seen.add(key)
        parts.append(kernel_source(k[0], **sig))
    return "\n\n".join(parts) if parts else "# no fused graph ops: nothing runs on Triton\n"
