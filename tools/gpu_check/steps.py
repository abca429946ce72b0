"""The GPU steps of tools/gpu_check.sh that wrap a project command: build, pytest, bench_recipe, profile.

Each runs its command (output to ``<logs>/<step>.log``), reads what the command wrote and records
one result (see result.py)::

    python3 tools/gpu_check/steps.py build        --results R --logs L [--jobs N]
    python3 tools/gpu_check/steps.py pytest       --results R --logs L
    python3 tools/gpu_check/steps.py bench_recipe --results R --logs L --out O [--quick] [--device cuda]
    python3 tools/gpu_check/steps.py profile      --results R --logs L --out O [--quick] [--device cuda]
    python3 tools/gpu_check/steps.py probe        # exit 0 when trtspec._C runs on a CUDA tensor

build: ``pip install --no-deps --no-build-isolation --no-index -e .`` with TORCH_CUDA_ARCH_LIST=9.0
(no network: only the machine's torch, setuptools and nvcc), falling back to ``setup.py build_ext
--inplace``; passes when ``torch.ops.trtspec`` then runs on a CUDA tensor. pytest: ``pytest -m cuda``
over the test files that carry the marker; passes when some tests ran and none failed. bench_recipe:
``benchmarks/bench_recipe.py --device cuda`` (planner versus swept D), figure the planner's throughput
ratio per batch size against the goal. profile: ``trtspec profile --device cuda``, the cost table saved
as ``<out>/cost_table.json``. ``--device cpu`` (bench_recipe, profile) runs tiny grids on the CPU:
a dry run, its result ``skipped: no GPU`` (or ``fail`` if the command broke).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from result import write_result  # noqa: E402

CUDA_PROBE = ("import torch, trtspec.ops; "
              "torch.ops.trtspec.tree_metadata(torch.tensor([[-1, 0]], dtype=torch.int32, device='cuda'), None); "
              "torch.cuda.synchronize(); print('trtspec._C runs on', torch.cuda.get_device_name())")
TRTSPEC_CLI = "from trtspec.cli import main; main()"


def run_logged(cmd: list[str], log: Path, env: dict | None = None, timeout: float | None = None) -> tuple[int, float]:
    """Run ``cmd`` in the repository root, appending its output to ``log``; (exit code, seconds)."""
    t0 = time.perf_counter()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        f.write(f"[exit {rc}, {time.perf_counter() - t0:.1f} s]\n")
    return rc, time.perf_counter() - t0


def _tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(encoding="utf-8", errors="replace").strip().splitlines() if log.is_file() else []
    return " | ".join(t.strip() for t in text[-lines:])[-300:]


def build(args) -> tuple[str, str, dict]:
    log = Path(args.logs) / "build.log"
    env = {"TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": str(args.jobs), "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    from compile_check import cuda_home

    home = cuda_home()
    if home is not None and not os.environ.get("CUDA_HOME"):
        env["CUDA_HOME"] = str(home)  # torch.utils.cpp_extension builds the CUDA sources only when it finds nvcc
    py = sys.executable
    rc, s1 = run_logged([py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-e", "."],
                        log, env)
    how, total = "pip install --no-deps --no-build-isolation -e .", s1
    if rc != 0:
        rc, s2 = run_logged([py, "setup.py", "build_ext", "--inplace"], log, env)
        how, total = "setup.py build_ext --inplace (pip -e failed)", s1 + s2
    probe_rc, _ = run_logged([py, "-c", CUDA_PROBE], log)
    detail = {"method": how, "seconds": round(total, 1), "arch": "sm_90", "rc": rc, "probe_rc": probe_rc}
    if rc != 0:
        return "fail", f"build failed (rc {rc}): {_tail(log)}", detail
    if probe_rc != 0:
        return "fail", f"built, but trtspec._C does not run on CUDA: {_tail(log)}", detail
    return "pass", f"trtspec._C with CUDA kernels for sm_90 in {total:.0f} s ({how})", detail


CUDA_MARK = re.compile(r"^(pytestmark\s*=.*\bpytest\.mark\.cuda\b|\s*@pytest\.mark\.cuda\b)", re.M)


def cuda_test_files() -> list[str]:
    """The test files that mark tests (or the whole module) ``cuda``."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if CUDA_MARK.search(p.read_text(encoding="utf-8")))


def junit_counts(path: Path) -> dict:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}
    counts["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in root.iter("testcase")
                        if c.find("failure") is not None or c.find("error") is not None][:10]
    return counts


def pytest_step(args) -> tuple[str, str, dict]:
    log, xml = Path(args.logs) / "pytest_cuda.log", Path(args.logs) / "pytest_cuda.xml"
    files = cuda_test_files()
    rc, seconds = run_logged([sys.executable, "-m", "pytest", "-m", "cuda", *files, "-q", "-rfEs",
                              "-p", "no:cacheprovider", f"--junitxml={xml}"], log)
    if not xml.is_file():
        return "fail", f"pytest wrote no report (rc {rc}): {_tail(log)}", {"files": files, "rc": rc}
    c = junit_counts(xml)
    ran = c["tests"] - c["skipped"]
    bad = c["failures"] + c["errors"]
    figure = (f"{ran - bad} passed, {bad} failed, {c['skipped']} skipped of {c['tests']} in {seconds:.0f} s "
              f"({', '.join(Path(f).name for f in files)})")
    if c["failed"]:
        figure += "; first failures: " + ", ".join(c["failed"][:3])
    status = "pass" if rc == 0 and bad == 0 and ran > 0 else "fail"
    return status, figure, {"files": files, "rc": rc, **c}


def bench_recipe_figure(sweep: dict) -> str:
    goal = sweep.get("goal_ratio", 0.95)
    parts, below = [], []
    for v in sweep["verdicts"]:
        r = v["ratios"]["planner"]
        parts.append(f"B={v['batch']}: D={v['choices']['planner']} vs best {v['best_d']} "
                     + ("n/a" if r is None else f"{r:.3f}"))
        if r is not None and r < goal:
            below.append(str(v["batch"]))
    verdict = f"goal {goal} met" if not below else f"below goal {goal} at B={','.join(below)}"
    return f"planner/best throughput {'; '.join(parts)} ({verdict}); mean AL at max D {sweep['mean_al_at_max_d']:.2f}"


def bench_recipe(args) -> tuple[str, str, dict]:
    log, out = Path(args.logs) / "bench_recipe.log", Path(args.work) / "bench_recipe"
    cmd = [sys.executable, "benchmarks/bench_recipe.py", "--device", args.device, "--out", str(out)]
    if args.device == "cpu":
        cmd += ["--sweep", "0..1", "--batch", "1", "--prompts", "2", "--max-new-tokens", "4", "--repeats", "1"]
    elif args.quick:
        cmd += ["--sweep", "0..5", "--batch", "1,8", "--prompts", "24", "--max-new-tokens", "24", "--repeats", "2"]
    rc, seconds = run_logged(cmd, log)
    path = out / "sweep.json"
    if rc != 0 or not path.is_file():
        return "fail", f"bench_recipe.py failed (rc {rc}): {_tail(log)}", {"rc": rc}
    sweep = json.loads(path.read_text(encoding="utf-8"))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bench_recipe.json").write_text(json.dumps(sweep, indent=2) + "\n", encoding="utf-8")
    return "pass", f"{bench_recipe_figure(sweep)}; {seconds:.0f} s", {"rc": rc, "seconds": seconds,
                                                                      "device": sweep.get("device")}


def profile_figure(table: dict) -> str:
    target, draft = table["target"], table.get("draft", {})
    b0 = min(target, key=int)
    row = target[b0]
    t1, tmax = min(row, key=int), max(row, key=int)
    d = draft.get(b0, {}).get("1")
    return (f"{len(target)} batch sizes x {len(row)} token counts on {table['device']}: target B={b0} "
            f"{1e3 * row[t1]:.2f} ms ({t1} token) .. {1e3 * row[tmax]:.2f} ms ({tmax} tokens)"
            + (f", draft token {1e3 * d:.2f} ms" if d else ""))


def profile(args) -> tuple[str, str, dict]:
    log = Path(args.logs) / "profile.log"
    dest = Path(args.out or args.work) / "cost_table.json"
    cmd = [sys.executable, "-c", TRTSPEC_CLI, "profile", "--device", args.device, "--out", str(dest)]
    if args.device == "cpu":
        cmd += ["--batch", "1", "--tokens", "1,2", "--warmup", "0", "--repeats", "1"]
    elif args.quick:
        cmd += ["--batch", "1,4,16", "--repeats", "3"]
    rc, seconds = run_logged(cmd, log)
    if rc != 0 or not dest.is_file():
        return "fail", f"trtspec profile failed (rc {rc}): {_tail(log)}", {"rc": rc}
    table = json.loads(dest.read_text(encoding="utf-8"))
    return "pass", f"{profile_figure(table)}; saved {dest.name}; {seconds:.0f} s", {"rc": rc, "path": str(dest)}


STEPS = {"build": build, "pytest": pytest_step, "bench_recipe": bench_recipe, "profile": profile}
CHECK = {"build": "build.extension", "pytest": "pytest.cuda", "bench_recipe": "bench_recipe", "profile": "profile"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=sorted(STEPS) + ["probe"])
    ap.add_argument("--results", default=None)
    ap.add_argument("--logs", default=None)
    ap.add_argument("--out", default=None, help="where artifacts to keep go (cost_table.json, bench_recipe.json)")
    ap.add_argument("--work", default=None, help="scratch directory (default: --logs)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    args = ap.parse_args(argv)
    if args.step == "probe":
        return subprocess.run([sys.executable, "-c", CUDA_PROBE], cwd=ROOT).returncode
    if not args.results or not args.logs:
        ap.error(f"{args.step} needs --results and --logs")
    args.work = args.work or args.logs
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    status, figure, detail = STEPS[args.step](args)
    if args.device == "cpu":
        status, figure = ("skipped: no GPU" if status == "pass" else status), f"cpu dry-run: {figure}"
    write_result(args.results, CHECK[args.step], status, figure, detail, time.perf_counter() - t0)
    print(f"{CHECK[args.step]}: {status}: {figure}")
    return 0 if status != "fail" else 1


if __name__ == "__main__":
    sys.exit(main())
