"""Where a distributed rank's tensors live (issue 6, item 3): the CPU for the
reference and numba backends and for triton under TRITON_INTERPRET=1, a GPU
per rank for triton on a CUDA machine (tested on GPUs in test_dist.py, which
skips without one); MPI buffers always in host memory."""
from __future__ import annotations

import pytest
import torch

from gdsl.diagnostics import GdslError
from gdsl.dist.comm import host
from gdsl.dist.kernels import rank_device


def test_host_is_the_tensor_itself_on_the_cpu():
    t = torch.arange(12.0).reshape(3, 4)
    h = host(t)
    assert h.data_ptr() == t.data_ptr() and not h.requires_grad
    w = torch.arange(12.0, requires_grad=True).reshape(4, 3).t()   # not contiguous, tracked
    h = host(w)
    assert h.is_contiguous() and not h.requires_grad and torch.equal(h, w.detach())


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_cpu_backends_keep_ranks_on_the_cpu(backend):
    assert rank_device(backend, comm=None) == torch.device("cpu")   # no MPI call made


def test_triton_ranks_under_the_interpreter_stay_on_the_cpu(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr("gdsl.backends.triton.check_triton_mode", lambda: None)
    assert rank_device("triton", comm=None) == torch.device("cpu")


def test_triton_ranks_without_a_gpu_is_a_clear_error(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(GdslError, match="no CUDA GPU: the triton backend needs one; set TRITON_INTERPRET=1"):
        rank_device("triton", comm=None)
