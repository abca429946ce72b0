"""One check's result for ``tools/gpu_check.sh``: ``<results dir>/<check>.json``.

A result is ``{"check", "status", "figure", "detail", "seconds"}`` where ``status`` is
``pass``, ``fail`` or ``skipped: <reason>`` (e.g. ``skipped: no GPU``) and ``figure`` is the one
number or sentence the summary table shows. Written through a temporary file and a rename, so a
step killed half-way leaves either its whole result or none (the script then records the exit
code or the timeout).

    python3 tools/gpu_check/result.py RESULTS_DIR CHECK STATUS FIGURE [--detail JSON] [--seconds S]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

def check_status(status: str) -> str:
    """``status`` unchanged when it is ``pass``, ``fail`` or ``skipped: <reason>``; else ValueError."""
    if status in ("pass", "fail") or (status.startswith("skipped:") and status[len("skipped:"):].strip()):
        return status
    raise ValueError(f"status must be 'pass', 'fail' or 'skipped: <reason>', got {status!r}")


def write_result(results_dir: str | Path, check: str, status: str, figure: str, detail=None,
                 seconds: float | None = None) -> Path:
    """Write ``<results_dir>/<check>.json`` atomically; returns its path."""
    if not check or "/" in check or check.startswith("."):
        raise ValueError(f"check must be a plain name like 'pytest.cuda', got {check!r}")
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = {"check": check, "status": check_status(status), "figure": str(figure),
            "detail": detail if detail is not None else {}, "seconds": seconds}
    path = out / f"{check}.json"
    tmp = out / f".{check}.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def results_dir() -> Path | None:
    """The results directory given by ``tools/gpu_check.sh`` (``GPU_CHECK_RESULTS``), if any."""
    value = os.environ.get("GPU_CHECK_RESULTS")
    return Path(value) if value else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir")
    ap.add_argument("check")
    ap.add_argument("status")
    ap.add_argument("figure")
    ap.add_argument("--detail", default=None, help="a JSON value")
    ap.add_argument("--seconds", type=float, default=None)
    args = ap.parse_args(argv)
    try:
        detail = json.loads(args.detail) if args.detail else None
        write_result(args.results_dir, args.check, args.status, args.figure, detail, args.seconds)
    except ValueError as e:
        print(f"result.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
