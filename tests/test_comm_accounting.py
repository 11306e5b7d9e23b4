"""gdsl/dist/comm.py without MPI: the byte accounting of each collective
(its module docstring's counting rules, which `--report comm` prints and
the cost model is compared with) and the counts/displacements it hands
MPI, on a fake communicator that plays the other ranks. (The MPI tests
check only the *received* bytes of allgatherv / reduce_scatter and
alltoallv's halo rows; the sent side and the displacements were free.)"""

import numpy as np
import pytest
import torch

from gdsl.dist.comm import Comm
from helpers import fake_mpi, traffic


class FakeMPIComm:
    """Rank `me` of `size`; every other rank q sends rows filled with q + 100."""

    def __init__(self, me: int, size: int):
        self.me, self.size = me, size

    def Get_rank(self):
        return self.me

    def Get_size(self):
        return self.size

    def Allgatherv(self, sendbuf, recv):
        out, (counts, displs), _ = recv
        flat = out.reshape(-1)
        for q in range(self.size):
            seg = flat[displs[q]: displs[q] + counts[q]]
            seg[:] = sendbuf.reshape(-1) if q == self.me else q + 100

    def Alltoallv(self, send, recv):
        sbuf, (sc, sd), _ = send
        rbuf, (rc, rd), _ = recv
        flat = rbuf.reshape(-1)
        for q in range(self.size):
            seg = flat[rd[q]: rd[q] + rc[q]]
            seg[:] = sbuf.reshape(-1)[sd[q]: sd[q] + sc[q]] if q == self.me else q + 100

    def Reduce_scatter(self, sendbuf, recvbuf, counts, op):
        off = int(np.sum(counts[: self.me]))
        mine = sendbuf.reshape(-1)[off: off + counts[self.me]]
        # the other ranks contribute their rank + 100 to every element
        recvbuf.reshape(-1)[:] = mine + sum(q + 100 for q in range(self.size) if q != self.me)

    def Allreduce(self, _inplace, buf, op):
        buf += sum(q + 100 for q in range(self.size) if q != self.me)


@pytest.fixture(autouse=True)
def no_mpi(monkeypatch):
    fake_mpi(monkeypatch)


def test_allgatherv_counts_one_send_per_peer_and_every_other_block_received():
    me, size, f = 1, 3, 4
    rows = np.array([2, 3, 5], np.int64)
    c = Comm(FakeMPIComm(me, size))
    x = torch.arange(rows[me] * f, dtype=torch.float32).reshape(rows[me], f)
    out = c.allgatherv(x, rows, "h")
    assert out.shape == (10, f)
    assert torch.equal(out[2:5], x)                               # own block at its displacement
    assert (out[:2] == 100).all() and (out[5:] == 102).all()      # the others', in rank order
    # sent = own block * (P - 1) (a broadcast of it to every peer); recv = the others' blocks
    assert traffic(c) == {("allgatherv", "h"): (3 * f * 4 * (size - 1), (2 + 5) * f * 4, 1)}


def test_reduce_scatter_is_the_transpose_of_allgatherv():
    me, size, f = 0, 3, 2
    rows = np.array([2, 3, 5], np.int64)
    c = Comm(FakeMPIComm(me, size))
    x = torch.ones((10, f), dtype=torch.float32)
    out = c.reduce_scatter(x, rows, "g")
    assert out.shape == (2, f) and (out == 1 + 101 + 102).all()
    # sent = every other rank's block of the operand; recv = own block * (P - 1)
    assert traffic(c) == {("reduce_scatter", "g"): ((3 + 5) * f * 4, 2 * f * 4 * (size - 1), 1)}


def test_alltoallv_leaves_the_own_block_out_of_the_count_and_places_blocks_by_source():
    me, size, f = 2, 3, 3
    send_rows = np.array([1, 2, 4], np.int64)    # to ranks 0, 1, 2 (2: myself)
    recv_rows = np.array([3, 0, 4], np.int64)    # from ranks 0, 1, 2
    c = Comm(FakeMPIComm(me, size))
    send = torch.arange(7 * f, dtype=torch.float32).reshape(7, f)
    out = c.alltoallv(send, send_rows, recv_rows, "a")
    assert out.shape == (7, f)
    assert (out[:3] == 100).all()
    assert torch.equal(out[3:], send[3:])        # my own rows to myself, from their displacement
    assert traffic(c) == {("alltoallv", "a"): ((1 + 2) * f * 4, 3 * f * 4, 1)}


def test_allreduce_counts_the_buffer_both_ways_and_only_with_peers():
    c = Comm(FakeMPIComm(0, 2))
    x = torch.zeros(5, dtype=torch.float32)
    c.allreduce_(x, "y")
    assert (x == 101).all()
    assert traffic(c) == {("allreduce", "y"): (20, 20, 1)}
    one = Comm(FakeMPIComm(0, 1))
    one.allreduce_(torch.zeros(5), "y")
    assert traffic(one) == {}
