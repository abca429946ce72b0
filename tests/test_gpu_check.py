"""tools/gpu_check.sh in its no-GPU mode, so that the prepared GPU run cannot rot where no GPU exists.

The script runs with ``--cpu-smoke --emulate-image``: every GPU check must say ``skipped: no GPU``
while its own code runs on the CPU (cpu_dry_run.py), with the packages that the GPU machine's image
lacks hidden (tools/gpu_check/h200_image.yaml), and the summary table must come last. Plus the
helpers' own contracts (results, summary order, setup.py's flags, the sanitizer verdict, junit).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools" / "gpu_check"
sys.path.insert(0, str(TOOLS))

import compile_check  # noqa: E402
import run_sanitizer  # noqa: E402
import steps  # noqa: E402
import summary  # noqa: E402
from result import write_result  # noqa: E402

GPU_CHECKS = ["build.extension", "pytest.cuda", "sanitizer.memcheck", "sanitizer.racecheck", "runtime.greedy",
              "timing.ops", "timing.flashinfer", "profile", "bench_recipe"]


def _script(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPU_CHECK_HIDE")}
    env["PYTHON"] = sys.executable
    return subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check_out")
    proc = _script("--cpu-smoke", "--emulate-image", "--out", str(out))
    data = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else None
    return proc, out, data


@pytest.mark.slow
def test_cpu_smoke_passes_and_prints_the_summary_table_last(smoke):
    proc, _, data = smoke
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("gpu_check summary (cpu mode"))
    table = lines[start:]
    assert table[1].split() == ["check", "status", "figure"]
    names = [line.split()[0] for line in table[3:] if line and not line.startswith(" ")]
    assert names == [r["check"] for r in data["checks"]]  # nothing printed after the table


@pytest.mark.slow
def test_every_gpu_check_says_skipped_no_gpu_after_its_cpu_dry_run(smoke):
    _, _, data = smoke
    assert data["format"] == "trtspec.gpu_check/v1" and data["mode"] == "cpu" and data["ok"]
    rows = {r["check"]: r for r in data["checks"]}
    assert set(GPU_CHECKS) <= set(rows)
    for check in GPU_CHECKS:
        assert rows[check]["status"] == "skipped: no GPU", rows[check]
    for check in set(GPU_CHECKS) - {"build.extension", "timing.flashinfer"}:
        assert rows[check]["figure"].startswith("cpu dry-run: "), rows[check]
    assert re.search(r"5 ops, (\d+) cases: drivers ok", rows["sanitizer.memcheck"]["figure"])
    assert int(re.search(r"(\d+) cases", rows["sanitizer.memcheck"]["figure"]).group(1)) >= 50
    assert re.search(r"[1-9]\d* cuda tests collected", rows["pytest.cuda"]["figure"])
    assert "2/2 greedy configs equal" in rows["runtime.greedy"]["figure"]
    assert "planner/best throughput B=1" in rows["bench_recipe"]["figure"]
    for check in ("build.nvcc", "build.bindings"):
        assert rows[check]["status"] == "skipped: --cpu-smoke"


@pytest.mark.slow
def test_emulated_image_hides_the_packages_no_check_needs(smoke):
    _, _, data = smoke
    deps = next(r for r in data["checks"] if r["check"] == "deps")
    assert deps["status"] == "pass"
    absent = deps["figure"].split("absent, needed by no check: ")[1].split(";")[0].split(", ")
    assert {"pydantic", "modelopt", "onnxruntime_extensions", "tritonclient"} <= set(absent)


@pytest.mark.slow
def test_out_holds_what_a_gpu_run_can_bring_back(smoke):
    _, out, data = smoke
    files = sorted(p.name for p in out.iterdir())
    assert all(p.is_file() for p in out.iterdir()) and len(files) <= 8, files
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files), files
    assert {"gpu_check.log", "summary.json", "logs.tar.gz"} <= set(files)
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {f"results/{r['check']}.json" for r in data["checks"]} <= names


def test_bad_arguments_are_refused_before_any_work():
    for args, word in ((["--budget", "soon"], "--budget"), (["--frobnicate"], "--frobnicate")):
        proc = _script(*args, timeout=60)
        assert proc.returncode == 2 and word in proc.stderr, proc.stderr


def test_result_status_must_be_pass_fail_or_skipped_with_a_reason(tmp_path):
    write_result(tmp_path, "a.b", "skipped: no GPU", "-")
    assert json.loads((tmp_path / "a.b.json").read_text())["status"] == "skipped: no GPU"
    for bad in ("ok", "skipped", "skipped:  ", "pass: yes"):
        with pytest.raises(ValueError, match="skipped: <reason>"):
            write_result(tmp_path, "c", bad, "-")
    with pytest.raises(ValueError, match="plain name"):
        write_result(tmp_path, "../c", "pass", "-")


def test_summary_orders_the_checks_and_fails_when_one_failed(tmp_path, capsys):
    res = tmp_path / "res"
    write_result(res, "bench_recipe", "pass", "ratio 1.0")
    write_result(res, "zzz.extra", "pass", "x")
    write_result(res, "env", "pass", "H200")
    write_result(res, "pytest.cuda", "fail", "2 failed")
    assert summary.main([str(res), str(tmp_path / "out")]) == 1
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["check"] for r in data["checks"]] == ["env", "pytest.cuda", "bench_recipe", "zzz.extra"]
    assert data["counts"] == {"pass": 3, "fail": 1, "skipped": 0} and not data["ok"]
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("zzz.extra")


def test_compile_check_reads_the_cuda_flags_from_setup_py():
    flags = compile_check.setup_flags()
    assert ("TRTSPEC_WITH_CUDA", "1") in flags["defines"]
    assert "--expt-relaxed-constexpr" in flags["nvcc"] and "-ffp-contract=off" in flags["cxx"]
    home = compile_check.cuda_home()
    if home is None:
        pytest.skip("no CUDA toolkit headers here")
    cmd = compile_check.nvcc_command(ROOT / "cpp/src/verify_greedy_cuda.cu", Path("x.o"), flags, home)
    assert "-gencode=arch=compute_90,code=sm_90" in cmd and "-DTRTSPEC_WITH_CUDA=1" in cmd
    assert all(f in cmd for f in flags["nvcc"])


def test_sanitizer_verdict_fails_on_errors_driver_failures_and_missing_reports():
    ok_run = {"op": "a", "tool": "memcheck", "rc": 0, "errors": 0, "driver": {"cases": 3, "failures": []}}
    assert run_sanitizer.verdict([ok_run], sanitized=True) == ("pass", "1 ops, 3 cases: 0 sanitizer errors")
    bad = [dict(ok_run, errors=2, rc=99), dict(ok_run, op="b", driver={"cases": 1, "failures": ["x"]}),
           dict(ok_run, op="c", driver=None, errors=None, rc=-11)]
    status, figure = run_sanitizer.verdict(bad, sanitized=True)
    assert status == "fail" and "a: 2 sanitizer errors" in figure and "b: 1 failed cases" in figure
    assert "c: no report" in figure
    late = dict(ok_run, op="d", not_run=True, driver=None, errors=None, rc=None)
    assert run_sanitizer.verdict([ok_run, late], sanitized=True)[0] == "skipped: time budget spent before d ran"
    assert run_sanitizer.verdict([bad[0], late], sanitized=True)[0] == "fail"
    assert run_sanitizer.SUMMARY.findall("========= ERROR SUMMARY: 0 errors\n") == ["0"]


def test_junit_counts_reads_pytest_reports(tmp_path):
    (tmp_path / "test_x.py").write_text("import pytest\ndef test_a(): pass\ndef test_b(): assert 0\n"
                                        "@pytest.mark.skip('no')\ndef test_c(): pass\n")
    xml = tmp_path / "r.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    str(tmp_path / "test_x.py")], cwd=tmp_path, capture_output=True, timeout=120)
    c = steps.junit_counts(xml)
    assert (c["tests"], c["failures"], c["errors"], c["skipped"]) == (3, 1, 0, 1)
    assert c["failed"] == ["test_x::test_b"]


def test_cuda_test_files_are_the_ones_with_the_marker():
    files = steps.cuda_test_files()
    assert "tests/test_ops_cuda.py" in files and "tests/test_gpu_check.py" not in files  # names it, marks nothing
    assert steps.CUDA_MARK.search("import pytest\n\n@pytest.mark.cuda\ndef test_x(): pass\n")
    assert not steps.CUDA_MARK.search('x = "pytest.mark.cuda"\n')


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_wheels_script_refuses_an_unknown_group():
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check_wheels.sh"), "--only", "nosuch"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode != 0 and "unknown group 'nosuch'" in proc.stderr


STAND_IN = '''#!{python}
"""Stands in for compute-sanitizer to test run_sanitizer.py's own logic (nothing is checked here):
rejects --kernel-name like an older release, else runs the wrapped command and prints a summary."""
import subprocess, sys
args = sys.argv[1:]
if "--kernel-name" in args:
    print("Error: unrecognized option '--kernel-name'", file=sys.stderr)
    sys.exit(3)
while args and args[0].startswith("--"):
    args = args[2:]
rc = subprocess.call(args)
print("========= ERROR SUMMARY: {errors} errors")
sys.exit(99 if {errors} else rc)
'''


@pytest.mark.parametrize("errors", [0, 2])
def test_run_sanitizer_drops_a_rejected_kernel_filter_and_counts_the_summary(tmp_path, errors):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(STAND_IN.format(python=sys.executable, errors=errors))
    fake.chmod(0o755)
    run = run_sanitizer.run_one(str(fake), "memcheck", "verify_block", "smoke", "cpu", tmp_path, 300)
    log = Path(run["log"]).read_text()
    assert "[--kernel-name rejected; rerunning without it]" in log and "--kernel-name" not in log.splitlines()[0]
    assert run["errors"] == errors and run["driver"]["cases"] > 0 and not run["driver"]["failures"]
    status, figure = run_sanitizer.verdict([run], sanitized=True, control={"detected": True, "note": "planted ok"})
    assert status == ("pass" if errors == 0 else "fail") and "planted ok" in figure
    status, figure = run_sanitizer.verdict([run], sanitized=True, control={"detected": False, "note": "NOT reported"})
    assert status == "fail" and "clean runs prove nothing" in figure
