"""compute-sanitizer over the per-op drivers ``sanitize_<op>.py``, several processes at a time.

    python3 tools/gpu_check/run_sanitizer.py [--tools memcheck,racecheck] [--sizes full|quick|smoke]
                                             [--jobs 10] [--logs DIR] [--results DIR] [--device cuda|cpu]

For each tool and op: ``compute-sanitizer --tool T --error-exitcode 99 --kernel-name kns=trtspec
python3 sanitize_<op>.py --device cuda --sizes S`` (only trtspec's kernels are instrumented, so
torch's own kernels run at full speed; if this compute-sanitizer rejects ``--kernel-name`` the run
is repeated without it). A run passes when the sanitizer reports 0 errors and the driver's own
checks pass, and the tool reports the planted error of its positive control (planted.py: same
arguments, a kernel with a known out-of-bounds write / shared-memory race / uninitialized read).
One result per tool, ``sanitizer.<tool>``, figure "ops, cases: errors; control".

``--device cpu`` runs the drivers without a sanitizer on the CPU ops (a dry run of the drivers
where no GPU exists); its result is ``sanitizer.<tool>`` = ``skipped: no GPU`` with the dry run's
outcome as the figure, or ``fail`` if a driver is broken.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from planted import TOOLS as PLANTED  # noqa: E402
from result import write_result  # noqa: E402

OPS = ("tree_metadata", "verify_greedy", "verify_sample", "verify_block", "accepted_kv_indices")
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
BAD_OPTION = re.compile(r"(unrecognized|unknown|invalid) (option|argument|value)|kernel-name", re.I)


def find_sanitizer() -> str | None:
    env = os.environ.get("COMPUTE_SANITIZER")
    if env:
        return env if Path(env).is_file() else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "compute-sanitizer").is_file():
            return str(Path(root) / "bin" / "compute-sanitizer")
    return None


def _driver_cmd(op: str, device: str, sizes: str, report: Path) -> list[str]:
    return [sys.executable, str(HERE / f"sanitize_{op}.py"), "--device", device, "--sizes", sizes,
            "--json", str(report)]


def _sanitized(sanitizer: str | None, tool: str | None, base: list[str], timeout: float) -> tuple[list[str], int, str]:
    """Run ``base`` (under ``tool`` with trtspec's kernel filter when given; without the filter if
    this compute-sanitizer rejects it): (command, exit code, output)."""
    attempts = [base]
    if tool:
        head = [sanitizer, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20"]
        attempts = [head + ["--kernel-name", "kns=trtspec"] + base, head + base]
    rc, text, cmd, note = -1, "", attempts[0], ""
    for i, cmd in enumerate(attempts):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, text = 124, f"timeout after {timeout:.0f} s\n{e.stdout or ''}{e.stderr or ''}"
        if i == 0 and tool and rc not in (0, 1, 99, 124) and BAD_OPTION.search(text) and not SUMMARY.search(text):
            note = f"[--kernel-name rejected; rerunning without it]\n{text}\n"
            continue
        break
    return cmd, rc, note + text


def _errors(text: str) -> int | None:
    m = SUMMARY.findall(text)
    return sum(int(x) for x in m) if m else None


def run_one(sanitizer: str | None, tool: str | None, op: str, sizes: str, device: str, logs: Path,
            timeout: float, deadline: float | None = None) -> dict:
    """One driver (under ``tool`` when given); returns {op, tool, errors, driver, rc, seconds, log};
    ``not_run`` True (and nothing run) when fewer than 20 s are left before ``deadline`` (perf_counter)."""
    if deadline is not None:
        left = deadline - time.perf_counter()
        if left < 20:
            return {"op": op, "tool": tool, "rc": None, "errors": None, "driver": None, "not_run": True, "seconds": 0.0}
        timeout = min(timeout, left)
    tag = f"{tool or 'plain'}_{op}"
    log, report = logs / f"sanitizer_{tag}.log", logs / f"sanitizer_{tag}.json"
    report.unlink(missing_ok=True)
    t0 = time.perf_counter()
    cmd, rc, text = _sanitized(sanitizer, tool, _driver_cmd(op, device, sizes, report), timeout)
    log.write_text(" ".join(map(str, cmd)) + "\n" + text, encoding="utf-8")
    driver = json.loads(report.read_text()) if report.is_file() else None
    return {"op": op, "tool": tool, "rc": rc, "errors": _errors(text), "driver": driver,
            "seconds": round(time.perf_counter() - t0, 1), "log": str(log)}


def run_control(sanitizer: str, tool: str, logs: Path, timeout: float, deadline: float | None = None) -> dict:
    """The planted-error kernel of ``tool`` (planted.py) under the sanitizer: {tool, detected, errors, note}."""
    if tool not in PLANTED:
        return {"tool": tool, "detected": None, "errors": None, "note": "no planted control for this tool"}
    if deadline is not None:
        timeout = max(10.0, min(timeout, deadline - time.perf_counter()))
    log = logs / f"sanitizer_{tool}_control.log"
    cmd, rc, text = _sanitized(sanitizer, tool, [sys.executable, str(HERE / "planted.py"), tool], timeout)
    log.write_text(" ".join(map(str, cmd)) + "\n" + text, encoding="utf-8")
    errors = _errors(text)
    if "No module named 'cupy'" in text:
        return {"tool": tool, "detected": None, "errors": errors, "note": "no control: cupy missing"}
    return {"tool": tool, "detected": bool(errors), "errors": errors, "rc": rc, "log": str(log),
            "note": f"planted error {'reported' if errors else 'NOT reported'} ({errors} errors)"}


def verdict(runs: list[dict], sanitized: bool, control: dict | None = None) -> tuple[str, str]:
    """(status, figure) of one tool's runs over the drivers. ``fail``: a sanitizer error, a failed
    driver case, a run without a report, or (with ``control``, run_control) a planted error the
    sanitizer did not report, which makes its clean runs prove nothing. ``skipped: time budget``
    when some driver was not run (and nothing failed in the others)."""
    done = [r for r in runs if not r.get("not_run")]
    cases = sum(r["driver"]["cases"] for r in done if r["driver"])
    bad = []
    for r in done:
        if r["driver"] is None:
            bad.append(f"{r['op']}: no report (rc {r['rc']})")
        elif r["driver"]["failures"]:
            bad.append(f"{r['op']}: {len(r['driver']['failures'])} failed cases")
        if sanitized and (r["errors"] is None or r["errors"] > 0 or r["rc"] not in (0, 1)):
            bad.append(f"{r['op']}: {r['errors'] if r['errors'] is not None else '?'} sanitizer errors (rc {r['rc']})")
    if control is not None and control["detected"] is False:
        bad.append(f"positive control: {control['note']}, so clean runs prove nothing")
    errors = sum(r["errors"] or 0 for r in done)
    head = f"{len(done)} ops, {cases} cases" + (f": {errors} sanitizer errors" if sanitized else ": drivers ok")
    if control is not None and control["detected"] is not False:
        head += f"; {control['note']}"
    if bad:
        return "fail", head + "; " + "; ".join(bad)
    if len(done) < len(runs):
        missed = ", ".join(r["op"] for r in runs if r.get("not_run"))
        return f"skipped: time budget spent before {missed} ran", head
    return "pass", head


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default="memcheck,racecheck")
    ap.add_argument("--sizes", default="full", choices=["full", "quick", "smoke"], help="driver sizes under memcheck")
    ap.add_argument("--other-sizes", default=None, choices=["full", "quick", "smoke"],
                    help="sizes under the other tools (default: --sizes); their hazards (shared memory, barriers, "
                         "initialisation) do not grow with V, only their run time does")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--jobs", type=int, default=10, help="driver processes at a time (all tools share one pool)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--timeout", type=float, default=300, help="seconds per driver process")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole run; drivers that would start later are not run "
                         "(default: GPU_CHECK_STEP_LIMIT - 15 when tools/gpu_check.sh sets it, else none)")
    ap.add_argument("--logs", default="gpu_check_out/logs")
    ap.add_argument("--results", default=None, help="write sanitizer.<tool>.json results here")
    args = ap.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t]
    ops = [o for o in args.ops.split(",") if o]
    for name, values, allowed in (("--tools", tools, TOOLS), ("--ops", ops, OPS)):
        unknown = sorted(set(values) - set(allowed))
        if unknown or not values:
            ap.error(f"{name}: expected some of {','.join(allowed)}, got {','.join(values) or 'nothing'}")
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ok_all = True
    if args.device == "cpu":  # dry run of the drivers, once, reported under every tool
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(lambda op: run_one(None, None, op, args.sizes, "cpu", logs, args.timeout), ops))
        status, figure = verdict(runs, sanitized=False)
        ok = status != "fail"
        for tool in tools:
            status = "skipped: no GPU" if ok else "fail"
            if args.results:
                write_result(args.results, f"sanitizer.{tool}", status, f"cpu dry-run: {figure}", {"runs": runs},
                             time.perf_counter() - t0)
            print(f"sanitizer.{tool}: {status}: cpu dry-run: {figure}")
        return 0 if ok else 1
    sanitizer = find_sanitizer()
    if sanitizer is None:
        for tool in tools:
            if args.results:
                write_result(args.results, f"sanitizer.{tool}", "skipped: compute-sanitizer not found", "-")
        print("run_sanitizer: compute-sanitizer not found (set COMPUTE_SANITIZER)")
        return 0
    pairs = [(tool, op) for tool in tools for op in ops]  # tool-major: the first tools finish first
    budget = args.budget if args.budget is not None else float(os.environ.get("GPU_CHECK_STEP_LIMIT", 0)) - 15
    deadline = t0 + budget if budget > 0 else None
    with ThreadPoolExecutor(args.jobs) as pool:
        controls = {t: pool.submit(run_control, sanitizer, t, logs, args.timeout, deadline) for t in tools}
        sizes = {t: args.sizes if t == "memcheck" else (args.other_sizes or args.sizes) for t in tools}
        runs = list(pool.map(lambda p: run_one(sanitizer, p[0], p[1], sizes[p[0]], "cuda", logs, args.timeout,
                                               deadline), pairs))
        controls = {t: f.result() for t, f in controls.items()}
    for tool in tools:
        mine = [r for r in runs if r["tool"] == tool]
        status, figure = verdict(mine, sanitized=True, control=controls[tool])
        ok_all &= status != "fail"
        if args.results:
            write_result(args.results, f"sanitizer.{tool}", status, figure, {"runs": mine, "control": controls[tool]},
                         max(r["seconds"] for r in mine))
        print(f"sanitizer.{tool}: {status}: {figure}")
    print(f"run_sanitizer: {len(pairs)} runs, {args.jobs} at a time, {time.perf_counter() - t0:.0f} s")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
