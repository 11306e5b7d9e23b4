"""A backend's graph kernels on one rank's local graph.

`gdsl run --np P --backend numba|triton` runs each rank's local sparse work
(aggregations and the fused GAT chain) on the backend's generated kernels
instead of torch ops; the dense ops, the collectives and the completion of
partial results stay the distributed executor's (gdsl/dist/module.py).

A rank's local edges read source rows in its *local space* (its own rows
plus the halo or broadcast rows, `n_local` of them) and write destination
rows among its own `n_own`, which sit at `own_pos` in the local space. The
kernels take square graphs, so the local graph is built over the local space
with each destination mapped to its local position; a kernel's output is
read back at `own_pos` (the rows a destination never is stay zero and are
dropped). Kernel outputs are partial exactly where the reference path's
are (a vertex-cut replica sees only its edges), and the executor completes
them the same way.

Which ops: aggregations with reduce sum (and mean as a sum completed, then
divided by the global in-degree), max/min where a rank holds every in-edge
of its rows (1D, replicate), and `gat_aggregate` under the same condition.
The rest (and aggregations over the whole graph: RDM, P3's first layer) run
on torch as before; `used` names the kernels that ran (the run's summary
line and --json's "kernels").

Triton: on a GPU machine each rank keeps its graph, features, params and
activations on one GPU (`rank_device`: the node-local rank modulo the GPUs
the node has), and the collectives stage device tensors through host
buffers (gdsl/dist/comm.py; no CUDA-aware MPI is assumed). Dropout masks are
drawn on the host from the single-process generator and copied over. Under
TRITON_INTERPRET=1 the kernels run on the executor's CPU tensors instead.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from gdsl.diagnostics import GdslError
from gdsl.ir.core import Op

# plans where a rank holds all in-edges of its own rows
_COMPLETE = ("rows", "replicate", "features")


def rank_device(backend: str, comm) -> torch.device:
    """Where this rank's tensors live: the CPU, except for --backend triton
    on a machine with CUDA GPUs (and TRITON_INTERPRET unset), where a rank
    takes GPU (node-local rank mod the node's GPU count), as torchrun's
    LOCAL_RANK convention does. The node-local rank comes from MPI (the ranks
    sharing memory with this one), so it holds under any launcher."""
    if backend != "triton":
        return torch.device("cpu")
    from gdsl.backends.triton import interpret_mode, require_backend
    require_backend()   # a clear error without a GPU (unless TRITON_INTERPRET=1)
    if interpret_mode():
        return torch.device("cpu")
    from gdsl.dist.comm import mpi, waiting
    MPI = mpi()
    with waiting("split of the ranks by node"):
        node = comm.comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    local = node.Get_rank()
    node.Free()
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


class LocalKernels:
    def __init__(self, backend: str, src: torch.Tensor, dst_own: torch.Tensor, own_pos: np.ndarray,
                 n_local: int, strategy: str, device: torch.device | str = "cpu") -> None:
        self.backend, self.strategy = backend, strategy
        pos = np.ascontiguousarray(own_pos, dtype=np.int64)
        self.n_local = int(n_local)
        self.identity = bool(pos.size == self.n_local and np.array_equal(pos, np.arange(self.n_local)))
        self.own_pos = torch.from_numpy(pos).to(device)
        dst = self.own_pos.index_select(0, dst_own.to(torch.int64))
        if backend == "numba":
            from gdsl.backends.numba import ops
            from gdsl.backends.numba.graph import CSRGraph
            from gdsl.backends.numba.module import kernel_signature
            self.g = CSRGraph.build(src, dst, self.n_local)
        elif backend == "triton":
            from gdsl.backends.triton import ops, require_backend
            from gdsl.backends.triton.graph import TritonGraph
            from gdsl.backends.triton.module import kernel_signature
            require_backend()   # a clear error without a GPU (unless TRITON_INTERPRET=1)
            self.g = TritonGraph.build(src, dst, self.n_local, src.device)
        else:
            raise GdslError(f"unknown backend '{backend}' for a distributed run (expected reference, numba, triton)")
        self.ops, self.signature = ops, kernel_signature
        self.used: dict[str, str] = {}

    def takes(self, op: Op) -> bool:
        """Whether this rank runs `op` on the backend's kernel."""
        if op.name not in ("aggregate", "gat_aggregate") or self.signature(op) is None:
            return False
        if op.name == "aggregate":
            if op.attrs["to"] != "dst":
                return False
            if op.attrs["reduce"] in ("max", "min"):
                return self.strategy in _COMPLETE
            return True
        return self.strategy in _COMPLETE

    def _own(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.identity else out.index_select(0, self.own_pos)

    def _local(self, t: torch.Tensor) -> torch.Tensor:
        """Own rows placed in the local space (zeros elsewhere): what a
        destination-side operand of a square kernel reads."""
        if self.identity:
            return t
        full = t.new_zeros((self.n_local,) + tuple(t.shape[1:]))
        return full.index_copy(0, self.own_pos, t)

    def aggregate(self, op: Op, x: torch.Tensor | None, w: torch.Tensor | None, reduce: str) -> torch.Tensor:
        """The aggregation of the local edges into this rank's own rows
        (sum for mean: the executor divides by the global degree)."""
        msg = op.attrs["msg"]
        self.used[f"aggregate[{msg}, {op.attrs['reduce']}]"] = self.backend
        return self._own(self.ops.aggregate(self.g, x, w, msg, reduce, "dst"))

    def gat(self, op: Op, el: torch.Tensor, er: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        self.used["gat_aggregate"] = self.backend
        n = z.shape[0]
        # explicit widths, not -1: a rank may hold no rows
        heads_e, heads_z = math.prod(el.shape[1:]), math.prod(z.shape[1:-1])
        er_l = self._local(er.reshape(er.shape[0], math.prod(er.shape[1:])))
        out = self.ops.gat_aggregate(self.g, el.reshape(n, heads_e), er_l, z.reshape(n, heads_z, z.shape[-1]),
                                     float(op.attrs["slope"]))
        out = self._own(out)
        return out.reshape((out.shape[0],) + tuple(z.shape[1:]))
