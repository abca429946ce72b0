"""The tracked tree carries no unresolved merge: no git conflict markers in any tracked text file."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(rb"^(<{7} |>{7} |={7}$)", re.M)


def tracked_text_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    return [ROOT / n.decode() for n in names if n and not n.endswith((b".safetensors", b".png", b".onnx"))]


def test_no_conflict_markers_in_tracked_files():
    bad = []
    for path in tracked_text_files():
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue   # binary
        m = MARKER.search(data)
        if m:
            line = data[: m.start()].count(b"\n") + 1
            bad.append(f"{path.relative_to(ROOT)}:{line}")
    assert not bad, f"git conflict markers in: {', '.join(bad)}"


def test_the_marker_pattern_finds_a_conflict():
    sample = b"a\n<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> branch\n"
    assert len(MARKER.findall(sample)) == 3 and MARKER.search(b"a = '=' * 7\n") is None
