"""The summary of tools/gpu_check.sh: one table (check, status, figure) and ``summary.json``.

    python3 tools/gpu_check/summary.py RESULTS_DIR OUT_DIR [--mode gpu|cpu] [--quick] [--seconds S]

Reads every ``RESULTS_DIR/*.json`` (result.py), orders them as ``ORDER`` (unknown checks last),
writes ``OUT_DIR/summary.json`` and prints the table. Exit status 1
when some check failed. Uses the standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

ORDER = ["env", "deps", "build.nvcc", "build.bindings", "build.extension", "pytest.cuda", "sanitizer.memcheck",
         "sanitizer.racecheck", "sanitizer.synccheck", "sanitizer.initcheck", "runtime.greedy", "timing.ops",
         "timing.flashinfer", "profile", "bench_recipe"]
WIDTH = 132


def load(results: Path) -> list[dict]:
    rows = []
    for path in sorted(results.glob("*.json")):
        try:
            rows.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as e:
            rows.append({"check": path.stem, "status": "fail", "figure": f"unreadable result ({e})"})
    rank = {c: i for i, c in enumerate(ORDER)}
    return sorted(rows, key=lambda r: (rank.get(r["check"], len(ORDER)), r["check"]))


def render(rows: list[dict], header: str) -> str:
    cw = max([len("check")] + [len(r["check"]) for r in rows])
    sw = min(28, max([len("status")] + [len(r["status"]) for r in rows]))
    fw = max(40, WIDTH - cw - sw - 6)
    lines = [header, f"{'check':<{cw}}  {'status':<{sw}}  figure", f"{'-' * cw}  {'-' * sw}  {'-' * fw}"]
    for r in rows:
        status = textwrap.wrap(r["status"], sw) or [""]
        figure = textwrap.wrap(str(r.get("figure", "")), fw) or [""]
        for i in range(max(len(status), len(figure))):
            lines.append(f"{r['check'] if i == 0 else '':<{cw}}  {status[i] if i < len(status) else '':<{sw}}  "
                         f"{figure[i] if i < len(figure) else ''}".rstrip())
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--mode", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--quiet", action="store_true", help="write summary.json only")
    args = ap.parse_args(argv)
    rows = load(Path(args.results))
    counts = {s: sum(r["status"].split(":")[0] == s for r in rows) for s in ("pass", "fail", "skipped")}
    took = f", {args.seconds:.0f} s" if args.seconds is not None else ""
    header = (f"gpu_check summary ({args.mode} mode{', quick' if args.quick else ''}{took}): "
              f"{counts['pass']} pass, {counts['fail']} fail, {counts['skipped']} skipped")
    text = render(rows, header)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"format": "trtspec.gpu_check/v1", "mode": args.mode, "quick": args.quick, "seconds": args.seconds,
            "counts": counts, "ok": counts["fail"] == 0, "checks": rows}
    tmp = out / f".summary.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(out / "summary.json")
    if not args.quiet:
        print(text)
    return 0 if counts["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
