"""PyG models for bench/peer_pyg.py, shaped as bench/programs/*.gd.

Module level on purpose: PyG generates each MessagePassing subclass's
`propagate` from the class's source, which fails for a class defined inside
a function.
"""
import common
import graphs
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, MessagePassing, SAGEConv


class Agg(MessagePassing):
    def __init__(self, aggr):
        super().__init__(aggr=aggr)

    def forward(self, h, ei, w=None):
        return self.propagate(ei, x=h, w=w)

    def message(self, x_j, w):
        return x_j if w is None else x_j * w.view(-1, 1)



class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = GCNConv(common.F, common.HIDDEN, add_self_loops=False, cached=True)
        self.c2 = GCNConv(common.HIDDEN, graphs.NUM_CLASSES, add_self_loops=False, cached=True)

    def forward(self, h, ei):
        h = F.dropout(h, 0.5, self.training)
        h = F.relu(self.c1(h, ei))
        h = F.dropout(h, 0.5, self.training)
        return self.c2(h, ei)



class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = SAGEConv(common.F, common.HIDDEN, aggr="mean")
        self.c2 = SAGEConv(common.HIDDEN, graphs.NUM_CLASSES, aggr="mean")

    def forward(self, h, ei):
        h = F.dropout(F.relu(self.c1(h, ei)), 0.5, self.training)
        return self.c2(h, ei)



class GAT(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = GATConv(common.F, common.HEAD_DIM, heads=common.HEADS, add_self_loops=False)
        self.c2 = GATConv(common.HEADS * common.HEAD_DIM, graphs.NUM_CLASSES, heads=1, concat=False, add_self_loops=False)

    def forward(self, h, ei):
        h = F.dropout(h, 0.6, self.training)
        h = F.elu(self.c1(h, ei))
        h = F.dropout(h, 0.6, self.training)
        return self.c2(h, ei)
