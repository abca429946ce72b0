"""CUDA-event timing of every trtspec op against a device-to-device copy, for tools/gpu_check.sh.

Runs benchmarks/_cuda_section.py's measurement (its docstring says how: events per launch, inputs
rotated past the L2, bytes each op must move) and writes the rows to ``--json`` and one result,
``timing.ops``, whose figure is the copy bandwidth and the op with the highest and lowest fraction
of it. ``--device cpu`` runs the same code on the CPU ops at tiny sizes (a dry run).

    python3 tools/gpu_check/time_ops.py [--quick] [--device cuda|cpu] [--results DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

from result import write_result  # noqa: E402


def figure(rows: list[dict], copy: dict | None) -> str:
    def name(r):
        return f"{r['op']} {r['shape']} V={r['V']}"

    if not copy:
        return f"{len(rows)} rows timed (wall clock, CPU)"
    ranked = sorted((r for r in rows if r["copy_frac"] is not None), key=lambda r: r["copy_frac"])
    lo, hi = ranked[0], ranked[-1]
    return (f"copy {copy['gbps']:.0f} GB/s; best {name(hi)}: {hi['gbps']:.0f} GB/s ({100 * hi['copy_frac']:.0f}% "
            f"of copy, {1e3 * hi['ms']:.1f} us); lowest {name(lo)}: {lo['gbps']:.1f} GB/s "
            f"({1e3 * lo['ms']:.1f} us); {len(rows)} rows")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 launches per point instead of 50")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--results", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import _cuda_section as cs
    from rich.console import Console

    t0 = time.perf_counter()
    if args.device == "cuda":
        reason = cs._skip_reason()
        if reason:
            if args.results:
                write_result(args.results, "timing.ops", f"skipped: {reason}", "-")
            print(f"timing.ops: skipped: {reason}")
            return 0
        import torch

        iters = 20 if args.quick else 50
        copy = cs.copy_gbps()
        rows = cs.measure(iters=iters, copy=copy)
        title = f"trtspec CUDA ops on {torch.cuda.get_device_name()} (B={cs.BATCH}, median of {iters})"
        device = torch.cuda.get_device_name()
    else:
        copy, rows = None, cs.measure(warmup=1, iters=2, device="cpu", vocabs=(111,), batch=4)
        title, device = "trtspec ops on CPU (dry run: B=4, V=111, wall clock)", "cpu"
    Console(width=140).print(cs.table(rows, copy, title))
    out = {"device": device, "copy": copy, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    fig = figure(rows, copy)
    status = "pass" if args.device == "cuda" else "skipped: no GPU"
    if args.results:
        write_result(args.results, "timing.ops", status, fig if copy else f"cpu dry-run: {fig}", out,
                     time.perf_counter() - t0)
    print(f"timing.ops: {status}: {fig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
