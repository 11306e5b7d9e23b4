"""Binding a program keeps only what it uses: the per-edge degree arrays are
made on demand, backends with their own kernels build no torch.sparse matrix,
and the binding's freed temporaries go back to the system."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.backends.reference.graphdata import GraphData
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = ROOT / "programs" / "gcn.gd"


def test_edge_env_derives_degree_arrays_on_first_use():
    g = random_graph(n=30, e=120, seed=3)
    gd = GraphData(g, {"self_loops": True})
    assert dict.keys(gd.edge_env) == set()          # nothing made yet
    assert "src_degree" in gd.edge_env and "nope" not in gd.edge_env
    want = gd.graph.in_degree()[gd.src]
    assert torch.equal(gd.edge_env["src_degree"], want)
    assert set(dict.keys(gd.edge_env)) == {"src_degree"}
    assert gd.edge_env.get("dst_out_degree") is not None and gd.edge_env.get("nope", 7) == 7
    with pytest.raises(KeyError):
        gd.edge_env["nope"]


def test_edge_data_named_like_a_derived_array_wins():
    g = random_graph(n=20, e=60, seed=1)
    mine = torch.arange(g.src.numel(), dtype=torch.float32)
    g2 = gdsl.Graph.from_edges(g.src, g.dst, g.num_nodes, features=g.features, labels=g.labels,
                               edata={"src_degree": mine})
    gd = GraphData(g2, {})
    assert torch.equal(gd.edge_env["src_degree"], mine)


def test_only_the_reference_builds_torch_sparse_matrices():
    g = random_graph(n=40, e=160, seed=2)
    prog = gdsl.compile(str(GCN))
    assert prog.module(g, backend="reference")._spmm     # GCN's two aggregations
    pytest.importorskip("numba")
    assert prog.module(g, backend="numba")._spmm == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim")
def test_release_free_heap_returns_freed_blocks():
    # glibc's thresholds pinned (mallopt), so the 8 MiB tensors come from the
    # heap and freeing them trims nothing by itself: small blocks allocated
    # between them keep the heap from shrinking. (Left to glibc's dynamic
    # threshold, that depends on the process's earlier frees: once in a full
    # suite run the blocks were mmapped and freed at once.)
    code = textwrap.dedent("""
        import ctypes
        import torch
        from gdsl.runtime.memory import release_free_heap
        libc = ctypes.CDLL(None)
        assert libc.mallopt(-3, 64 << 20) == 1      # M_MMAP_THRESHOLD: 64 MiB
        assert libc.mallopt(-1, 1 << 30) == 1       # M_TRIM_THRESHOLD: no automatic trimming
        def rss():
            return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) << 10
        blocks, pins = [], []
        for _ in range(40):                                 # 40 x 8 MiB
            blocks.append(torch.ones(2 << 20)); pins.append(torch.ones(16))
        del blocks
        before = rss()
        assert release_free_heap()
        print(before - rss())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 200 << 20     # most of the 320 MiB came back


def test_binding_a_program_drops_the_kept_output_mappings(monkeypatch):
    pytest.importorskip("numba")
    from gdsl.backends.numba import ops

    monkeypatch.setattr(ops, "HUGE_ALLOC_BYTES", 1024)   # this small graph's outputs go to mappings too
    g = random_graph(n=300, e=1500, f=16, seed=4)
    prog = gdsl.compile(str(GCN))
    m = prog.module(g, backend="numba")
    with torch.no_grad():
        m()
        m()
    if not ops._huge_ok[0]:
        pytest.skip("no MADV_HUGEPAGE here")
    assert any(ops._FREE_MAPPINGS.values())      # outputs freed after the forward were kept
    prog.module(g, backend="numba")
    assert not any(ops._FREE_MAPPINGS.values())
