"""gdsl/dist/functions.py without MPI (helper audit 3): the byte accounting
and labels of the 1.5D block broadcast and of P3's pull, on a fake
communicator that plays the other rank (the MPI tests compare the loss,
and tests/test_cost_vs_runtime.py the bytes of 1D, vertex-cut and P3
plans only)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gdsl.dist import functions as fn
from gdsl.dist.comm import Comm
from helpers import fake_mpi, traffic


class Other:
    """Rank `me` of `size`; every other rank's data is filled with 100 + q."""

    def __init__(self, me: int, size: int):
        self.me, self.size, self.calls = me, size, []

    def Get_rank(self):
        return self.me

    def Get_size(self):
        return self.size

    def Bcast(self, spec, root):
        buf = spec[0]
        self.calls.append(("Bcast", root))
        if root != self.me:
            buf[...] = 100 + root

    def Reduce(self, send, recv, op, root):
        self.calls.append(("Reduce", root, op))
        if root == self.me:
            recv[0][...] = send[0] + sum(100 + q for q in range(self.size) if q != self.me)

    def Reduce_scatter(self, sendbuf, recvbuf, counts, op):
        off = int(np.sum(counts[: self.me]))
        recvbuf.reshape(-1)[:] = sendbuf.reshape(-1)[off: off + counts[self.me]] + 1

    def Allgatherv(self, sendbuf, recv):
        out, (counts, displs), _ = recv
        flat = out.reshape(-1)
        for q in range(self.size):
            flat[displs[q]: displs[q] + counts[q]] = sendbuf.reshape(-1) if q == self.me else 100 + q


@pytest.fixture(autouse=True)
def no_mpi(monkeypatch):
    fake_mpi(monkeypatch)


def test_block_bcast_counts_its_own_block_once_per_peer_and_reduces_to_each_root():
    """Column of 3 members, stages: block 0 (2 rows, mine) then block 2 (1
    row). Forward: my block sent to the 2 peers, the other block received
    once and returned alone (the rank reads its own block in place: helper-25);
    backward: the transpose (each stage reduced to its root; at its own stage
    the root adds zeros, its own gradient reaching x directly)."""
    peer = Other(0, 3)
    c = Comm(peer)
    f = 4
    x = torch.arange(2 * f, dtype=torch.float32).reshape(2, f).requires_grad_()
    out = fn.BlockBcast.apply(x, c, [(0, 2), (2, 1)], 0, "h")
    assert out.shape == (1, f) and (out == 102).all()
    row = f * 4
    assert traffic(c) == {("bcast", "h fwd"): (2 * row * 2, 1 * row, 2)}
    out.backward(torch.ones_like(out))
    assert [k for k in peer.calls if k[0] == "Reduce"] == [("Reduce", 0, "sum"), ("Reduce", 2, "sum")]
    assert (x.grad == 101 + 102).all()   # my block's gradient summed over the other members of the column
    assert traffic(c) == {("reduce", "h bwd"): (1 * row, 2 * row * 2, 2)}


def test_pull_rows_labels_its_forward_and_backward_apart():
    """P3's pull: reduce-scatter forward, allgatherv backward, each under its
    own label in `--report comm` (fwd / bwd)."""
    c = Comm(Other(1, 2))
    rows = np.array([2, 3], np.int64)
    x = torch.zeros((5, 2), requires_grad=True)
    out = fn.PullRows.apply(x, c, rows, "s sync(pull)")
    assert out.shape == (3, 2) and (out == 1).all()
    out.backward(torch.ones_like(out))
    assert set(traffic(c)) == {("reduce_scatter", "s sync(pull) fwd"), ("allgatherv", "s sync(pull) bwd")}
    assert (x.grad[:2] == 100).all() and (x.grad[2:] == 1).all()


# ---------------------------------------------------------------- DistGNN cd-r's pipeline (DelayPipe)

class SelfExchange(Other):
    """One rank holding both the root (row 0) and a leaf (row 1) replica of
    one split vertex: its non-blocking all-to-all-v delivers to itself."""

    def __init__(self):
        super().__init__(0, 1)

    def Ialltoallv(self, send, recv):
        (sbuf, (sc, _), _), (rbuf, (rc, _), _) = send, recv
        rbuf.reshape(-1)[: int(rc[0])] = sbuf.reshape(-1)[: int(sc[0])]
        return "request"


@pytest.fixture
def pipe_factory(monkeypatch):
    fake_mpi(monkeypatch, Request=SimpleNamespace(Waitall=lambda reqs: None))

    def make(r=1):
        c = Comm(SelfExchange())
        tree = fn.SplitCombine(c, [np.array([1])], [np.array([0])])
        return fn.DelayPipe(tree, torch.tensor([5, 5]), r, c, "agg")
    return make


def _x(e):
    return torch.tensor([[10.0 * (e + 1)], [e + 1.0]])   # a_e (root's fresh partial), b_e (leaf's)


def test_delay_pipe_adds_stale_remote_partials_as_documented(pipe_factory):
    """cd-1 (docs/distributed.md, "Approximate plans"): a root adds its
    leaves' partial of r epochs ago, a leaf the root's total minus its own
    part (2r epochs old); until its first remote contribution arrives a
    replica's partial is rescaled (`scale`), the other replica's not."""
    pipe, scale = pipe_factory(1), torch.tensor([3.0, 7.0])
    a = {e: float(_x(e)[0]) for e in range(5)}
    b = {e: float(_x(e)[1]) for e in range(5)}
    want = {0: [a[0] * 3, b[0] * 7],
            1: [a[1] + b[0], b[1] * 7],          # the root's contribution arrived, the leaf's not yet
            2: [a[2] + b[1], b[2] + a[1]],
            3: [a[3] + b[2], b[3] + a[2]]}
    for e, w in want.items():
        assert pipe.step(_x(e), e, scale).reshape(-1).tolist() == w, e
    # every row went to this rank itself: nothing counted as sent or received (comm.py's rule)
    traffic = {k: (t.sent, t.recv) for k, t in pipe.comm.stats.take().items() if k[0] == "ialltoallv"}
    assert set(traffic) == {("ialltoallv", "agg leaf->root (delayed)"), ("ialltoallv", "agg root->leaf (delayed)")}
    assert set(traffic.values()) == {(0, 0)}


@pytest.mark.parametrize("r", [1, 2])
def test_delay_pipe_state_survives_a_checkpoint(pipe_factory, r):
    """state_dict after epoch 2r - 1 (sends in flight completed and kept),
    loaded into a new pipeline: the epochs after it as without the
    checkpoint (cd-2: the kept remote contribution of a bin not refreshed
    in the next epoch included)."""
    scale = torch.tensor([3.0, 7.0])
    run, saved = pipe_factory(r), pipe_factory(r)
    for e in range(2 * r):
        want = run.step(_x(e), e, scale)
        assert torch.equal(saved.step(_x(e), e, scale), want)
    resumed = pipe_factory(r)
    resumed.load_state_dict(saved.state_dict())
    for e in range(2 * r, 4 * r + 1):
        assert torch.equal(resumed.step(_x(e), e, scale), run.step(_x(e), e, scale)), e
