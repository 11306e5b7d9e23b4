"""gdsl/runtime/memory.py: the data-size cap `gdsl run` sets (what it adds
up, which limit wins, when it leaves the limit alone) and the release hooks.
The process's real limit is never changed here: `resource.setrlimit` is
replaced by a recorder."""
from __future__ import annotations

import resource

import pytest

from gdsl.runtime import memory

GiB = 2 ** 30


@pytest.fixture
def machine(monkeypatch):
    """A fake machine: this process uses 1000 KiB of data, 8 GiB available
    plus 1 GiB of free swap, no cgroup limit, no rlimit; setrlimit recorded."""
    state = {"status": {"VmData": 1000}, "meminfo": {"MemAvailable": 8 * GiB // 1024, "SwapFree": GiB // 1024},
             "room": None, "limits": (resource.RLIM_INFINITY, resource.RLIM_INFINITY), "set": []}

    def meminfo(path, keys):
        return dict(state["status"] if path == "/proc/self/status" else state["meminfo"])
    monkeypatch.setattr(memory, "_meminfo_kib", meminfo)
    monkeypatch.setattr(memory, "_cgroup_headroom", lambda: state["room"])
    monkeypatch.setattr(resource, "getrlimit", lambda which: state["limits"])
    monkeypatch.setattr(resource, "setrlimit", lambda which, lim: state["set"].append((which, lim)))
    return state


def test_the_cap_is_what_the_process_uses_plus_memory_and_free_swap(machine):
    cap = memory.cap_data_to_available()
    assert cap == 1000 * 1024 + 9 * GiB
    assert machine["set"] == [(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY))]


def test_a_containers_limit_lowers_the_cap(machine):
    machine["room"] = 2 * GiB
    assert memory.cap_data_to_available() == 1000 * 1024 + 2 * GiB
    machine["room"] = 20 * GiB              # a limit above the machine's memory does not raise it
    assert memory.cap_data_to_available() == 1000 * 1024 + 9 * GiB


def test_a_lower_soft_limit_is_kept_and_the_hard_limit_bounds_the_cap(machine):
    machine["limits"] = (GiB, resource.RLIM_INFINITY)          # already lower: left alone
    assert memory.cap_data_to_available() is None and machine["set"] == []
    machine["limits"] = (100 * GiB, 100 * GiB)                  # higher: lowered to the cap
    assert memory.cap_data_to_available() == 1000 * 1024 + 9 * GiB
    machine["limits"] = (resource.RLIM_INFINITY, 4 * GiB)       # the hard limit is the most it may be
    assert memory.cap_data_to_available() == 4 * GiB
    assert machine["set"][-1] == (resource.RLIMIT_DATA, (4 * GiB, 4 * GiB))


def test_available_given_replaces_the_measurement(machine):
    assert memory.cap_data_to_available(600 * 2 ** 20) == 1000 * 1024 + 600 * 2 ** 20
    machine["meminfo"] = {}                                     # no /proc/meminfo: no cap
    assert memory.cap_data_to_available() is None


def test_a_release_hook_registered_twice_runs_once(monkeypatch):
    monkeypatch.setattr(memory, "_DROPS", [])
    calls = []

    def drop():
        calls.append(1)
    memory.on_release(drop)
    memory.on_release(drop)
    memory.release_free_heap()
    assert calls == [1]
