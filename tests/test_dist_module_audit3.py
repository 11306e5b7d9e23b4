"""gdsl/dist/module.py pieces in one process (helper audit 3): the 0c / cd-r
rescaling of a split vertex's partial aggregate, for both directions (the
MPI tests only run `to = dst` aggregations on symmetric graphs, where in-
and out-degrees agree)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from gdsl.dist.module import DistModule, _tie_counts


def test_partial_scale_is_all_edges_over_local_ones_per_direction():
    """dst: in-degree / local in-edges; src (`to = src`): out-degree / local
    out-edges; a row with no local edge in that direction gets 1."""
    part = SimpleNamespace(n_local=4, dst=np.array([0, 0, 1]), src=np.array([2, 3, 3]),
                           in_degree=np.array([4, 1, 7, 2]), out_degree=np.array([9, 8, 3, 5]))
    scale = DistModule._make_partial_scale(SimpleNamespace(part=part, device=torch.device("cpu")))
    assert torch.equal(scale["dst"], torch.tensor([2.0, 1.0, 1.0, 1.0]))
    assert torch.equal(scale["src"], torch.tensor([1.0, 1.0, 3.0, 2.5]))
    assert scale["dst"].dtype == scale["src"].dtype == torch.float32


def test_tie_counts_count_the_messages_that_attain_the_partial():
    """Per output element, the local messages equal to the partial max / min
    (tie_shares splits the gradient by these counts across ranks); a row
    without messages counts 0."""
    m = torch.tensor([[1.0, 5.0], [2.0, 5.0], [1.0, 3.0], [4.0, 4.0]])
    idx = torch.tensor([0, 0, 0, 1])
    mn = torch.tensor([[1.0, 3.0], [4.0, 4.0], [0.0, 0.0]])
    mx = torch.tensor([[2.0, 5.0], [4.0, 4.0], [0.0, 0.0]])
    assert _tie_counts(m, idx, mn).tolist() == [[2.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert _tie_counts(m, idx, mx).tolist() == [[1.0, 2.0], [1.0, 1.0], [0.0, 0.0]]


def test_a_ranks_forward_refuses_pyg_style_arguments_as_one_process_does():
    """`model(x, edge_index=ei)` on a rank's module: the gdsl error the one-process
    modules give (was: Python's bare TypeError 'unexpected keyword argument')."""
    import pytest

    from gdsl.diagnostics import GdslError
    x, ei = torch.zeros(3, 2), torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(GdslError, match=r"takes only the features: .*got the keyword argument 'edge_index'"):
        DistModule.forward(SimpleNamespace(), x, edge_index=ei)
    with pytest.raises(GdslError, match=r"got 2 arguments"):
        DistModule.forward(SimpleNamespace(), x, ei)
