import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parent.parent

import os  # noqa: E402

# Tests price plans on the documented default profile, never on whatever
# `gdsl calibrate` wrote on the machine running them.
os.environ["GDSL_PROFILE"] = str(ROOT / "tests" / "no-such-profile.json")


# Compile the suite's Numba kernels in one low-priority background process
# while the first tests run (kernel_warmup.py says why).  GDSL_TEST_WARM=0
# turns it off.
_WARMER = None


def pytest_sessionstart(session):
    global _WARMER
    if os.environ.get("GDSL_TEST_WARM", "1") == "0":
        return
    try:
        import numba  # noqa: F401
    except ImportError:
        return
    from kernel_warmup import REQUESTS

    from gdsl.backends.numba.warm import warm_in_background
    _WARMER = warm_in_background(REQUESTS)


def _stop_warmer() -> None:
    if _WARMER is not None and _WARMER.poll() is None:
        _WARMER.kill()
        _WARMER.wait()


def pytest_collection_modifyitems(session, config, items):
    """Tests marked `mpi` run last, in their collected order.  Their ranks
    (2 or 4 on 2 cores) wait for each other in MPI's busy-polling loop,
    which yields the core; any other process then takes it for a whole
    time slice, however low its priority, and the job slows down: the
    kernel warmer at nice 19 made the P = 4 job of test_dist.py take 70 s
    instead of 43.  Run last, they start when the warmer is done (its
    ~190 s of one core fit in the other tests' idle core), and the first of
    them stops it if it is not."""
    items.sort(key=lambda item: item.get_closest_marker("mpi") is not None)   # stable


def pytest_runtest_setup(item):
    if item.get_closest_marker("mpi") is not None:
        _stop_warmer()   # what it compiled stays cached; the rest compiles on first use


def pytest_sessionfinish(session, exitstatus):
    _stop_warmer()
