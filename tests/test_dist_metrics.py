"""gdsl/dist/run.py `_metrics` without MPI: a distributed accuracy is the
correct count over the total count, summed over the ranks (what one
process reports), not the mean of the ranks' accuracies. Two ranks run in
threads over a fake communicator whose allreduce_scalars sums their
values. (The MPI tests compare losses only, and the approximate-plan test
compares accuracies that are both distributed.)"""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from gdsl.dist.run import _metrics
from gdsl.runtime.trainer import accuracy


class _Group:
    def __init__(self, n):
        self.n, self.vals, self.lock, self.barrier = n, [], threading.Lock(), threading.Barrier(n)

    def allreduce_scalars(self, values, op="sum"):
        with self.lock:
            self.vals.append(list(values))
        self.barrier.wait()
        total = [sum(col) for col in zip(*self.vals)]
        self.barrier.wait()
        return total


def _rank(out, labels, counted, train, group):
    graph = SimpleNamespace(labels=labels, masks={"train": train})
    return SimpleNamespace(graph=graph, counted=counted, comm=group, loss_op=None)


def test_accuracy_over_ranks_is_the_global_share_of_correct_rows():
    # rank 0: 1 counted row, right; rank 1: 3 counted rows (and one it does not count), all wrong
    out0 = torch.tensor([[0.0, 1.0]])
    lab0 = torch.tensor([1])
    out1 = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    lab1 = torch.tensor([1, 1, 1, 1])
    counted1 = torch.tensor([True, True, True, False])   # the last row is a replica another rank counts
    group = _Group(2)
    models = [(_rank(out0, lab0, torch.tensor([True]), torch.tensor([True]), group), out0),
              (_rank(out1, lab1, counted1, torch.ones(4, dtype=torch.bool), group), out1)]
    got = [None, None]

    def run(i):
        m, o = models[i]
        got[i] = _metrics(m, o, ["train", None])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # one process over the same 4 counted rows: 1 right of 4
    single = accuracy(torch.cat([out0, out1[:3]]), torch.cat([lab0, lab1[:3]]), None)
    assert single == 0.25
    for g in got:
        assert g == {"train_acc": pytest.approx(single), "all_acc": pytest.approx(single)}
