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


def pytest_sessionfinish(session, exitstatus):
    if _WARMER is not None and _WARMER.poll() is None:
        _WARMER.kill()
        _WARMER.wait()
