"""Every GPU check of tools/gpu_check.sh dry-run on the CPU, in one process (torch imported once).

Where no GPU exists each GPU check's own code still runs, on CPU tensors and tiny sizes, so that
none of it rots unseen: the cuda tests are collected (and, unless --sizes smoke, run CPU against
CPU), the sanitizer drivers run their cases on the
CPU ops (bad data must raise there), the timing code times the CPU ops, the runtime check compares
the CPU with itself, and bench_recipe.py / ``trtspec profile`` run a one-point grid. Each GPU check's
result is ``skipped: no GPU`` with the dry run's outcome as its figure, or ``fail`` when the dry
run broke (the check's code is wrong, whatever the GPU would say).

    python3 tools/gpu_check/cpu_dry_run.py --results DIR --logs DIR [--tools memcheck,racecheck] [--sizes smoke]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "benchmarks"))

from result import write_result  # noqa: E402

NO_GPU = "skipped: no GPU"


@contextlib.contextmanager
def logged(logs: Path, name: str):
    """Send stdout/stderr of the block to ``logs/<name>.log``; yields a dict the block may fill."""
    buf = io.StringIO()
    state: dict = {}
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            yield state
        except Exception as e:  # noqa: BLE001  (a broken dry run becomes that check's failure)
            traceback.print_exc()
            state["error"] = f"{type(e).__name__}: {e}"
    (logs / f"{name}.log").write_text(buf.getvalue(), encoding="utf-8")


def dry_result(results, check, figure, error=None, detail=None, seconds=None):
    if error:
        write_result(results, check, "fail", f"cpu dry-run failed: {error}"[:400], detail, seconds)
    else:
        write_result(results, check, NO_GPU, f"cpu dry-run: {figure}", detail, seconds)


def pytest_dry_run(results, logs, run: bool):
    """Collect the cuda tests; with ``run``, also run them CPU against CPU (the test file's own dry
    run, TRTSPEC_CUDA_TEST_DEVICE=cpu) in a subprocess, so that the variable is read at import."""
    import subprocess

    import pytest

    from steps import cuda_test_files, junit_counts

    class Count:
        items = 0

        def pytest_collection_finish(self, session):
            Count.items = len(session.items)

    t0 = time.perf_counter()
    files = cuda_test_files()
    names = ", ".join(Path(f).name for f in files)
    with logged(logs, "pytest_cuda") as st:
        rc = pytest.main(["--collect-only", "-q", "-m", "cuda", "-p", "no:cacheprovider", *files], plugins=[Count()])
        if rc != 0:
            raise RuntimeError(f"pytest --collect-only exited {rc}")
        st["figure"] = f"{Count.items} cuda tests collected from {names}"
        if run:
            xml = logs / "pytest_cuda_cpu.xml"
            proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider",
                                   f"--junitxml={xml}", *files], cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, "TRTSPEC_CUDA_TEST_DEVICE": "cpu"})
            print(proc.stdout[-20000:], proc.stderr[-5000:])
            c = junit_counts(xml)
            bad = c["failures"] + c["errors"]
            st["figure"] = (f"{names} run CPU against CPU (TRTSPEC_CUDA_TEST_DEVICE=cpu): "
                            f"{c['tests'] - c['skipped'] - bad} passed, {bad} failed, {c['skipped']} skipped")
            if proc.returncode != 0 or bad:
                raise RuntimeError(st["figure"] + "; first: " + ", ".join(c["failed"][:3]))
    dry_result(results, "pytest.cuda", st.get("figure"), st.get("error"), {"files": files}, time.perf_counter() - t0)


def sanitizer_drivers(results, logs, tools, sizes):
    from cases import Driver
    from run_sanitizer import OPS, verdict

    t0 = time.perf_counter()
    runs = []
    for op in OPS:
        with logged(logs, f"sanitizer_{op}") as st:
            mod = importlib.import_module(f"sanitize_{op}")
            d = Driver(op, "cpu", sizes)
            mod.run(d)
            st["report"] = {"op": op, "cases": len(d.cases), "failures": d.failures}
        report = st.get("report") or {"op": op, "cases": 0, "failures": [st.get("error", "crashed")]}
        runs.append({"op": op, "tool": None, "rc": 0, "errors": None, "driver": report})
    status, figure = verdict(runs, sanitized=False)
    for tool in tools:
        if status != "fail":
            write_result(results, f"sanitizer.{tool}", NO_GPU, f"cpu dry-run: {figure}", {"runs": runs},
                         time.perf_counter() - t0)
        else:
            write_result(results, f"sanitizer.{tool}", "fail", f"cpu dry-run of the drivers: {figure}", {"runs": runs})


def runtime(results, logs):
    import runtime_check

    t0 = time.perf_counter()
    with logged(logs, "runtime") as st:
        out = runtime_check.run("cpu", 4, ("plain", "draft_model D=4"), runtime_check.PROMPTS[:1])
        ok, figure = runtime_check.verdict(out)
        st.update(out=out, figure=figure, error=None if ok else f"cpu against cpu differs: {figure}")
    dry_result(results, "runtime.greedy", f"(cpu vs cpu) {st.get('figure')}", st.get("error"), st.get("out"),
               time.perf_counter() - t0)


def timing(results, logs):
    import flashinfer_check
    import time_ops

    with logged(logs, "timing") as st:
        if time_ops.main(["--device", "cpu", "--results", str(results)]) != 0:
            raise RuntimeError("time_ops.py --device cpu failed")
    if st.get("error"):
        dry_result(results, "timing.ops", "", st["error"])
    with logged(logs, "flashinfer"):
        flashinfer_check.main(["--results", str(results)])


def bench_recipe(results, logs, work):
    import bench_recipe as br

    from steps import bench_recipe_figure

    t0 = time.perf_counter()
    out = work / "bench_recipe"
    with logged(logs, "bench_recipe") as st:
        rc = br.main(["--device", "cpu", "--sweep", "0..1", "--batch", "1", "--prompts", "2", "--max-new-tokens", "4",
                      "--repeats", "1", "--out", str(out)])
        if rc != 0:
            raise RuntimeError(f"bench_recipe.py exited {rc}")
        st["figure"] = bench_recipe_figure(json.loads((out / "sweep.json").read_text(encoding="utf-8")))
    dry_result(results, "bench_recipe", st.get("figure"), st.get("error"), None, time.perf_counter() - t0)


def profile(results, logs, work):
    from steps import profile_figure

    from trtspec.cli import main as cli

    t0 = time.perf_counter()
    dest = work / "cost_table.json"
    with logged(logs, "profile") as st:
        cli(["profile", "--device", "cpu", "--batch", "1", "--tokens", "1,2", "--warmup", "0", "--repeats", "1",
             "--out", str(dest)], standalone_mode=False)
        st["figure"] = profile_figure(json.loads(dest.read_text(encoding="utf-8")))
    dry_result(results, "profile", st.get("figure"), st.get("error"), None, time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--work", default=None, help="scratch directory (default: --logs)")
    ap.add_argument("--tools", default="memcheck,racecheck")
    ap.add_argument("--sizes", default="smoke", choices=["smoke", "quick", "full"])
    args = ap.parse_args(argv)
    results, logs = Path(args.results), Path(args.logs)
    work = Path(args.work) if args.work else logs
    for p in (results, logs, work):
        p.mkdir(parents=True, exist_ok=True)
    import torch

    import trtspec.ops  # noqa: F401  (the CPU build of trtspec._C)

    cpu_ops = "trtspec._C imports; torch.ops.trtspec runs on CPU tensors" if torch.ops.trtspec.tree_metadata(
        torch.tensor([[-1, 0]], dtype=torch.int32), None) else "?"
    write_result(results, "build.extension", NO_GPU, f"the installed CPU build is used: {cpu_ops}")
    pytest_dry_run(results, logs, run=args.sizes != "smoke")
    sanitizer_drivers(results, logs, [t for t in args.tools.split(",") if t], args.sizes)
    runtime(results, logs)
    timing(results, logs)
    profile(results, logs, work)
    bench_recipe(results, logs, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
