"""Regenerate the CHECK lines of golden tests from the current compiler output.

    python tests/update_golden.py tests/filecheck/passes/sync.gd [...]

Each RUN line's `--check-prefix` (default CHECK) gets one block of lines:
the first output line as `P:`, the rest as `P-NEXT:` (blank lines skipped,
the line after a blank as `P:`). The test file's own path becomes `{{.*}}`.
Review the diff: a golden file is only as right as the output it froze.
"""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from filecheck_runner import ROOT, expand, run_gdsl, run_lines  # noqa: E402


def regenerate(path: Path) -> None:
    lines = [ln for ln in path.read_text().splitlines() if not re.match(r"\s*# [A-Z0-9_-]+(-NEXT|-EMPTY)?:", ln) or "RUN:" in ln]
    while lines and not lines[-1].strip():
        lines.pop()
    blocks = []
    for run in run_lines(path):
        cmd, _, fc = run.partition("|")
        words = shlex.split(expand(cmd, path))
        merge = "2>&1" in words
        words = [w for w in words if w not in ("2>&1", "not")]
        code, out, err = run_gdsl(words[1:])
        text = out + (err if merge else "")
        m = re.search(r"--check-prefix[= ](\S+)", fc)
        prefix = m.group(1) if m else "CHECK"
        block, after_blank = [], True
        for ln in text.splitlines():
            if not ln.strip():
                after_blank = True
                continue
            ln = ln.replace(str(path), "{{.*}}").replace(str(ROOT) + "/", "{{.*}}").rstrip()
            block.append(f"# {prefix}{'' if after_blank else '-NEXT'}: {ln.strip() if after_blank else ln}")
            after_blank = False
        blocks.append("\n".join(block))
    path.write_text("\n".join(lines) + "\n\n" + "\n\n".join(blocks) + "\n")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        regenerate(Path(p))
