"""helper-10's `gdsl run` findings (session 38): a signal inside the
optimizer's step, the live progress line on terminals (an error glued to it,
narrow terminals, TERM=dumb), an existing --json replaced by an empty
record, `--json -`, and usage errors found late."""
from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

import gdsl
from gdsl.cli import main
from gdsl.runtime import optim
from gdsl.runtime.trainer import EpochStats, Progress, loss_text

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_signal_inside_the_optimizer_step_waits_for_the_whole_step(tmp_path, monkeypatch, capsys):
    """Ctrl-C after the first of GCN's four params was updated at epoch 3:
    was saved as "the params after epoch 2" with GCNConv_1.W a step ahead."""
    calls = {"n": 0}
    update = optim.Adam._update

    def _update(self, p, grad, state, group):
        update(self, p, grad, state, group)
        calls["n"] += 1
        if calls["n"] == 2 * 4 + 1:   # epoch 3, one of 4 params updated
            os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(optim.Adam, "_update", _update)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)   # not an earlier test's SIG_IGN
    saved = tmp_path / "m.pt"
    try:
        assert main(["run", GCN, "--epochs", "5", "--backend", "reference", "--save", str(saved)]) == 130
    finally:
        signal.signal(signal.SIGINT, before)
    err = capsys.readouterr().err
    assert "after epoch 3's optimizer step, whose evaluation did not run" in err, err
    monkeypatch.setattr(optim.Adam, "_update", update)
    want = gdsl.train(gdsl.compile(GCN), gdsl.load_graph("cora"), epochs=3, backend="reference").model.state_dict()
    got = torch.load(saved)
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_signals_held_puts_the_handlers_back_and_raises_what_came():
    from gdsl.runtime.signals import signals_held
    before = signal.signal(signal.SIGINT, signal.default_int_handler)   # Python's own, whatever ran before
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                done = True   # the block ran to its end first
        assert done and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def _stats(epoch, loss=0.5):
    return EpochStats(epoch, loss, {"train_acc": 0.5, "val_acc": 0.25, "test_acc": 0.125}, 0.01)


def test_the_live_line_is_cut_to_the_terminal_and_closed_once(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    monkeypatch.setenv("TERM", "xterm")
    out = _Tty()
    p = Progress(3, stream=out)
    p(_stats(1))
    p(_stats(2))
    for row in out.getvalue().split("\r\033[K")[1:]:
        assert len(row) <= 19, row   # one row: no wrapped rows left behind
    p.close()
    p.close()
    assert out.getvalue().endswith("\n") and not out.getvalue().endswith("\n\n")
    p3 = Progress(1, stream=_Tty())
    p3(_stats(1))
    p3.close()   # the last epoch ended the line already
    assert p3.stream.getvalue().count("\n") == 1


def test_a_columns_value_that_is_no_number_is_ignored(monkeypatch):
    """`"²".isdigit()` is True, int("²") raises (helper-14)."""
    for cols in ("²", "abc", "-5", "0", ""):
        monkeypatch.setenv("COLUMNS", cols)
        monkeypatch.setenv("TERM", "xterm")
        out = _Tty()
        Progress(3, stream=out)(_stats(1))
        assert "epoch 1/3" in out.getvalue()


def test_an_error_inside_the_held_block_wins_over_a_signal():
    """A diverged step while Ctrl-C waits: reported as diverged (was: the signal replaced the error)."""
    from gdsl.runtime.signals import signals_held
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(ValueError, match="diverged"):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                raise ValueError("diverged")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_dumb_terminal_gets_plain_lines(monkeypatch):
    monkeypatch.setenv("TERM", "dumb")
    out = _Tty()
    Progress(2, stream=out)(_stats(1))
    assert "\033" not in out.getvalue() and "\r" not in out.getvalue()


def test_a_diverged_run_starts_its_messages_on_a_new_line(tmp_path, monkeypatch):
    prog = tmp_path / "hot.gd"
    prog.write_text(Path(GCN).read_text().replace("lr = 0.01", "lr = 1e20"))
    monkeypatch.setenv("TERM", "xterm")
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["run", str(prog), "--epochs", "30", "--backend", "reference", "--save", str(tmp_path / "m.pt")]) == 1
    text = err.getvalue()
    assert "\ngdsl: --save" in text and "ms" + "gdsl" not in text.replace("\n", "|"), text


def test_loss_text():
    assert [loss_text(x) for x in (0.0338, 1.9444, 0.0, 2e-5, 1.8e13, float("nan"))] == \
        ["0.0338", "1.9444", "0.0000", "2.0000e-05", "1.8000e+13", "nan"]


def test_a_run_without_an_epoch_keeps_an_existing_json(tmp_path, monkeypatch, capsys):
    from gdsl.api import Program

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(Program, "module", interrupted)
    out = tmp_path / "run.json"
    out.write_text('{"last": "run"}\n')
    assert main(["run", GCN, "--json", str(out)]) == 130
    assert "not written (no epoch completed; the file there is kept)" in capsys.readouterr().err
    assert json.loads(out.read_text()) == {"last": "run"}


@pytest.mark.parametrize("argv, said", [
    (["--json", "-"], "--json -: names a file, not stdout"),
    (["--split", "-1"], "--split must be at least 0, got -1"),
    (["--checkpoint", "ck"], "--checkpoint needs --np P"),
])
def test_usage_errors_come_before_the_program_is_read(tmp_path, capsys, argv, said):
    """A program that does not exist: the usage error wins (exit 2, was 1)."""
    try:
        rc = main(["run", str(tmp_path / "nothere.gd"), *argv])
    except SystemExit as e:   # argparse's usage error
        rc = e.code
    err = capsys.readouterr().err
    assert said in err
    assert rc == (1 if argv[0] == "--json" else 2)
    assert not (tmp_path / "-").exists()
