"""Main-venv measurements: PyG (when `torch_geometric` imports) and gdsl's
backends (`reference`, and `numba` once gdsl.api.BACKENDS has it).

    python bench/peer_pyg.py --graph uniform100k --framework pyg|gdsl-reference|gdsl-numba [--ops ...]

The same ops as bench/peer_dgl.py, on the same cached graphs:
- gdsl runs the programs in bench/programs/ (copy_sum.gd, copy_mean.gd,
  src_mul_edge_sum.gd, gat_layer.gd, gcn128.gd, sage128.gd, gat4x32.gd)
  via `gdsl.compile(path).module(graph, backend=B)`; the program's `graph G
  (...)` options derive the self-loop / symmetric variants at bind time
  (not timed), exactly as for the peers (graphs.py applies the same rule).
- PyG runs MessagePassing / GCNConv / SAGEConv / GATConv on `edge_index`,
  its default. Where the E x 128 message tensors that path materialises
  would not fit the memory cap, copy/mul/GCN/SAGE run on a sparse CSR
  `adj_t` instead (PyG's spmm path; marked `mode: adj_t`) and GAT is skipped.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import common
import graphs

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))  # gdsl from this working tree

PROGRAMS = Path(__file__).resolve().parent / "programs"
GDSL_PROGRAM = {"copy_sum": "copy_sum.gd", "copy_mean": "copy_mean.gd", "src_mul_edge_sum": "src_mul_edge_sum.gd",
                "gat_layer": "gat_layer.gd", "gcn_epoch": "gcn128.gd", "sage_epoch": "sage128.gd",
                "gat_epoch": "gat4x32.gd"}

# Predicted peak, in E x 128 float32 tensors (E of the op's graph variant):
# what each path materialises per edge (forward and backward together).
PYG_EDGE_TENSORS = {"copy_sum": 1.2, "copy_mean": 1.2, "src_mul_edge_sum": 2.2, "gat_layer": 4.0,
                    "gcn_epoch": 3.0, "sage_epoch": 2.5, "gat_epoch": 5.0}
PYG_SPMM_OK = {"copy_sum", "copy_mean", "src_mul_edge_sum", "gcn_epoch", "sage_epoch"}
REFERENCE_EDGE_TENSORS = {"copy_sum": 0.3, "copy_mean": 1.2, "src_mul_edge_sum": 0.3, "gat_layer": 4.5,
                          "gcn_epoch": 0.6, "sage_epoch": 1.3, "gat_epoch": 5.0}


def main() -> None:
    a = common.parse_args(frameworks=("pyg", "gdsl-reference", "gdsl-numba"))
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    fw = a.framework
    meta = {"framework": fw, "graph": a.graph}
    cap = int(a.cap_gib * common.GIB)
    common.start_watchdog(cap, meta)
    n = graphs.ALL[a.graph][1]
    x_np, y_np, train_np = graphs.vertex_data(n)
    x, y, train = torch.from_numpy(x_np), torch.from_numpy(y_np), torch.from_numpy(train_np)
    info = {"torch": torch.__version__, "numpy": np.__version__, "threads": torch.get_num_threads()}

    def checksum(out):
        return float(out.detach().double().abs().sum())

    def n_edges(op):
        src, _, _ = graphs.load(a.graph, common.VARIANT[op])
        return int(src.size)

    if fw == "pyg":
        try:
            import torch_geometric
            from pyg_models import GAT, GCN, SAGE, Agg, GATConv
            from torch_geometric.utils import spmm
        except ImportError as e:
            common.emit({**meta, "unavailable": f"torch_geometric does not import: {e}"})
            return
        info["torch_geometric"] = torch_geometric.__version__
        ei_cache, adj_cache = {}, {}

        def edge_index(variant):
            if variant not in ei_cache:
                src, dst, _ = graphs.load(a.graph, variant)
                ei_cache[variant] = torch.stack([torch.from_numpy(src), torch.from_numpy(dst)])
            return ei_cache[variant]

        def adj_t(variant, w=None):
            key = (variant, w is not None)
            if key not in adj_cache:
                src, dst, _ = graphs.load(a.graph, variant)
                vals = torch.ones(src.size) if w is None else w
                idx = torch.stack([torch.from_numpy(dst), torch.from_numpy(src)])
                adj_cache[key] = torch.sparse_coo_tensor(idx, vals, (n, n)).coalesce().to_sparse_csr()
            return adj_cache[key]

        def fits(op):
            return PYG_EDGE_TENSORS[op] * n_edges(op) * common.EDGE_FEATURE_BYTES + 2 * common.GIB <= cap

        def estimate(op):
            if fits(op) or op in PYG_SPMM_OK:
                return None
            return PYG_EDGE_TENSORS[op] * n_edges(op) * common.EDGE_FEATURE_BYTES

        def make(op):
            torch.manual_seed(0)
            variant = common.VARIANT[op]
            sparse = not fits(op)
            mode = {"mode": "adj_t" if sparse else "edge_index"}
            if op in ("copy_sum", "copy_mean", "src_mul_edge_sum"):
                reduce = "mean" if op == "copy_mean" else "sum"
                w = torch.from_numpy(graphs.edge_weight(n_edges(op))) if op == "src_mul_edge_sum" else None
                if sparse:
                    A = adj_t(variant, w)
                    f = lambda: spmm(A, x, reduce=reduce)
                else:
                    agg, ei = Agg(reduce), edge_index(variant)
                    f = lambda: agg(x, ei, w)
                return f, (lambda: checksum(f())), mode
            if op == "gat_layer":
                conv, ei = GATConv(common.F, common.HEAD_DIM, heads=common.HEADS, add_self_loops=False), edge_index(variant)
                gout = torch.randn(n, common.HEADS * common.HEAD_DIM, generator=torch.Generator().manual_seed(1))

                def fb():
                    conv.zero_grad(set_to_none=True)
                    conv(x, ei).backward(gout)

                return fb, (lambda: checksum(conv(x, ei))), mode
            model = {"gcn_epoch": GCN, "sage_epoch": SAGE, "gat_epoch": GAT}[op]()
            lr, wd = {"gcn_epoch": (0.01, 5e-4), "sage_epoch": (0.003, 0.0), "gat_epoch": (0.005, 5e-4)}[op]
            ei = adj_t(variant) if sparse else edge_index(variant)
            opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)

            def step():
                model.train()
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x, ei)[train], y[train])
                loss.backward()
                opt.step()
                step.loss = float(loss.detach())

            return step, (lambda: step.loss), mode

        common.emit({**meta, "info": info})
        common.run_ops(a.ops, make, meta, estimate=estimate, cap_bytes=cap, budgets=common.budgets(a.quick))
        return

    # ---- gdsl backends
    import gdsl
    import gdsl.api
    from gdsl.runtime.trainer import make_optimizer

    backend = fw.removeprefix("gdsl-")
    info["gdsl_backends"] = list(gdsl.api.BACKENDS)
    try:
        import numba
        info["numba"] = numba.__version__
    except ImportError:
        pass
    common.emit({**meta, "info": info})
    if backend not in gdsl.api.BACKENDS:
        for op in a.ops:
            common.emit({**meta, "op": op, "skipped": f"gdsl.api.BACKENDS is {tuple(gdsl.api.BACKENDS)}: "
                                                      f"no '{backend}' backend yet"})
        return
    src, dst, _ = graphs.load(a.graph, "raw")
    g = gdsl.Graph.from_edges(src, dst, n, features=x, labels=y, train_mask=train,
                              edata={"w": graphs.edge_weight(src.size)}, name=a.graph)
    del src, dst

    def estimate(op):
        if backend != "reference":
            return None  # the watchdog still stops it at the cap
        return REFERENCE_EDGE_TENSORS[op] * n_edges(op) * common.EDGE_FEATURE_BYTES + common.GIB

    def make(op):
        torch.manual_seed(0)
        prog = gdsl.compile(str(PROGRAMS / GDSL_PROGRAM[op]))
        model = prog.module(g, backend=backend)
        if op in ("copy_sum", "copy_mean", "src_mul_edge_sum"):
            def f():
                with torch.no_grad():
                    return model()
            return f, (lambda: checksum(f()))
        if op == "gat_layer":
            gout = torch.randn(n, common.HEADS, common.HEAD_DIM, generator=torch.Generator().manual_seed(1))

            def fb():
                model.zero_grad(set_to_none=True)
                model().backward(gout)

            return fb, (lambda: checksum(model()))
        cfg = prog.train
        opt = make_optimizer(cfg.optimizer, cfg.optimizer_args, model.parameters())

        def step():
            model.train()
            opt.zero_grad(set_to_none=True)
            loss = model.loss(model())
            loss.backward()
            opt.step()
            step.loss = float(loss.detach())

        return step, (lambda: step.loss)

    common.run_ops(a.ops, make, meta, estimate=estimate, cap_bytes=cap, budgets=common.budgets(a.quick))


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", str(os.cpu_count() or 1))
    main()
