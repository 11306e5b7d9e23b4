"""Review (helper-24) of the changes since ff3cf08: the Triton online-softmax
-inf fix (helper-21), gdsl.compile's one-word-is-a-path rule and the forward's
keyword refusal (helper-22), the partition writer and the ranks' comparison of
their part files (helper-23), --mem-per-rank with --parts.

Found and fixed: a one-line program over 255 characters was OSError 'File
name too long' in gdsl.compile (the path test; older than the one-word
rule). Under a foreign launcher (`mpiexec -n P gdsl run --parts DIR
--mem-per-rank 4G`) the budget was ignored without a word, while docs/cli.md
says a warning says so (it did only under `gdsl run --np P`).
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import gdsl  # noqa: E402
from test_partition_audit23 import CORA, GCN, _headers, _launch, gdsl as gdsl_in, mpi  # noqa: E402
from test_dist_errors import MPIEXEC  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
INF, NAN = float("inf"), float("nan")


# ------------------------------------------------------------------ gdsl.compile: text or path

@pytest.mark.parametrize("path", sorted((ROOT / "programs").glob("*.gd")), ids=lambda p: p.name)
def test_every_program_text_is_still_source(path):
    """The one-word-is-a-path rule keeps every real program source text: a
    program has whitespace (`graph G`, `model M`), also written with tabs and
    a BOM, on CRLF lines."""
    text = path.read_text()
    want = gdsl.compile(path)
    for t in (text, text.replace(" ", "\t"), "\ufeff" + text, text.replace("\n", "\r\n")):
        prog = gdsl.compile(t)
        assert prog.file == "<input>" and prog.train.model == want.train.model
        assert sorted(prog.checked.inputs) == sorted(want.checked.inputs)


def test_one_word_strings():
    """A word that names an existing file (no .gd) is still read; a missing
    word is FileNotFoundError, with or without .gd; text with a space is
    source."""
    gcn = os.path.relpath(GCN)
    assert gdsl.compile(gcn).train is not None
    with pytest.raises(FileNotFoundError):
        gdsl.compile(gcn[:-3])
    with pytest.raises(gdsl.CompileError, match="declares no model"):
        gdsl.compile("# just a comment")


# ------------------------------------------------------------------ Triton: the online softmax at +-inf, NaN

def _triton():
    pytest.importorskip("triton")
    from gdsl.backends.triton import interpret_mode
    if not interpret_mode() and not torch.cuda.is_available():
        pytest.skip("TRITON_INTERPRET=0 and no CUDA GPU")
    from test_mutation_audit21 import _masked_row, fixed_blocks
    return _masked_row(), fixed_blocks


def _scores(case: str, e: int) -> torch.Tensor:
    s = torch.randn(e, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    if case == "all -inf":          # torch: NaN for the row
        s[:] = -INF
    elif case == "-inf later":      # the first tile finite, the others masked
        s[4:] = -INF
    elif case == "+inf":            # torch: NaN for the row
        s[5] = INF
    elif case == "-inf then +inf":
        s[:4] = -INF
        s[6] = INF
    elif case == "nan":
        s[:4] = -INF
        s[6] = NAN
    return s


CASES = ["all -inf", "-inf later", "+inf", "-inf then +inf", "nan"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", CASES)
def test_edge_softmax_at_infinities_equals_torch(case):
    """Rows whose every edge is -inf, a head that sees -inf only in later
    tiles, +inf and NaN scores, with 4-edge tiles: the values torch's
    softmax gives (NaN where it gives NaN), and the gradients where the
    forward is finite. (The case helper-21 fixed, a finite head after a
    first tile of -inf, is in test_mutation_audit21; these check the fix
    left the other non-finite rows as torch has them.)"""
    gr, fixed_blocks = _triton()
    from gdsl.backends.triton.ops import edge_softmax
    from test_triton_kernels import ref_edge_softmax
    s = _scores(case, gr.e).to(gr.src.device)
    sn, sr = s.clone().requires_grad_(), s.clone().requires_grad_()
    with warnings.catch_warnings(), fixed_blocks(softmax={"BLOCK_E": 4}):
        warnings.simplefilter("ignore")
        got, want = edge_softmax(gr.g, sn), ref_edge_softmax(gr, sr)
        torch.testing.assert_close(got, want, equal_nan=True)
        g = torch.ones_like(s)
        a, = torch.autograd.grad(got, sn, g)
        b, = torch.autograd.grad(want, sr, g)
    torch.testing.assert_close(a, b, equal_nan=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", CASES)
def test_gat_at_infinities_equals_torch(case):
    """The same scores as el of the row's sources (er = 0): gat_aggregate's
    forward equals the softmax-weighted sum torch gives (NaN where torch's
    is), and where the forward is finite, every gradient."""
    gr, fixed_blocks = _triton()
    from gdsl.backends.triton.ops import gat_aggregate
    from test_triton_kernels import ref_gat
    dev = gr.src.device
    el = torch.zeros(gr.n, 1, dtype=torch.float64)
    el[1:11, 0] = _scores(case, gr.e)[:, 0]          # edge i: source i + 1 -> 0
    er = torch.zeros(gr.n, 1, dtype=torch.float64)
    z = torch.randn(gr.n, 1, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ins = [t.to(dev).requires_grad_() for t in (el, er, z)]
    refs = [t.to(dev).requires_grad_() for t in (el, er, z)]
    with warnings.catch_warnings(), fixed_blocks(gat={"BLOCK_E": 4, "BLOCK_F": 8}):
        warnings.simplefilter("ignore")
        got, want = gat_aggregate(gr.g, *ins, 0.2), ref_gat(gr, *refs, 0.2)
        torch.testing.assert_close(got, want, equal_nan=True)
        if want.isnan().any():   # (dz: torch's is NaN for every source of the NaN row, the kernel's
            return               # for the source of the +inf/NaN score only; both train on a NaN loss)
        g = torch.ones_like(want)
        for a, b in zip(torch.autograd.grad(got, ins, g), torch.autograd.grad(want, refs, g)):
            torch.testing.assert_close(a, b)


# ------------------------------------------------------------------ part files: a matching partition is taken

@mpi
def test_a_written_partition_runs_under_mpiexec_and_resumes_with_other_spellings(capsys, tmp_path):
    """`gdsl partition --partition edge_cut` run as `mpiexec -n 2 gdsl run
    --parts DIR --partition "rows(metis)"` (a foreign launcher) and resumed
    by `gdsl run --np 2 --parts DIR --resume CK`: the ranks' comparison of
    their files (plan, graph, dims) takes the one partition. --mem-per-rank
    with that partition is said to be unused under mpiexec too (was: not a
    word there, a warning under `gdsl run --np`)."""
    d, ck = tmp_path / "parts", tmp_path / "ck"
    rc, out, err = gdsl_in(capsys, "partition", GCN, "--data", CORA, "--np", 2, "--partition", "edge_cut",
                           "--out", d)
    assert rc == 0, err
    assert {h["strategy"] for h in _headers(d).values()} == {"rows(metis) halo=alltoallv"}
    r = _launch(MPIEXEC, "-n", "2", sys.executable, "-m", "gdsl.cli", "run", GCN, "--data", str(CORA), "--parts",
                str(d), "--partition", "rows(metis)", "--mem-per-rank", "4G", "--epochs", "2", "--checkpoint",
                str(ck), "--comm-timeout", "60")
    assert r.returncode == 0 and "belongs to another partition" not in r.stderr, r.stderr
    warning = (f"gdsl run: warning: --mem-per-rank 4G is not used: the plan of the partition in {d} was chosen "
               "when it was written")
    assert r.stderr.count(warning) == 1, r.stderr
    r = _launch(sys.executable, "-m", "gdsl.cli", "run", GCN, "--data", str(CORA), "--np", "2", "--parts", str(d),
                "--partition", "edge_cut", "--resume", str(ck), "--epochs", "3", "--comm-timeout", "60")
    assert r.returncode == 0 and "belongs to another partition" not in r.stderr, r.stderr
    assert "gdsl run: resuming after epoch 2" in r.stderr and "final (epoch 3)" in r.stdout, (r.stdout, r.stderr)
    assert "epoch 1/3" not in r.stdout + r.stderr, r.stderr


def test_a_long_one_line_program_is_source():
    """A one-line program of over 255 characters (a long comment, a long
    name): was OSError 'File name too long' from the path test, now compiled
    as the source it is; a long word is still a path."""
    prog = gdsl.compile("model M { return 1 }  # " + "x" * 300)
    assert prog.file == "<input>"
    with pytest.raises(OSError):
        gdsl.compile("programs/" + "x" * 300)
