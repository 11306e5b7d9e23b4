"""The Numba backend as an `nn.Module`: fused graph ops on generated Numba
kernels, everything dense on torch (its GEMM; see bench/ for the fused-update
measurement), semantics identical to the reference backend.

Only the fused ops change implementation (`aggregate`, `sddmm`,
`gat_aggregate`, `edge_softmax`); a fused op whose form the kernels do not
cover (e.g. `sddmm sub`, a broadcast the kernels do not take) runs on the
reference implementation, and `kernel_plan()` says which ran where.
"""
from __future__ import annotations

from gdsl.backends.numba.graph import CSRGraph
from gdsl.backends.numba import ops as nb
from gdsl.backends.reference.executor import ReferenceModule
from gdsl.graph.graph import Graph
from gdsl.ir.core import Module, Op


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


class NumbaModule(ReferenceModule):
    def __init__(self, module: Module, graph: Graph) -> None:
        super().__init__(module, graph)
        self.csr = CSRGraph.build(self.gd.src, self.gd.dst, self.gd.num_nodes)
        self._spmm = {}  # the kernels replace the reference's torch.sparse path
        self._kernels = {op: kernel_signature(op) for op in module.main.ops}

    def kernel_plan(self) -> list[tuple[str, str]]:
        """(op, 'numba <kernel> <signature>' or 'torch') for each fused op."""
        out = []
        for op, k in self._kernels.items():
            if op.name in ("aggregate", "sddmm", "gat_aggregate", "edge_softmax"):
                out.append((op.name, "torch (reference)" if k is None else f"numba {k[0]} {k[1]}"))
        return out

    def run_op(self, op: Op, vals: list, x):
        k = self._kernels.get(op)
        if k is None:
            return super().run_op(op, vals, x)
        name = op.name
        if name == "aggregate":
            msg = op.attrs["msg"]
            xv = None if msg == "copy_edge" else vals[0]
            wv = vals[0] if msg == "copy_edge" else (vals[1] if len(vals) > 1 else None)
            return nb.aggregate(self.csr, xv, wv, msg, op.attrs["reduce"], op.attrs["to"])
        if name == "sddmm":
            return nb.sddmm(self.csr, vals[0], vals[1], op.attrs["op"])
        if name == "edge_softmax":
            return nb.edge_softmax(self.csr, vals[0])
        el, er, z = vals  # gat_aggregate; scores [N, *h], z [N, *h, D]: heads flattened to one axis
        n = z.shape[0]
        out = nb.gat_aggregate(self.csr, el.reshape(n, -1), er.reshape(n, -1), z.reshape(n, -1, z.shape[-1]),
                               float(op.attrs["slope"]))
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
    return "\n\n".join(parts) if parts else "# no fused graph ops: nothing runs on Numba\n"
