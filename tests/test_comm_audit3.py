"""gdsl/dist/comm.py without MPI (helper audit 3): what the byte-accounting
tests (test_comm_accounting.py) and the watchdog tests
(test_comm_watchdog.py) left free: the datatype alltoallv hands MPI for
float64, allreduce_scalars' op, a split communicator's shared accounting,
the contiguity check, the time spent in an all-reduce, and the watchdog
thread's polling period and daemon flag."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from gdsl.dist import comm as comm_mod
from gdsl.dist.comm import Comm, start_watchdog
from helpers import fake_mpi

_OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class Peer:
    """Rank `me` of 2; the other rank holds `other` (alltoallv: sends rows of 7)."""

    def __init__(self, me=0, size=2, other=None, sleep=0.0):
        self.me, self.size, self.other, self.sleep = me, size, other, sleep
        self.datatypes, self.splits = [], []

    def Get_rank(self):
        return self.me

    def Get_size(self):
        return self.size

    def Split(self, color, key):
        self.splits.append((color, key))
        return Peer(0, 1)

    def Alltoallv(self, send, recv):
        sbuf, (sc, sd), sdt = send
        rbuf, (rc, rd), rdt = recv
        self.datatypes += [sdt, rdt]
        flat = rbuf.reshape(-1)
        for q in range(self.size):
            flat[rd[q]: rd[q] + rc[q]] = sbuf.reshape(-1)[sd[q]: sd[q] + sc[q]] if q == self.me else 7

    def Allreduce(self, _inplace, buf, op):
        time.sleep(self.sleep)
        buf[...] = _OPS[op](buf, self.other)


@pytest.fixture(autouse=True)
def no_mpi(monkeypatch):
    fake_mpi(monkeypatch)


@pytest.mark.parametrize("dtype,mpi_type", [(torch.float64, "d"), (torch.float32, "f")])
def test_alltoallv_hands_mpi_the_tensors_datatype(dtype, mpi_type):
    """The counts are elements: a float64 buffer described as MPI.FLOAT would
    move half of each row (and the rows land at the wrong offsets)."""
    peer = Peer()
    c = Comm(peer)
    send = torch.arange(6, dtype=dtype).reshape(3, 2)
    out = c.alltoallv(send, np.array([1, 2]), np.array([1, 2]), "a")
    assert peer.datatypes == [mpi_type, mpi_type]
    assert out.dtype == dtype and torch.equal(out[:1], send[:1]) and (out[1:] == 7).all()


@pytest.mark.parametrize("dtype,mpi_type", [(torch.float64, "d"), (torch.float32, "f")])
def test_allgatherv_describes_the_received_blocks_in_the_tensors_datatype(dtype, mpi_type):
    """Was: MPI.FLOAT hard-coded for the receive buffer, so float64 blocks
    came back as garbage (helper-56's latent fault; the runtime is float32
    today). Also P3's block bcast / reduce and cd-r's ialltoallv (mpi_type)."""
    from gdsl.dist.comm import mpi_type as pick

    class Gather(Peer):
        def Allgatherv(self, send, recv):
            rbuf, (c, d), rdt = recv
            self.datatypes.append(rdt)
            flat = rbuf.reshape(-1)
            flat[d[0]: d[0] + c[0]] = send.reshape(-1)
            flat[d[1]: d[1] + c[1]] = 7
    peer = Gather()
    x = torch.arange(4, dtype=dtype).reshape(2, 2) + 0.5
    out = Comm(peer).allgatherv(x, np.array([2, 1]), "g")
    assert peer.datatypes == [mpi_type] and out.dtype == dtype
    assert torch.equal(out[:2], x) and (out[2:] == 7).all()
    assert pick(x) == mpi_type
    with pytest.raises(TypeError, match="float32 or float64 tensors, not torch.int64"):
        pick(torch.zeros(2, dtype=torch.int64))


@pytest.mark.parametrize("dtype,mpi_type", [(torch.float64, "d"), (torch.float32, "f")])
def test_block_bcast_and_its_reduce_use_the_tensors_datatype(dtype, mpi_type):
    from gdsl.dist.functions import BlockBcast
    seen = []

    class Roots(Peer):
        def Bcast(self, buf, root):
            seen.append(("bcast", buf[1]))
            if root != self.me:
                buf[0][...] = 7

        def Reduce(self, send, recv, op, root):
            seen.append(("reduce", send[1], None if recv is None else recv[1]))
            if recv is not None:   # the root's own part is zeros (it reads its block in place): the peer's 2
                recv[0][...] = send[0] + 2
    c = Comm(Roots())
    x = torch.ones(2, 3, dtype=dtype, requires_grad=True)
    y = BlockBcast.apply(x, c, [(0, 2), (1, 1)], 0, "b")
    y.sum().backward()
    assert y.shape == (1, 3) and y.dtype == dtype and x.grad.dtype == dtype and (x.grad == 2).all()
    assert seen == [("bcast", mpi_type)] * 2 + [("reduce", mpi_type, mpi_type), ("reduce", mpi_type, None)]
    sent = c.stats.take()[("bcast", "b fwd")].sent
    assert sent == 2 * 3 * torch.finfo(dtype).bits // 8   # its own block (2 x 3 elements), to its 1 peer


@pytest.mark.parametrize("op,want", [("sum", [4.0, 7.0]), ("max", [3.0, 5.0]), ("min", [1.0, 2.0])])
def test_allreduce_scalars_applies_its_op(op, want):
    c = Comm(Peer(other=np.array([3.0, 2.0])))
    assert c.allreduce_scalars([1.0, 5.0], op) == want
    one = Comm(Peer(0, 1))
    vals = [1.0, 2.0]
    got = one.allreduce_scalars(vals, op)
    assert got == vals and got is not vals   # one rank: the values, a new list


def test_a_split_communicator_counts_into_the_same_stats():
    """The 1.5D plan's process-row and -column communicators (Comm.split):
    their traffic belongs to the run's one accounting (`--report comm`)."""
    peer = Peer()
    c = Comm(peer)
    sub = c.split(1, 0)
    assert peer.splits == [(1, 0)] and sub.stats is c.stats
    sub.comm = Peer(other=np.zeros(3, np.float32))   # a 2-rank sub-communicator
    sub.size = 2
    sub.allreduce_(torch.ones(3), "row")
    assert {k: (t.sent, t.recv, t.calls) for k, t in c.stats.take().items()} == {("allreduce", "row"): (12, 12, 1)}


def test_allreduce_refuses_a_non_contiguous_tensor():
    c = Comm(Peer(other=np.zeros((3, 2), np.float32)))
    with pytest.raises(ValueError, match="allreduce_ needs a contiguous tensor"):
        c.allreduce_(torch.ones(2, 3).t(), "y")


def test_allreduce_records_the_time_spent_waiting():
    c = Comm(Peer(other=np.zeros(2, np.float32), sleep=0.05))
    c.allreduce_(torch.ones(2), "y")
    [t] = c.stats.take().values()
    assert t.seconds >= 0.04


def test_the_watchdog_polls_at_least_every_second():
    """A limit of 40 s is checked every second (min(1, limit / 4)), so a call
    already past it is noticed within about a second, not 10 s later."""
    got = threading.Event()
    stop = threading.Event()
    with comm_mod.WATCHDOG.waiting("alltoallv 'late'"):
        comm_mod.WATCHDOG.since -= 100.0
        t0 = time.monotonic()
        t = start_watchdog(40.0, lambda m: got.set(), stop)
        fired = got.wait(6.0)
        stop.set()
    t.join(15)
    assert fired and time.monotonic() - t0 < 6.0


def test_the_watchdog_thread_is_a_daemon():
    """It must never keep a finished rank alive (nothing sets `stop` when a
    run ends normally)."""
    stop = threading.Event()
    t = start_watchdog(5.0, lambda m: None, stop)
    try:
        assert t.daemon and t.name == "gdsl-comm-watchdog"
    finally:
        stop.set()
        t.join(5)
