"""``vllm.yaml`` for one vLLM version: what :func:`trtspec.builder.emit.plan_configs` writes for vLLM.

Every choice reads the version's facts: the method of the drafter, whether the per-batch draft length survives
(Model Runner V1 drops it for suffix decoding on 0.33.0), block verification, the adaptive mode, expert
parallelism, and the package suffix decoding needs. What the engine will run at each batch size is
:func:`trtspec.builder.engine_schedules.vllm_per_batch` of the emitted config, printed in the README.
"""
from __future__ import annotations

from typing import Any, Optional

from trtspec.builder.draft_config import DrafterFacts
from trtspec.builder.engine_facts import EngineVersion
from trtspec.builder.engine_schedules import vllm_per_batch, vllm_runner
from trtspec.builder.vllm_config import VllmConfig, schedule_to_ranges

TARGET_DIR, DRAFT_DIR = "./target", "./draft"


def ranges_text(per_batch: dict) -> str:
    """{1: 4, 2: 4, 3: 1} -> 'batch 1-2: 4, batch 3: 1'."""
    items, out, lo = sorted(per_batch.items()), [], None
    for i, (b, d) in enumerate(items):
        lo = b if lo is None else lo
        if i + 1 == len(items) or items[i + 1][1] != d:
            out.append(f"batch {lo}-{b}: {d}" if lo != b else f"batch {b}: {d}")
            lo = None
    return ", ".join(out)


def _planned(recipe: Any, k_cap: Optional[int]) -> tuple[int, dict[int, int]]:
    """(K, {inclusive upper batch bound: k}) the recipe plans for vLLM, capped at ``k_cap``."""
    sched = getattr(recipe, "vllm_schedule", None) or getattr(recipe, "draft_len_schedule", None) or {}
    sched = {int(b): int(v) for b, v in sched.items()}
    k = sched[min(sched)] if sched else int(recipe.max_draft_len)
    if k_cap is not None:
        k = min(k, k_cap)
        sched = {b: min(v, k) for b, v in sched.items()}
    return k, sched


def _per_batch(spec: dict, sched: dict[int, int], k: int, opts: Any, vv: EngineVersion, method: str,
               notes: list) -> None:
    """Write the per-batch ranges where the version has them and keeps them for this method and layout."""
    varies = bool(sched) and (len(set(sched.values())) > 1 or max(sched) < opts.max_batch_size)
    if not varies:
        return
    if max(sched) < opts.max_batch_size:  # vLLM keeps the last k above the last range: write the 0
        sched = {**sched, opts.max_batch_size: 0}
    dense = ranges_text(_dense(sched))
    if method == "dspark":
        notes.append(f"{vv.label}: a DSpark draft drafts its whole block; no per-batch draft length is written")
    elif not vv["per_batch_field"]:
        notes.append(f"{vv.label} has no per-batch draft length: K={k} at every batch size (the recipe's {dense} is "
                     "not expressible)")
    elif vllm_runner({"speculative_config": {"method": method}}, vv) == "v1" \
            and method not in vv.get("per_batch_v1_methods", [method]):
        notes.append(f"{vv.label} runs {method} on Model Runner V1, which drops num_speculative_tokens_per_batch_size "
                     f"(static num_speculative_tokens): K={k} at every batch size, not the recipe's {dense}")
    else:
        spec[vv["per_batch_field"]] = schedule_to_ranges(sched)


def _dense(sched: dict[int, int]) -> dict[int, int]:
    out, lo = {}, 1
    for hi in sorted(sched):
        out.update({b: sched[hi] for b in range(lo, hi + 1)})
        lo = hi + 1
    return out


def _verification(opts: Any, vv: EngineVersion, method: str, spec: dict, meaning: list, notes: list) -> None:
    if opts.verify != "block":
        meaning.append("verification: per-token rejection sampling (rejection_sample_method left at its default)")
        return
    if "block" not in vv["rejection_sample_methods"]:
        notes.append(f"{vv.label} has no block verification: vllm.yaml verifies token by token")
        meaning.append("verification: per-token rejection sampling (this version has no block verification)")
    elif method in vv.get("methods_without_draft_probs", []):
        notes.append(f"{vv.label}: {method} proposes tokens without probabilities, and block verification would "
                     "then accept less than per-token verification (vllm#40819): rejection_sample_method stays "
                     "standard")
        meaning.append(f"verification: per-token rejection sampling ({method} has no draft probabilities)")
    else:
        spec["rejection_sample_method"] = "block"
        meaning.append(f"verification: `rejection_sample_method: block` (block verification, Sun et al.; "
                       f"{vv.fact('block_verification_runner').source})")


def _adaptive(opts: Any, vv: EngineVersion, method: str, spec: dict, meaning: list) -> None:
    ad = vv.get("adaptive")
    if ad and method in ad["methods"] and getattr(opts, "speculation", "static") == "adaptive":
        spec[ad["field"]] = True
        meaning.append(f"adaptive: `{ad['field']}: true` -- vLLM sizes each step's verification budget from cost "
                       f"tables profiled at start-up and per-position confidences, up to K={spec['num_speculative_tokens']}"
                       f" ({vv.fact('adaptive').source.split(' (')[0]})")
    else:
        why = (f"it adapts {ad['methods']} only" if ad else "it has no adaptive mode")
        meaning.append(f"schedule: static on {vv.label} for {method} ({why})"
                       + ("" if getattr(opts, "speculation", "static") == "adaptive" else
                          "; `--speculation adaptive` asks for the engine's adaptive mode where it has one"))


def _parallel(opts: Any, vv: EngineVersion, data: dict, meaning: list, notes: list) -> None:
    ep = getattr(opts, "ep", 1)
    if ep <= 1:
        return
    facts = vv.get("expert_parallel")
    if not facts:
        notes.append(f"{vv.label}: no expert-parallel facts encoded; vllm.yaml keeps the experts tensor-parallel")
    elif ep == opts.tp:
        data[facts["switch"]] = True
        meaning.append(f"experts: `{facts['switch']}: true` with tensor_parallel_size {opts.tp}, data_parallel_size 1 "
                       f"-> the experts split over {opts.tp} GPUs (vLLM's EP size is TP x DP)")
    else:
        notes.append(f"{vv.label} splits experts over all TP x DP GPUs once expert parallelism is on: --ep {ep} of "
                     f"--tp {opts.tp} has no vLLM layout; vllm.yaml keeps the experts tensor-parallel over {opts.tp}")


def vllm_part(recipe: Any, opts: Any, facts: DrafterFacts, vv: EngineVersion,
              k_cap: Optional[int] = None) -> tuple[Optional[VllmConfig], list, list]:
    """``vllm.yaml`` for vLLM ``vv`` (None where it has no method for the drafter), README lines, plan notes.
    ``k_cap``: the largest draft length the drafter can run (a DSpark block is also the only one)."""
    notes: list[str] = []
    method = vv["methods"].get(opts.drafter)
    if method is None:
        return None, [], [f"{vv.label} cannot serve --drafter {opts.drafter}: it has no method for it "
                          f"({vv.fact('methods').source}); vllm.yaml not written"]
    why = facts.serves_block_draft(opts.drafter, vv.get("draft_architectures"))
    if why:
        return None, [], [f"{vv.label} cannot serve --drafter {opts.drafter} with this draft: {why} "
                          f"({vv.fact('draft_architectures').source.split(' (')[0]}); vllm.yaml not written"]
    meaning = [vv.summary]
    k, sched = _planned(recipe, k_cap)
    if opts.drafter == "dspark" and k_cap is not None:
        k, sched = k_cap, {}
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method in vv["methods_with_model"]:
        spec["model"] = DRAFT_DIR
    if method == "ngram":
        spec.update(prompt_lookup_max=3, prompt_lookup_min=1)
    _per_batch(spec, sched, k, opts, vv, method, notes)
    _verification(opts, vv, method, spec, meaning, notes)
    _adaptive(opts, vv, method, spec, meaning)
    data = {"model": TARGET_DIR, "tensor_parallel_size": opts.tp, "max_num_seqs": opts.max_batch_size,
            "max_model_len": opts.max_seq_len, "kv_cache_dtype": "fp8" if opts.kv_cache_quant == "fp8" else "auto",
            "speculative_config": spec}
    _parallel(opts, vv, data, meaning, notes)
    if method == "suffix" and vv.get("suffix_package"):
        meaning.append(f"needs the `{vv['suffix_package']}` package next to vLLM: `pip install {vv['suffix_package']}`")
        notes.append(f"{vv.label} serves suffix decoding only with the `{vv['suffix_package']}` package installed "
                     f"(pip install {vv['suffix_package']}); without it vLLM refuses vllm.yaml")
    cfg = VllmConfig.model_validate(data, context={"vllm": vv})
    runs = vllm_per_batch(cfg.model_dump(exclude_none=True, mode="json"), vv)
    static = len(set(runs)) == 1
    runner = f", Model Runner {vllm_runner(data, vv).upper()}" if vv.get("v1_runner_methods") is not None else ""
    meaning.insert(1, f"draft length per batch size (what {vv.label} runs{runner}): "
                      f"{ranges_text(dict(enumerate(runs, 1)))}" + (" (static)" if static else ""))
    return cfg, meaning, notes
