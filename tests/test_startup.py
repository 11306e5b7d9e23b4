"""gdsl/runtime/startup.py: the cyclic collector held while gdsl's own
process imports, frozen after, and a caller's process left alone."""
import gc
import json
import subprocess
import sys

from gdsl.runtime import startup


def _in_child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_hold_then_release_freezes_what_exists_and_collects_again():
    got = _in_child(
        "import gc, json; from gdsl.runtime import startup\n"
        "startup.hold(); held = gc.isenabled()\n"
        "import torch\n"
        "startup.release()\n"
        "class Cycle: pass\n"
        "c = Cycle(); c.me = c; del c\n"
        "print(json.dumps({'held': held, 'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count(),"
        " 'collected': gc.collect()}))")
    assert got["held"] is False
    assert got["enabled"] is True
    assert got["frozen"] > 100_000   # torch's objects, never walked again
    assert got["collected"] >= 1     # a cycle made after the imports is still collected


def test_a_caller_that_turned_the_collector_off_keeps_it_off():
    got = _in_child(
        "import gc, json; from gdsl.runtime import startup\n"
        "gc.disable(); startup.hold(); startup.release()\n"
        "print(json.dumps({'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count()}))")
    assert got == {"enabled": False, "frozen": 0}


def test_release_without_hold_changes_nothing():
    assert gc.isenabled()
    before = gc.get_freeze_count()
    startup.release()
    assert gc.isenabled() and gc.get_freeze_count() == before


def test_gdsl_run_still_writes_everything_at_exit(tmp_path):
    """The exit freezes what is left: the --json and --save files and the
    last lines are still written whole."""
    js, pt = tmp_path / "r.json", tmp_path / "w.pt"
    out = subprocess.run([sys.executable, "-m", "gdsl", "run", "programs/gcn.gd", "--epochs", "2",
                          "--json", str(js), "--save", str(pt)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "final (epoch 2)" in out.stdout
    assert len(json.loads(js.read_text())["epochs"]) == 2
    import torch
    assert "GCNConv_1.W" in torch.load(pt)
