import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parent.parent

import os  # noqa: E402

# Tests price plans on the documented default profile, never on whatever
# `gdsl calibrate` wrote on the machine running them.
os.environ["GDSL_PROFILE"] = str(ROOT / "tests" / "no-such-profile.json")
