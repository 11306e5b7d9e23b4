"""DGL 2.1 measurements; runs INSIDE bench/.dgl-venv (torch 2.2.1, numpy < 2).

    bench/.dgl-venv/bin/python bench/peer_dgl.py --graph uniform100k [--ops copy_sum,...]

Loads the cached graph arrays (bench/graphs.py), builds the same graphs the
gdsl programs bind (raw / self loops / symmetric + self loops), and times:
dgl.ops.copy_u_sum, copy_u_mean, u_mul_e_sum (the builtins update_all with
fn.copy_u / fn.u_mul_e and fn.sum / fn.mean dispatches to), one
GATConv(128, 32, num_heads=4) forward + backward, and full-batch training
epochs (forward + backward + Adam) of 2-layer GraphConv, SAGEConv(mean)
and GATConv models shaped as bench/programs/*.gd. One JSON line per op.
"""
from __future__ import annotations

import os

os.environ.setdefault("DGLBACKEND", "pytorch")

import common
import graphs


def main() -> None:
    a = common.parse_args()
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(a.threads)
    meta = {"framework": "dgl", "graph": a.graph}
    try:
        import dgl
        import dgl.nn as dglnn
    except ImportError as e:   # (was: a traceback; run with the main venv's python, say, not bench/.dgl-venv's)
        common.emit({**meta, "unavailable": f"dgl does not import (run it with bench/.dgl-venv/bin/python): {e}"})
        return

    common.start_watchdog(int(a.cap_gib * common.GIB), meta)
    x_np, y_np, train_np = graphs.vertex_data(graphs.ALL[a.graph][1])
    x, y, train = torch.from_numpy(x_np), torch.from_numpy(y_np), torch.from_numpy(train_np)
    C = graphs.NUM_CLASSES
    cache: dict[str, object] = {}

    def graph(variant: str):
        if variant not in cache:
            src, dst, n = graphs.load(a.graph, variant)
            cache[variant] = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n)
        return cache[variant]

    def checksum(out):
        return float(out.detach().double().abs().sum())

    class GCN(nn.Module):
        def __init__(s):
            super().__init__()
            s.c1 = dglnn.GraphConv(common.F, common.HIDDEN, norm="both")
            s.c2 = dglnn.GraphConv(common.HIDDEN, C, norm="both")

        def forward(s, g, h):
            h = F.dropout(h, 0.5, s.training)
            h = F.relu(s.c1(g, h))
            h = F.dropout(h, 0.5, s.training)
            return s.c2(g, h)

    class SAGE(nn.Module):
        def __init__(s):
            super().__init__()
            s.c1 = dglnn.SAGEConv(common.F, common.HIDDEN, "mean")
            s.c2 = dglnn.SAGEConv(common.HIDDEN, C, "mean")

        def forward(s, g, h):
            h = F.dropout(F.relu(s.c1(g, h)), 0.5, s.training)
            return s.c2(g, h)

    class GAT(nn.Module):
        def __init__(s):
            super().__init__()
            s.c1 = dglnn.GATConv(common.F, common.HEAD_DIM, num_heads=common.HEADS)
            s.c2 = dglnn.GATConv(common.HEADS * common.HEAD_DIM, C, num_heads=1)

        def forward(s, g, h):
            h = F.dropout(h, 0.6, s.training)
            h = F.elu(s.c1(g, h)).flatten(1)
            h = F.dropout(h, 0.6, s.training)
            return s.c2(g, h).mean(1)

    def epoch_fn(model, g, lr, wd):
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)

        def step():
            model.train()
            opt.zero_grad(set_to_none=True)
            out = model(g, x)
            loss = F.cross_entropy(out[train], y[train])
            loss.backward()
            opt.step()
            step.loss = float(loss.detach())

        return step, lambda: step.loss

    def make(op):
        g = graph(common.VARIANT[op])
        torch.manual_seed(0)
        if op == "copy_sum":
            return (lambda: dgl.ops.copy_u_sum(g, x)), (lambda: checksum(dgl.ops.copy_u_sum(g, x)))
        if op == "copy_mean":
            return (lambda: dgl.ops.copy_u_mean(g, x)), (lambda: checksum(dgl.ops.copy_u_mean(g, x)))
        if op == "src_mul_edge_sum":
            w = torch.from_numpy(graphs.edge_weight(g.num_edges())).unsqueeze(-1)
            return (lambda: dgl.ops.u_mul_e_sum(g, x, w)), (lambda: checksum(dgl.ops.u_mul_e_sum(g, x, w)))
        if op == "gat_layer":
            conv = dglnn.GATConv(common.F, common.HEAD_DIM, num_heads=common.HEADS)
            gout = torch.randn(g.num_nodes(), common.HEADS, common.HEAD_DIM,
                               generator=torch.Generator().manual_seed(1))

            def fb():
                conv.zero_grad(set_to_none=True)
                out = conv(g, x)
                out.backward(gout)
                return out

            return fb, (lambda: checksum(conv(g, x)))
        if op == "gcn_epoch":
            return epoch_fn(GCN(), g, 0.01, 5e-4)
        if op == "sage_epoch":
            return epoch_fn(SAGE(), g, 0.003, 0.0)
        if op == "gat_epoch":
            return epoch_fn(GAT(), g, 0.005, 5e-4)
        return f"unknown op {op}"

    common.emit({**meta, "info": {"torch": torch.__version__, "dgl": dgl.__version__, "numpy": np.__version__,
                                  "threads": torch.get_num_threads()}})
    common.run_ops(a.ops, make, meta, cap_bytes=int(a.cap_gib * common.GIB), budgets=common.budgets(a.quick))


if __name__ == "__main__":
    main()
