"""gdsl/runtime/signals.py, in this process (no subprocess): which signal
raises what, only the first one, ignored signals stay ignored, and the
handlers are given back afterwards."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from gdsl.runtime.signals import Terminated, stop_on_signals


@pytest.fixture
def own_handlers():
    """The handlers before the test, restored after it whatever it did; in
    between, each signal has a handler that does nothing (were gdsl's not
    installed, the signal would not end pytest)."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, _nothing)
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def _nothing(signum, frame):
    pass


def _send(sig):
    os.kill(os.getpid(), sig)
    for _ in range(1000):   # the handler runs in the main thread between bytecodes
        pass


@pytest.mark.parametrize("sig, exc", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated),
                                      (signal.SIGHUP, Terminated)], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_each_signal_raises_its_exception(own_handlers, sig, exc):
    with pytest.raises(exc) as e:
        with stop_on_signals():
            _send(sig)
    if exc is Terminated:
        assert e.value.signum == sig and e.value.name == signal.Signals(sig).name


def test_only_the_first_signal_stops_the_run(own_handlers):
    """A second SIGTERM (or Ctrl-C) while the run stops is ignored: the
    cleanup after the first one is not cut short."""
    stopped = []
    with stop_on_signals():
        try:
            _send(signal.SIGTERM)
        except Terminated:
            stopped.append(1)
        _send(signal.SIGTERM)      # ignored
        _send(signal.SIGINT)       # ignored too
        stopped.append(2)
    assert stopped == [1, 2]


def test_an_ignored_signal_stays_ignored_and_handlers_are_restored(own_handlers):
    """Under nohup SIGHUP is ignored: gdsl keeps it so. The handlers in
    place before are back once the run ends."""
    def mine(signum, frame):
        pass
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, mine)
    with stop_on_signals():
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not mine
        _send(signal.SIGHUP)       # nothing happens
    assert signal.getsignal(signal.SIGTERM) is mine and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


def test_outside_the_main_thread_nothing_is_installed(own_handlers):
    before = signal.getsignal(signal.SIGTERM)
    seen, errors = [], []

    def body():
        try:
            with stop_on_signals():
                seen.append(signal.getsignal(signal.SIGTERM))
        except Exception as e:   # signal.signal outside the main thread raises ValueError
            errors.append(e)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert errors == [] and seen == [before]
