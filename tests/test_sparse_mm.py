"""The CSR products of the reference backend (and of the MPI ranks): the
backward multiplies by A^T built once per matrix (backends/reference/
linear.py `transposed`), with the numbers of torch's own backward bit for
bit, and nothing kept after the matrix is gone."""
from __future__ import annotations

import gc
import warnings
import weakref

import torch

from gdsl.backends.reference import linear
from gdsl.backends.reference.linear import sparse_mm, transposed
from helpers import random_graph


def _csr(rows, cols, vals, shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, shape).coalesce().to_sparse_csr()


def test_backward_is_torchs_bit_for_bit():
    g = random_graph(n=300, e=2000, f=4, c=3, seed=4)
    keep = g.dst < 200
    for a in (_csr(g.dst, g.src, torch.rand(g.src.numel()), (300, 300)),
              _csr(g.dst[keep], g.src[keep], torch.ones(int(keep.sum())), (200, 300))):   # a rank's rows
        gout = torch.randn(a.shape[0], 5)
        grads = []
        for mm in (torch.sparse.mm, sparse_mm):
            h = torch.randn(300, 5, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mm(a, h).backward(gout)
            grads.append(h.grad)
        assert torch.equal(grads[0], grads[1]) and grads[0].abs().sum() > 0
        assert id(a) in linear._TRANSPOSED   # sparse_mm's backward built and kept A^T
        at = transposed(a)
        assert at.layout == torch.sparse_csr and at.shape == (a.shape[1], a.shape[0])
        assert transposed(a) is at    # built once


def test_the_transpose_goes_with_its_matrix():
    g = random_graph(n=50, e=200, f=4, c=3, seed=5)
    a = _csr(g.dst, g.src, torch.ones(g.src.numel()), (50, 50))
    at = weakref.ref(transposed(a))
    assert id(a) in linear._TRANSPOSED
    key = id(a)
    del a
    gc.collect()
    assert at() is None and key not in linear._TRANSPOSED
