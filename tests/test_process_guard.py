"""The leftover-process check of conftest.py: live descendants are found, zombies are not, and a
test run that leaves a process behind fails, naming the test, with the process killed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from process_guard import ProcessGuard, live_descendants

HERE = Path(__file__).parent


def test_live_child_is_found_and_a_zombie_is_not():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert proc.pid in live_descendants(os.getpid())
    finally:
        proc.kill()
        deadline = time.time() + 10
        while proc.pid in live_descendants(os.getpid()) and time.time() < deadline:
            time.sleep(0.05)  # killed but not reaped: a zombie, which is not "alive"
        assert proc.pid not in live_descendants(os.getpid())
        proc.wait()


def test_guard_attributes_a_process_to_the_test_it_appeared_after():
    guard = ProcessGuard(os.getpid())
    guard.note("before")
    proc = subprocess.Popen(["sleep", "30"])
    try:
        guard.note("test_that_leaks")
        assert [(pid, test) for pid, _cmd, test in guard.survivors() if pid == proc.pid] == \
            [(proc.pid, "test_that_leaks")]
    finally:
        proc.kill()
        proc.wait()


def test_a_run_that_leaves_a_process_fails(tmp_path):
    for name in ("conftest.py", "process_guard.py"):
        shutil.copy(HERE / name, tmp_path / name)
    marker = tmp_path / "leaked.pid"
    (tmp_path / "test_leak.py").write_text(
        "import subprocess\n"
        "def test_leaks():\n"
        f"    p = subprocess.Popen(['sleep', '300'])\n"
        f"    open({str(marker)!r}, 'w').write(str(p.pid))\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 process(es) left behind by the tests" in run.stdout
    assert "sleep 300" in run.stdout and "test_leak.py::test_leaks" in run.stdout
    pid = int(marker.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1].startswith("Z"), "the leftover was not killed"
