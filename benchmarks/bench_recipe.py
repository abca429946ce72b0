"""Predicted versus swept draft length on the demo pair (or any pair, any drafter): does the planner's
D reach >= 0.97 of the best measured throughput at every batch size, and never fall more than 0.02
below a fixed D=3? Also reports TensorRT-LLM's AUTO heuristic (D=5 up to batch 4, else 3).

    python benchmarks/bench_recipe.py [--target DIR|BUNDLE] [--draft DIR] [--drafter draft_model|eagle3]
                                      [--device cpu|cuda] [--sweep 0..8] [--batch 1,4,16]
                                      [--prompts 40] [--max-new-tokens 32] [--repeats 3]
                                      [--clock auto|wall|cpu] [--calibration cost_table.json]
                                      [--acceptance max_d|pooled] [--prior-steps 0]
                                      [--out bench_recipe_out] [--json]

Steps: serve held-out standard-library code prompts (greedy) with continuous batching on B rows,
more prompts than B (a finished request's row goes to the next prompt, its prefill untimed), one
engine per D stepped in turn, and measure the steady-state tokens/s of every (B, D) over the steps
with all B rows running: what a server at concurrency B sees (``trtspec.bench.sweep``). The
acceptance measured at the largest D (censoring-aware per-position counts) and a cost table
(``trtspec profile``, engine method, at the context the steady steps read, unless --calibration is
given) go to the planner. It prints predicted next to measured step time, AL and tokens/s per
(B, D), then, per B, the planner's D, the measured best D and the ratio of their throughputs. Same
as ``trtspec bench --sweep-draft-len 0..8 --batch 1,4,16 --category coding``.
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    from trtspec.bench.config import parse_int_list
    from trtspec.bench.datasets import stdlib_code_prompts
    from trtspec.bench.sweep import FIXED3_MARGIN, TARGET_RATIO, SweepConfig, run_sweep

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="target model dir or bundle (default: the demo pair)")
    ap.add_argument("--draft", default=None, help="drafter weights dir (default: the demo's, per --drafter)")
    ap.add_argument("--drafter", choices=["draft_model", "eagle3", "mtp"], default="draft_model",
                    help="mtp: the target's own MTP layer (default target: the DeepSeek-V3-layout demo)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--sweep", default="0..8", help="draft lengths, e.g. 0..8")
    ap.add_argument("--batch", default="1,4,16", help="batch sizes, e.g. 1,4,16")
    ap.add_argument("--prompts", type=int, default=40,
                    help="held-out code prompts served (more than the largest batch: finished rows are refilled)")
    ap.add_argument("--max-new-tokens", type=int, default=SweepConfig.max_new_tokens)
    ap.add_argument("--repeats", type=int, default=SweepConfig.repeats)
    ap.add_argument("--clock", choices=["auto", "wall", "cpu"], default="auto",
                    help="auto: process CPU time (single-threaded) on --device cpu, wall time on cuda")
    ap.add_argument("--calibration", default=None, help="cost_table.json (default: profile now)")
    ap.add_argument("--acceptance", choices=["max_d", "pooled"], default=SweepConfig.acceptance,
                    help="planner's a_k from the counts at the largest D, or pooled over all swept D")
    ap.add_argument("--prior-steps", type=float, default=SweepConfig.prior_steps,
                    help="pseudo-steps shrinking each a_k toward the pooled rate (0: none)")
    ap.add_argument("--gpu", default="h200", help="GPU name for the planner (its step times come from the table)")
    ap.add_argument("--out", default="bench_recipe_out")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    target, draft = args.target, args.draft
    if target is None:
        from trtspec.zoo import demo_pair

        target, demo_drafter = demo_pair(args.drafter)
        draft = draft or demo_drafter
    cfg = SweepConfig(draft_lens=parse_int_list(args.sweep, "--sweep"), batch_sizes=parse_int_list(args.batch, "--batch"),
                      repeats=args.repeats, max_new_tokens=args.max_new_tokens, acceptance=args.acceptance,
                      prior_steps=args.prior_steps,
                      clock=args.clock if args.clock != "auto" else ("cpu" if args.device == "cpu" else "wall"))
    prompts = stdlib_code_prompts(args.prompts, per_file=8)
    res = run_sweep(target, draft, prompts, cfg, out_dir=args.out, drafter=args.drafter, device=args.device,
                    dtype=args.dtype, calibration=args.calibration, gpu=args.gpu)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"clock: {cfg.clock}; device: {res['device']}; mean AL at D={max(cfg.draft_lens)}: "
          f"{res['mean_al_at_max_d']:.3f}; a_k = {', '.join(f'{a:.2f}' for a in res['rates'])}")
    print("predicted (planner's cost model with the profile and the acceptance) vs measured, steady state:")
    print(res["detail"])
    print(res["table"])
    fmt = lambda r: "n/a" if r is None else f"{r:.3f}"  # noqa: E731
    for v in res["verdicts"]:
        r, cb = v["ratios"], v["cb_ratios"]
        near_fixed3 = r["fixed3"] is None or r["planner"] >= r["fixed3"] - FIXED3_MARGIN  # D=3 not swept: no test
        ok = "n/a" if r["planner"] is None else ("ok" if r["planner"] >= TARGET_RATIO and near_fixed3 else "below goal")
        print(f"B={v['batch']}: planner D={v['choices']['planner']} vs best D={v['best_d']}: ratio {fmt(r['planner'])} "
              f"({ok}); fixed D=3 {fmt(r['fixed3'])}; AUTO D={v['choices']['auto']} {fmt(r['auto'])}  "
              f"[cb composition: planner {fmt(cb['planner'])}, fixed D=3 {fmt(cb['fixed3'])}, AUTO {fmt(cb['auto'])}]")
    print(f"wall {res['wall_s']:.0f} s (sweep {res['sweep_s']:.0f} s, profile {res['profile_s']:.0f} s); "
          f"results in {args.out}/sweep.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
