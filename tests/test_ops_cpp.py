"""The C++ tests of the CPU launchers (cpp/tests, ctest) run from pytest as well."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ctest") is None,
                    reason="cmake/ctest not installed: the C++ tests run only through CMake")
def test_cpp_launcher_tests_pass_under_ctest():
    build = ROOT / "build" / "cpp-pytest"
    tests = sorted(p.stem for p in (ROOT / "cpp" / "tests").glob("*.cpp"))
    assert tests, "no C++ tests found under cpp/tests"

    def run(*cmd):
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return proc.stdout

    run("cmake", "-S", "cpp", "-B", str(build), "-DCMAKE_BUILD_TYPE=Release")
    run("cmake", "--build", str(build), "-j2", "--target", *tests)  # the CPU core and its tests only
    out = run("ctest", "--test-dir", str(build), "--output-on-failure")
    assert f"0 tests failed out of {len(tests)}" in out, out
