"""What a failed write does to the user's files (helper-76, session 35): a
full disk under torch.save is a user error, not an internal one, and a
distributed checkpoint that one rank cannot write leaves the last good
checkpoint as it was. The disk is made "full" by a torch.save that fails
as torch's zip writer does (a RuntimeError)."""
from __future__ import annotations

import json
import os
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
        self.comm = types.SimpleNamespace(allgather=lambda mine: [mine, others] if rank == 0 else [others, mine],
                                          bcast=lambda obj, root=0: obj)
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
    before = _tree(ck)
    assert set(before) == {"epoch-2/rank-0.pt", "checkpoint.json"}
    assert json.loads(before["checkpoint.json"]) == {"format": "gdsl-checkpoint-1", "epoch": 2, "size": 2,
                                                     "dir": "epoch-2"}
    if who == "this rank":
        _full_disk(monkeypatch)
        comm, said = _Comm(0, ""), r"rank 0: epoch-4/rank-0\.pt: the write failed"
    else:
        comm, said = _Comm(0, "rank 1: epoch-4/rank-1.pt: No space left on device"), "rank 1: epoch-4/rank-1.pt: No space"
    with pytest.raises(AllRanksError, match=rf"--checkpoint .*ck: the checkpoint of epoch 4 could not be written "
                                            rf"\({said}.*\); the checkpoint there is kept as it was"):
        _save_checkpoint(ck, comm, m, opt, 4, [])
    assert _tree(ck) == before and comm.barriers == 0


def _tree(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_a_crash_before_the_index_names_a_new_checkpoint_leaves_the_last_one_resumable(tmp_path, monkeypatch):
    """Every rank has written epoch 4, and the run dies before rank 0 points
    checkpoint.json at it: the index still names epoch 2, whose files are
    whole (was: the rank files were renamed into DIR one by one before the
    index, so they were one epoch ahead of it and --resume refused them).
    The next checkpoint removes what the crash left."""
    from gdsl.dist.run import _save_checkpoint, check_resume, checkpoint_files, read_checkpoint_index
    m, opt = _model_and_opt()
    ck = tmp_path / "ck"
    one = types.SimpleNamespace(rank=0, size=1, comm=types.SimpleNamespace(allgather=lambda mine: [mine]),
                                barrier=lambda: None)
    _save_checkpoint(ck, one, m, opt, 2, [])
    real = os.replace

    def crash(src, dst):
        if Path(dst).name == "checkpoint.json":
            raise KeyboardInterrupt   # the process dies here
        return real(src, dst)
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        _save_checkpoint(ck, one, m, opt, 4, [])
    monkeypatch.setattr(os, "replace", real)
    info = check_resume(ck, 1, None, 10)
    assert info["epoch"] == 2 and checkpoint_files(ck, info) == ck / "epoch-2"
    assert torch.load(ck / "epoch-2" / "rank-0.pt", weights_only=True)["epoch"] == 2
    assert (ck / "epoch-4" / "rank-0.pt").exists()   # left by the crash
    _save_checkpoint(ck, one, m, opt, 6, [])
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint.json", "epoch-6"]
    assert read_checkpoint_index(ck)["dir"] == "epoch-6"


def test_a_checkpoint_of_before_its_directories_still_resumes_and_is_replaced(tmp_path):
    """A checkpoint written before 2026-12-07 (rank files beside the index,
    no `dir`) resumes; the next checkpoint into it removes its files."""
    from gdsl.dist.run import _save_checkpoint, check_resume, checkpoint_files
    m, opt = _model_and_opt()
    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save({"epoch": 2}, ck / "rank-0.pt")
    (ck / "checkpoint.json").write_text(json.dumps({"format": "gdsl-checkpoint-1", "epoch": 2, "size": 1}))
    assert checkpoint_files(ck, check_resume(ck, 1, None, 10)) == ck
    one = types.SimpleNamespace(rank=0, size=1, comm=types.SimpleNamespace(allgather=lambda mine: [mine]),
                                barrier=lambda: None)
    _save_checkpoint(ck, one, m, opt, 4, [])
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint.json", "epoch-4"]


def test_checkpoint_into_a_directory_holding_one_is_refused_unless_it_is_resumed(tmp_path):
    """Was: another run's checkpoint (or this run's, restarted without
    --resume) replaced at the first checkpoint, without a word."""
    import argparse

    from gdsl.dist.cli_run import check_outputs
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "checkpoint.json").write_text('{"format": "gdsl-checkpoint-1", "epoch": 15, "size": 2}\n')
    args = argparse.Namespace(checkpoint=str(ck), resume=None, json=None, save=None, program=None, data=None)
    with pytest.raises(GdslError, match=rf"--checkpoint {ck}: holds a checkpoint already; continue that run with "
                                        rf"--resume {ck}, or start over in another directory"):
        check_outputs(args)
    args.resume = str(tmp_path / "." / "ck")   # the same directory, spelled another way
    check_outputs(args)
    check_outputs(argparse.Namespace(**{**vars(args), "checkpoint": str(tmp_path / "new"), "resume": None}))


@pytest.mark.parametrize("index,said", [
    (b"\xff\xfe{}", "not UTF-8 text"),
    (b'{"epoch": 2, "size": 2, "identity": {"overrides": ["hidden"]}}', "its identity is not the object gdsl writes"),
    (b'{"epoch": 2, "size": 2, "identity": ["program"]}', "its identity is not the object gdsl writes"),
    (b'{"epoch": 2, "size": 2, "dir": "../elsewhere"}', "its dir is '../elsewhere', not a checkpoint's epoch-K"),
])
def test_a_corrupted_checkpoint_index_is_refused_clearly(tmp_path, index, said):
    """Was an internal error (not UTF-8; a list of overrides), or every
    identity check skipped (identity a list)."""
    from gdsl.dist.run import read_checkpoint_index
    (tmp_path / "checkpoint.json").write_bytes(index)
    with pytest.raises(GdslError, match=rf"checkpoint.json: not a gdsl checkpoint \({said}\)"):
        read_checkpoint_index(tmp_path)


def test_resuming_with_another_seed_says_whose_masks_follow(tmp_path, capsys):
    """An exact plan resumes with any --seed; it now says so (was: silent,
    and --json recorded the new seed only)."""
    from gdsl.dist.run import check_resume
    ident = {"program": "p.gd", "source": "s", "train": "t", "overrides": {}, "graph": "g", "plan": "rows(hash)"}
    (tmp_path / "checkpoint.json").write_text(json.dumps({"epoch": 2, "size": 1, "identity": {**ident, "seed": 0}}))
    (tmp_path / "rank-0.pt").write_bytes(b"")
    check_resume(tmp_path, 1, {**ident, "seed": 0}, 5)
    assert capsys.readouterr().err == ""
    check_resume(tmp_path, 1, {**ident, "seed": 7}, 5)
    assert capsys.readouterr().err == (f"gdsl run: warning: {tmp_path} was written with --seed 0; from here the "
                                       "dropout masks are --seed 7's (resume with --seed 0 to continue that run)\n")


@pytest.mark.parametrize("out,dflag", [("save", "parts"), ("json", "resume"), ("save", "checkpoint")])
def test_an_output_in_a_directory_the_run_manages_is_refused(tmp_path, out, dflag):
    import argparse

    from gdsl.dist.cli_run import check_outputs
    d = tmp_path / "d"
    d.mkdir()
    args = argparse.Namespace(checkpoint=None, resume=None, parts=None, json=None, save=None, program=None, data=None)
    setattr(args, dflag, str(d))
    setattr(args, out, str(d / "x.out"))
    with pytest.raises(GdslError, match=rf"--{out} .*x.out: is in the --{dflag} directory {d}, whose files gdsl "
                                        "reads and writes; write it elsewhere"):
        check_outputs(args)
    setattr(args, out, str(tmp_path / "x.out"))
    check_outputs(args)


def test_a_long_legal_output_name_is_written(tmp_path):
    """A 250-character name is legal; the temporary file's name beside it
    was longer than 255 and the write was refused ("File name too long")."""
    from gdsl.runtime.files import check_json_path, write_json
    out = tmp_path / ("r" * 245 + ".json")
    check_json_path(str(out))
    write_json(str(out), {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == [out.name]
