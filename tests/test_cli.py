"""The gdsl command: compile / run / passes, as a user runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from filecheck_runner import run_gdsl
from helpers import interrupt_in_evaluation, random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")
SAGE = str(ROOT / "programs" / "sage.gd")


def test_passes_lists_pipeline_in_order():
    code, out, _ = run_gdsl(["passes"])
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["lower", "inline", "insert-sync", "canonicalize", "fold-edge-constants", "fuse", "order", "mark-invariant", "partition"]


def test_dump_dir_writes_every_stage(tmp_path):
    code, out, err = run_gdsl(["compile", GCN, "--dump-dir", str(tmp_path / "d")])
    assert code == 0, err
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert files == ["00-ast.txt", "01-lower.ir", "02-inline.ir", "03-insert-sync.ir",
                     "04-canonicalize.ir", "05-fold-edge-constants.ir", "06-fuse.ir", "07-order.ir",
                     "08-mark-invariant.ir", "09-partition.ir"]
    assert "edge_const" in (tmp_path / "d" / "05-fold-edge-constants.ir").read_text()
    assert out == ""
    # a directory where a dump goes: named (was: the temporary file beside it; helper-59)
    (tmp_path / "e" / "00-ast.txt").mkdir(parents=True)
    code, _, err = run_gdsl(["compile", GCN, "--dump-dir", str(tmp_path / "e")])
    assert code == 1 and f"gdsl: error: {tmp_path / 'e' / '00-ast.txt'}: is a directory" in err, err
    assert not [p for p in (tmp_path / "e").iterdir() if p.name.startswith(".")]


def test_print_loc_shows_source_positions():
    code, out, _ = run_gdsl(["compile", GCN, "--print-loc"])
    assert code == 0
    assert "gcn.gd:11:19" in out  # the gather (fused into aggregate)


def test_compile_is_deterministic():
    a = run_gdsl(["compile", str(ROOT / "programs" / "gat.gd")])[1]
    b = run_gdsl(["compile", str(ROOT / "programs" / "gat.gd")])[1]
    assert a == b and a


@pytest.mark.parametrize("argv", [
    ["compile"],
    ["compile", GCN, "--emit", "llvm"],
    ["compile", GCN, "--print-ir-after", "nosuchpass"],
    ["run", GCN, "--epochs", "0"],
    ["run", GCN, "--set", "hidden"],
    ["frobnicate"],
])
def test_usage_errors_exit_2(argv, capsys):
    code, _, err = run_gdsl(argv)
    assert code == 2
    assert "Traceback" not in err


def test_set_overrides_static_args():
    code, out, _ = run_gdsl(["compile", GCN, "--set", "hidden=32"])
    assert code == 0 and "f32[F, 32]" in out
    code, _, err = run_gdsl(["compile", GCN, "--set", "nosuch=3"])
    assert code == 1 and "GCN has no static argument 'nosuch'" in err
    # numbers as the language writes them: multiplier suffixes (was: "'2K' is not a number")
    for v, want in (("2K", "2000"), ("+1K", "1000")):
        code, out, err = run_gdsl(["compile", GCN, "--set", f"hidden={v}", "--emit", "ir"])
        assert code == 0 and f"f32[F, {want}]" in out, (v, err)
    code, _, err = run_gdsl(["compile", GCN, "--set", "hidden=1.5K"])   # a float, as in a program
    assert code == 1 and "must be" in err, err
    code, _, err = run_gdsl(["compile", GCN, "--set", "p=-1K"])
    assert code == 1 and "-1000" in err, err   # a value, refused by the program (dropout in [0, 1))
    # ... and only those: was Python's int()/float() (helper-59: `1_6`, Arabic-Indic digits, ' 16 ', inf, nan)
    for bad in ("2k", "2KM", "K", "2 K", "0x10", "1_6", "\u0661\u0666", " 16 ", "inf", "nan", "1e"):
        code, _, err = run_gdsl(["compile", GCN, "--set", f"hidden={bad}"])
        assert code == 2 and f"--set hidden: '{bad}' is not a number" in err, (bad, err)


def test_run_json_and_determinism(tmp_path):
    j1, j2 = tmp_path / "a.json", tmp_path / "b.json"
    for j in (j1, j2):
        code, out, err = run_gdsl(["run", GCN, "--epochs", "5", "--seed", "3", "--json", str(j)])
        assert code == 0, err
        assert "final (epoch 5)" in out and "test_acc" in out
    a, b = json.loads(j1.read_text()), json.loads(j2.read_text())
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    assert len(a["epochs"]) == 5
    assert set(a["epochs"][0]) >= {"epoch", "loss", "train_acc", "val_acc", "test_acc", "time"}
    assert a["final"]["epoch"] == 5 and a["seed"] == 3 and a["model"] == "GCN"
    assert a["split"] == 0 and a["set"] == {}   # (was: neither recorded; helper-70)
    code, _, _ = run_gdsl(["run", GCN, "--epochs", "5", "--seed", "4", "--json", str(j2)])
    assert [e["loss"] for e in json.loads(j2.read_text())["epochs"]] != [e["loss"] for e in a["epochs"]]


def test_run_save_writes_the_trained_params_as_a_state_dict(tmp_path):
    """`gdsl run --save FILE`: the params after the last epoch, loadable into a
    module of the program (weights_only torch.load). Was: a run's trained
    params could not be kept."""
    import warnings

    import torch

    import gdsl
    f = tmp_path / "gcn.pt"
    code, out, err = run_gdsl(["run", GCN, "--epochs", "3", "--seed", "2", "--backend", "reference",
                               "--save", str(f)])
    assert code == 0, err
    assert f"wrote {f} (the params after epoch 3" in err
    saved = torch.load(f)   # weights_only (torch's default)
    prog = gdsl.compile(GCN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = gdsl.train(prog, gdsl.load_graph(None), epochs=3, seed=2, backend="reference")
    want = res.model.state_dict()
    assert list(saved) == list(want)
    for k in want:
        assert torch.equal(saved[k], want[k]), k   # the reference backend is deterministic for a seed
    m = prog.module(gdsl.load_graph(None))
    m.load_state_dict(saved)
    assert float(m.eval()().argmax(1).eq(m.graph.labels).float().mean()) > 0.3
    # an unusable path is refused before training, and nothing is left behind
    for bad, why in ((tmp_path, "is a directory"), (tmp_path / "no" / "f.pt", "no such directory")):
        code, out, err = run_gdsl(["run", GCN, "--epochs", "1", "--save", str(bad)])
        assert code == 1 and f"--save {bad}: {why}" in err and "epoch" not in out, err
    code, _, err = run_gdsl(["run", GCN, "--epochs", "1", "--save", str(f), "--json", str(tmp_path / "." / f.name)])
    assert code == 2 and "--json and --save name the same file" in err   # any spelling of it
    code, _, err = run_gdsl(["run", GCN, "--epochs", "1", "--save", ""])
    assert code == 2 and "--save: empty (give a file to write)" in err
    code, _, err = run_gdsl(["run", GCN, "--epochs", "1", "--save", str(tmp_path / "newdir") + "/"])
    assert code == 1 and "names a directory (ends with '/'; give a file name)" in err
    assert not (tmp_path / "newdir").exists()


def test_a_run_stopped_between_a_step_and_its_evaluation_says_what_it_saved(tmp_path, monkeypatch):
    """Ctrl-C after epoch 3's optimizer step, before its evaluation: --save
    writes the params with that step in them and says so (was: "after epoch
    2", the last reported one)."""
    import torch

    interrupt_in_evaluation(monkeypatch, 3)
    f = tmp_path / "m.pt"
    code, out, err = run_gdsl(["run", GCN, "--epochs", "5", "--backend", "reference", "--save", str(f)])
    assert code == 130 and "final (epoch 2)" in out, err
    assert "the params when stopped: after epoch 3's optimizer step, whose evaluation did not run" in err
    assert set(torch.load(f)) == {"GCNConv_1.W", "GCNConv_1.b", "GCNConv_2.W", "GCNConv_2.b"}


def test_run_minibatch_block_warns_and_trains_full_batch():
    code, out, err = run_gdsl(["run", SAGE, "--epochs", "2", "--set", "hidden=16", "--data", "citeseer"])
    assert code == 0, err
    assert "warning: train block 'products' sets batch_size/fanout" in err
    assert "full-batch" in err


def test_run_unknown_backend_is_a_usage_error():
    code, _, err = run_gdsl(["run", GCN, "--epochs", "1", "--backend", "cuda"])
    assert code == 2 and "invalid choice: 'cuda'" in err


def test_api_unknown_backend_is_a_clear_error():
    import gdsl

    with pytest.raises(gdsl.GdslError, match="unknown backend 'cuda'"):
        gdsl.compile(GCN).module(random_graph(), backend="cuda")


def test_run_program_without_train_block(tmp_path):
    p = tmp_path / "m.gd"
    p.write_text("graph G\ninput X : vertex f32[F]\nlayer L(h: [d]) -> [d] {\n scatter m = src.h\n gather a = sum(m)\n"
                 " return a\n}\nmodel M { return L(X) }\n")
    assert run_gdsl(["compile", str(p)])[0] == 0
    code, _, err = run_gdsl(["run", str(p)])
    assert code == 1 and "no train block" in err


def test_run_with_npz_path(tmp_path):
    import numpy as np

    g = random_graph(n=30, e=90, f=5, c=3)
    path = tmp_path / "small.npz"
    np.savez(path, src=g.src.numpy(), dst=g.dst.numpy(), features=g.features.numpy(), labels=g.labels.numpy(),
             train_mask=g.train_mask.numpy(), val_mask=g.val_mask.numpy(), test_mask=g.test_mask.numpy())
    code, out, err = run_gdsl(["run", GCN, "--data", str(path), "--epochs", "3"])
    assert code == 0, err
    assert "N=30" in err


def test_real_process_exit_codes_and_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = tmp_path / "bad.gd"
    bad.write_text("graph G\nmodel M { return Y }\n")
    r = subprocess.run([sys.executable, "-m", "gdsl", "compile", str(bad)], capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert f"{bad}:2:18: error: undefined name 'Y'" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "gdsl", "compile"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_a_closed_stdout_or_stderr_is_no_internal_error_and_keeps_the_files(tmp_path):
    """Started with descriptor 1 (or 2) closed, Python's sys.stdout is None
    (helper-59: `gdsl passes >&-` was exit 3, "'NoneType' object has no
    attribute 'flush'", and `run` wrote neither --json nor --save)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GDSL_TEST_WARM": "0"}
    gd = f"{sys.executable} -m gdsl"
    for cmd in ("passes", f"compile {GCN}"):
        for closed in (">&-", "2>&-"):
            r = subprocess.run(["bash", "-c", f"{gd} {cmd} {closed}; echo rc=$?"], capture_output=True, text=True,
                               env=env, cwd=tmp_path)
            assert r.stdout.strip().endswith("rc=0") and "internal" not in r.stderr, (cmd, closed, r.stdout, r.stderr)
    r = subprocess.run(["bash", "-c", f"{gd} run {GCN} --backend reference --epochs 1 --json j.json --save m.pt >&-"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "internal" not in r.stderr, r.stderr
    assert json.loads((tmp_path / "j.json").read_text())["epochs"] and (tmp_path / "m.pt").stat().st_size > 0


def test_compile_and_plan_without_data_do_not_import_torch(tmp_path):
    """torch takes a second or more to import; `gdsl compile` (also with
    --dump-dir) and `gdsl plan` (also with --json) without --data do not
    need it (was: imported through the trainer for its file helpers)."""
    root = Path(__file__).resolve().parent.parent
    code = (
        "import sys\n"
        "from gdsl.cli import main\n"
        f"assert main(['compile', {str(root / 'programs' / 'gcn.gd')!r}, '--dump-dir', {str(tmp_path / 'd')!r}]) == 0\n"
        f"assert main(['plan', {str(root / 'programs' / 'gcn.gd')!r}, '--np', '4', '--dims', 'N=1000,E=5000,F=64,C=7',"
        f" '--json', {str(tmp_path / 'p.json')!r}]) == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p.json").exists() and any((tmp_path / "d").iterdir())


def test_set_given_twice_and_late_usage_errors_name_the_command(capsys):
    """Was: `--set hidden=3 --set hidden=4` silently took the later value
    (`--dims` refuses a repeat), and checks made after parsing (`--epochs 0`)
    printed the top-level usage instead of the command's."""
    code, _, err = run_gdsl(["run", GCN, "--set", "hidden=3", "--set", "hidden=4"])
    assert code == 2 and "gdsl run: error: --set gives hidden twice" in err
    code, _, err = run_gdsl(["run", GCN, "--epochs", "0"])
    assert code == 2 and err.startswith("usage: gdsl run ") and "gdsl run: error: --epochs must be at least 1" in err


UNUSED_PARAMS = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param V : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    transform u = h @ V
    sync s = sum(t)
    scatter m = src.s
    gather a = sum(m)
    apply out = a
    return out
}

model M {
    return L[C](relu(L[8](X)))
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
    epochs = 1
}
"""


def test_a_param_the_layer_never_uses_is_a_warning(tmp_path):
    """Was: dropped silently (dead code), so it was missing from
    model.parameters() with no word why. V feeds only a dead transform and b
    nothing; one warning each although L is called twice."""
    import warnings

    import gdsl
    prog_file = tmp_path / "unused.gd"
    prog_file.write_text(UNUSED_PARAMS)
    code, out, err = run_gdsl(["compile", str(prog_file)])
    assert code == 0 and "%loss" in out
    assert err.count("is never used") == 1 and err.count("feeds nothing the layer returns") == 1, err
    assert f"{prog_file}:8:5: warning: param 'V' of layer L feeds nothing the layer returns" in err   # was: never used
    assert f"{prog_file}:9:5: warning: param 'b' of layer L is never used" in err
    assert "   9 |     param b : f32[dout] = zeros" in err
    with pytest.warns(gdsl.GdslWarning) as got:
        prog = gdsl.compile(str(prog_file))
    assert sorted(str(w.message) for w in got) == [
        f"{prog_file}:8:5: param 'V' of layer L feeds nothing the layer returns: it is not a parameter of the model "
        "and is not trained",
        f"{prog_file}:9:5: param 'b' of layer L is never used: it is not a parameter of the model and is not trained"]
    assert all(w.filename == __file__ for w in got)   # points at the user's gdsl.compile call
    with warnings.catch_warnings():
        warnings.simplefilter("error", gdsl.GdslWarning)   # bound once warned: not again
        model = prog.module(random_graph(), backend="reference")
    assert [n for n, _ in model.named_parameters()] == ["L_1.W", "L_2.W"]
    code, _, err = run_gdsl(["run", str(prog_file), "--data", "cora", "--backend", "reference"])
    assert code == 0 and err.count("is not trained") == 2 and "GdslWarning" not in err


def test_a_metric_listed_twice_is_a_warning(tmp_path):
    """Was: reported once without a word (the metrics are keyed by mask)."""
    import gdsl
    text = (ROOT / "programs" / "gcn.gd").read_text()
    old = "eval      = accuracy(mask = val), accuracy(mask = test)"
    assert text.count(old) == 1
    prog_file = tmp_path / "twice.gd"
    prog_file.write_text(text.replace(old, old + ", accuracy(mask = val)"))
    code, out, err = run_gdsl(["compile", str(prog_file)])
    assert code == 0 and f"{prog_file}:30:62: warning: accuracy(mask = val) is listed twice in eval; it is " \
        "reported once" in err, err
    with pytest.warns(gdsl.GdslWarning, match="listed twice in eval"):
        gdsl.compile(str(prog_file))


def test_eval_of_a_model_without_label_target_is_a_warning(tmp_path):
    """bce of float targets: accuracy is not computed, and the eval line says
    so (was: its entries were dropped without a word)."""
    text = (ROOT / "programs" / "gcn.gd").read_text()
    old = "loss      = cross_entropy(Y, mask = train)"
    assert text.count(old) == 1
    prog_file = tmp_path / "recon.gd"
    prog_file.write_text(text.replace(old, "loss      = bce(X, mask = train)")
                         .replace("return GCNConv[C](h)", "return GCNConv[F](h)"))
    code, _, err = run_gdsl(["compile", str(prog_file)])
    assert code == 0 and (f"{prog_file}:30:5: warning: eval is not reported: accuracy compares the predicted class "
                          "with class labels, and the loss's target 'X' is f32, not a label input") in err, err


def test_the_example_programs_compile_without_warnings():
    import warnings

    import gdsl
    with warnings.catch_warnings():
        warnings.simplefilter("error", gdsl.GdslWarning)
        for p in ("gcn", "sage", "gat"):
            gdsl.compile(str(ROOT / "programs" / f"{p}.gd"))


def test_run_header_counts_the_edges_trained_on_and_a_data_file_is_no_program():
    """(helper-70: the header gave the file's E where `gdsl plan` gave the count with the graph options, said
    "1 epochs", and `gdsl run data.npz` said only "input is not UTF-8 text")"""
    code, _, err = run_gdsl(["run", str(ROOT / "programs" / "gat.gd"), "--epochs", "1", "--backend", "reference"])
    assert code == 0 and "(N=2708, E=10556, 13264 with the program's self_loops)" in err and \
        ", 1 epoch\n" in err, err
    code, _, err = run_gdsl(["run", str(ROOT / "gdsl" / "data" / "cora.npz")])
    assert code == 1 and "input is not UTF-8 text (it is a zip archive or .npy array: data? " \
                         "`gdsl run PROGRAM.gd --data FILE`)" in err, err
