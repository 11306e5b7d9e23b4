"""What a failed write does to the user's files (helper-76, session 35): a
full disk under torch.save is a user error, not an internal one, and a
distributed checkpoint that one rank cannot write leaves the last good
checkpoint as it was. The disk is made "full" by a torch.save that fails
as torch's zip writer does (a RuntimeError)."""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.diagnostics import GdslError
from gdsl.dist.errors import AllRanksError
from gdsl.runtime.files import save_state_dict
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent


def _full_disk(monkeypatch, fail=lambda dest: True):
    real = torch.save

    def save(obj, dest, *a, **k):
        if fail(dest):
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
        return real(obj, dest, *a, **k)
    monkeypatch.setattr(torch, "save", save)


def test_save_on_a_full_disk_is_a_user_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    old = tmp_path / "m.pt"
    old.write_bytes(b"the user's previous file")
    _full_disk(monkeypatch)
    with pytest.raises(GdslError, match=r"--save .*m\.pt: could not be written \(the write failed with \d+ bytes "
                                        r"free there\)"):
        save_state_dict(str(old), {"w": torch.zeros(3)})
    assert old.read_bytes() == b"the user's previous file"
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]   # no temporary file left


class _Comm:
    """One rank of two; `others` is what the other rank reports from its write."""

    def __init__(self, rank: int, others: str) -> None:
        self.rank, self.size = rank, 2
        self.comm = types.SimpleNamespace(allgather=lambda mine: [mine, others] if rank == 0 else [others, mine])
        self.barriers = 0

    def barrier(self) -> None:
        self.barriers += 1


def _model_and_opt():
    m = gdsl.compile(ROOT / "programs" / "gcn.gd").module(random_graph(n=12, e=30, f=5))
    m.delay_state_dict = lambda: {}
    return m, torch.optim.Adam(m.parameters())


@pytest.mark.parametrize("who", ["this rank", "the other rank"])
def test_a_checkpoint_one_rank_cannot_write_leaves_the_last_one_whole(tmp_path, monkeypatch, who):
    """Was: each rank renamed its file at once, so a failed write on one
    left rank files of two epochs, and --resume refused the directory."""
    from gdsl.dist.run import _save_checkpoint
    m, opt = _model_and_opt()
    ck = tmp_path / "ck"
    _save_checkpoint(ck, _Comm(0, ""), m, opt, 2, [])
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    assert set(before) == {"rank-0.pt", "checkpoint.json"} and json.loads(before["checkpoint.json"])["epoch"] == 2
    if who == "this rank":
        _full_disk(monkeypatch)
        comm, said = _Comm(0, ""), r"rank 0: rank-0\.pt\.tmp: the write failed"
    else:
        comm, said = _Comm(0, "rank 1: rank-1.pt.tmp: No space left on device"), "rank 1: rank-1.pt.tmp: No space"
    with pytest.raises(AllRanksError, match=rf"--checkpoint .*ck: the checkpoint of epoch 4 could not be written "
                                            rf"\({said}.*\); the checkpoint there is kept as it was"):
        _save_checkpoint(ck, comm, m, opt, 4, [])
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before and comm.barriers == 0
