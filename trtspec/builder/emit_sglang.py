"""``sglang.args`` (and, for ``--speculation adaptive``, ``sglang_adaptive.json``) for one SGLang version.

SGLang runs one speculative shape at every batch size. trtspec writes the recipe's shape for chains and trees, one
block of D + 1 verified tokens for DFLASH / DSPARK, keeps an n-gram chain a chain (``--speculative-ngram-max-bfs-
breadth`` equal to top-k, since SGLang sets top-k from it), writes block verification where the version has it for
the algorithm, and, for ``--speculation adaptive`` where the version adapts the algorithm, SGLang's own adaptive
step tiers seeded from the recipe: one slot per planned tier, keyed by its smallest batch, that starts at the
tier's planned D, never drafts above it, and may step down when acceptance falls (:func:`adaptive_config`). What SGLang then starts each batch size at is
:func:`trtspec.builder.engine_schedules.sglang_per_batch`.
"""
from __future__ import annotations

from typing import Any, Optional

from trtspec.builder.draft_config import DrafterFacts
from trtspec.builder.engine_facts import EngineVersion
from trtspec.builder.engine_schedules import sglang_per_batch
from trtspec.builder.emit_vllm import DRAFT_DIR, TARGET_DIR, ranges_text
from trtspec.builder.sglang_config import BLOCK_ALGORITHMS, WITH_DRAFT, SglangArgs

ADAPTIVE_FILE = "sglang_adaptive.json"


def _shape(recipe: Any, algo: str, d: int) -> dict:
    """num_steps / eagle_topk / num_draft_tokens (+ the DSPARK block) for ``algo`` at draft length ``d``."""
    if algo in BLOCK_ALGORITHMS:
        shape = {"speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": d + 1}
        if algo == "DSPARK":
            shape["speculative_dspark_block_size"] = d
        return shape
    sg = getattr(recipe, "sglang", None) or {}
    steps = min(int(sg.get("speculative_num_steps", d)), d)
    topk = int(sg.get("speculative_eagle_topk", 1) or 1)
    n = int(sg.get("speculative_num_draft_tokens", steps + 1)) if topk > 1 else steps + 1
    return {"speculative_num_steps": steps, "speculative_eagle_topk": topk, "speculative_num_draft_tokens": n}


def adaptive_config(recipe: Any, max_d: int, max_batch_size: int) -> dict:
    """SGLang adaptive slots from the recipe's per-batch draft lengths, one per planned tier (key: its first batch).

    The first slot starts at the planned D (SGLang's ``--speculative-num-steps``) and may step down through every
    smaller planned D, half of it and 1 when acceptance falls; a later tier's slot holds [ceil(D/2), D], so SGLang
    starts it at its middle candidate, the planned D. No slot ever drafts more than its tier's planned D."""
    sched = getattr(recipe, "vllm_schedule", None) or getattr(recipe, "draft_len_schedule", None) or {}
    sched = {int(b): min(int(v), max_d) for b, v in sched.items() if int(b) <= max_batch_size} or {1: max_d}
    if max(sched) < max_batch_size:
        sched[max_batch_size] = 0  # above the planned tiers the plan does not speculate
    planned = sorted(set(sched.values()))
    out: dict[str, Any] = {}
    lo, prev = 1, None
    for hi in sorted(sched):
        d = sched[hi]
        if d != prev:
            if not out:
                steps = {v for v in planned if 1 <= v <= d} | {d, -(-d // 2), min(1, d)}
            else:
                steps = {-(-d // 2), d}
            out[str(lo)] = {"candidate_steps": sorted(steps)}
            prev = d
        lo = hi + 1
    return out


def _verification(opts: Any, sv: EngineVersion, algo: str, fields: dict, notes: list) -> None:
    if opts.verify != "block":
        return
    allowed = sv["block_verification"] or []
    if algo in allowed and fields.get("speculative_eagle_topk", 1) == 1:
        fields["speculative_use_block_verification"] = True
        if algo in sv.get("block_verification_needs_rejection_sampling", []):
            fields["speculative_use_rejection_sampling"] = True
    else:
        where = f"has it for {', '.join(allowed)} only" if allowed else "has none"
        notes.append(f"{sv.label} block verification {where}: sglang.args verifies {algo} token by token")


def _adaptive(opts: Any, sv: EngineVersion, algo: str, recipe: Any, fields: dict,
              meaning: list) -> Optional[dict]:
    ad = sv.get("adaptive")
    wanted = getattr(opts, "speculation", "static") == "adaptive"
    if wanted and ad and algo in ad["algorithms"] and fields["speculative_eagle_topk"] == ad["topk"]:
        cfg = adaptive_config(recipe, fields["speculative_num_steps"], opts.max_batch_size)
        fields.update(speculative_adaptive=True, speculative_adaptive_config=f"./{ADAPTIVE_FILE}")
        meaning.append(f"adaptive: `--speculative-adaptive` with `{ADAPTIVE_FILE}` (SGLang moves each batch-size slot "
                       "among its candidate steps from an EMA of accepted length, with hysteresis): slots "
                       + "; ".join(f"batch >= {k}: steps {v['candidate_steps']}" for k, v in cfg.items()))
        return cfg
    why = (f"it adapts {ad['algorithms']} chains only" if ad else "it has no adaptive mode")
    meaning.append(f"schedule: static on {sv.label} for {algo} ({why})")
    return None


def sglang_part(recipe: Any, opts: Any, sv: EngineVersion, d: int,
                facts: Optional[DrafterFacts] = None) -> tuple[Optional[SglangArgs], list, list, Optional[dict]]:
    """``sglang.args`` for SGLang ``sv`` at the drafter's draft length ``d`` (None where the version has no algorithm
    for the drafter), README lines, plan notes, and the adaptive config to write next to it (or None)."""
    algo = sv["algorithms"].get(opts.drafter)
    if algo is None:
        note = sv.fact("algorithms").note
        return None, [], [f"{sv.label} cannot serve --drafter {opts.drafter}: it has no speculative algorithm for it"
                          f"{' (' + note + ')' if note else ''}; sglang.args not written"], None
    why = (facts or DrafterFacts()).serves_block_draft(opts.drafter, sv.get("draft_architectures"))
    if why:
        return None, [], [f"{sv.label} cannot serve --drafter {opts.drafter} with this draft: {why} "
                          f"({sv.fact('draft_architectures').source.split(' (')[0]}); sglang.args not written"], None
    notes: list[str] = []
    fields: dict[str, Any] = {"model_path": TARGET_DIR, "tp_size": opts.tp}
    if getattr(opts, "ep", 1) > 1:
        fields["ep_size"] = opts.ep
    fields.update(max_running_requests=opts.max_batch_size, context_length=opts.max_seq_len,
                  kv_cache_dtype="fp8_e4m3" if opts.kv_cache_quant == "fp8" else "auto", speculative_algorithm=algo)
    fields.update(_shape(recipe, algo, d))
    if algo in WITH_DRAFT:
        fields["speculative_draft_model_path"] = DRAFT_DIR
    if algo == "NGRAM" and sv.get("ngram_breadth_flag"):
        fields[sv["ngram_breadth_flag"]] = fields["speculative_eagle_topk"]
    _verification(opts, sv, algo, fields, notes)
    meaning = [sv.summary]
    adaptive = _adaptive(opts, sv, algo, recipe, fields, meaning)
    args = SglangArgs.model_validate(fields, context={"sglang": sv})
    runs = sglang_per_batch(args, opts.max_batch_size, adaptive)
    meaning.insert(1, f"one shape at every batch size: {args.speculative_num_steps} steps, top-k "
                      f"{args.speculative_eagle_topk}, {args.speculative_num_draft_tokens} tokens verified per step; "
                      f"draft length per batch size{' at start' if adaptive else ''}: "
                      f"{ranges_text(dict(enumerate(runs, 1)))}")
    if args.speculative_use_block_verification:
        meaning.append("verification: `--speculative-use-block-verification` (block verification)"
                       + (" with `--speculative-use-rejection-sampling`, which SGLang requires for it"
                          if args.speculative_use_rejection_sampling else ""))
    if args.ep_size:
        meaning.append(f"experts: `--ep-size {args.ep_size}` inside `--tp-size {args.tp_size}`")
    return args, meaning, notes, adaptive
