"""What vLLM and SGLang run at each batch size for an emitted config: their resolution rules, one function each.

The counterpart of :func:`trtspec.builder.trtllm_schedule.runtime_draft_len` for the other two engines. Each
function reads the emitted config (``vllm.yaml`` as a mapping, :class:`SglangArgs`) and the version's facts, and
returns the draft length a request gets at batch size ``b``; the emitters print it per batch in the bundle README,
the tests compare it batch by batch with the emitted configs, and the ``engines`` tier with the engines' own
expansion (vLLM's ``build_dynamic_sd_schedule_lookup``, SGLang's ``AdaptiveSpeculativeParams``).

vLLM (fact ``per_batch_semantics``): ``num_speculative_tokens_per_batch_size`` ranges are inclusive; a batch in a
gap or above the last range keeps the previous range's K; every K is clamped to ``num_speculative_tokens``. The
version drops the ranges (static ``num_speculative_tokens``) for a method that runs on Model Runner V1 without
per-batch support (facts ``v1_runner_methods`` / ``per_batch_v1_methods``) and with data parallelism.

SGLang: one shape at every batch size -- ``num_steps`` drafted tokens per step for chains and trees (depth),
``num_draft_tokens - 1`` for DFLASH / DSPARK (one block). With ``--speculative-adaptive`` each batch size starts in
the slot with the largest key <= b (keys: the batch sizes of the adaptive config) at ``num_steps`` when that slot
can run it, else at the middle of its candidate steps, and moves among the slot's candidates at run time.
"""
from __future__ import annotations

from typing import Any, Optional

from trtspec.builder.engine_facts import EngineVersion
from trtspec.builder.sglang_config import BLOCK_ALGORITHMS, SglangArgs


def vllm_runner(data: dict, facts: EngineVersion) -> str:
    """``"v1"`` or ``"v2"``: the model runner ``facts``' version picks for the emitted config (fact
    ``v1_runner_methods``; versions without the fact: v1)."""
    spec = data.get("speculative_config") or {}
    methods = facts.get("v1_runner_methods")
    if methods is None:
        return "v1"
    return "v1" if spec.get("method") in methods else "v2"


def vllm_ranges_kept(data: dict, facts: EngineVersion) -> bool:
    """Does the version keep the emitted ``num_speculative_tokens_per_batch_size`` (not drop it to static)?"""
    spec = data.get("speculative_config") or {}
    if not spec.get("num_speculative_tokens_per_batch_size") or not facts["per_batch_field"]:
        return False
    if (data.get("data_parallel_size") or 1) > 1 and facts.get("per_batch_dropped_with_data_parallel"):
        return False
    if vllm_runner(data, facts) == "v1":
        return spec.get("method") in facts.get("per_batch_v1_methods", [spec.get("method")])
    return True


def vllm_draft_len(data: dict, batch: int, facts: EngineVersion) -> int:
    """Draft tokens per request that vLLM ``facts`` runs at ``batch`` for the ``vllm.yaml`` mapping ``data``."""
    spec = data["speculative_config"]
    k = int(spec["num_speculative_tokens"])
    if not vllm_ranges_kept(data, facts):
        return k
    value: Optional[int] = None
    for lo, hi, kr in sorted(spec["num_speculative_tokens_per_batch_size"]):
        if lo > batch:
            break
        value = int(kr)  # inside this range, or past it (a gap or the tail keeps the last K)
    return min(k, value if value is not None else k)


def vllm_per_batch(data: dict, facts: EngineVersion) -> list[int]:
    """:func:`vllm_draft_len` for every batch size 1..max_num_seqs."""
    return [vllm_draft_len(data, b, facts) for b in range(1, int(data["max_num_seqs"]) + 1)]


def sglang_static_draft_len(args: SglangArgs) -> int:
    """Draft tokens per request of the static shape: the block for DFLASH / DSPARK, the depth otherwise."""
    if args.speculative_algorithm in BLOCK_ALGORITHMS:
        return args.speculative_num_draft_tokens - 1
    return args.speculative_num_steps


def sglang_adaptive_slot(adaptive: dict, batch: int) -> dict:
    """The adaptive config entry that serves ``batch`` (largest integer key <= batch, else the smallest key)."""
    keys = sorted(int(k) for k in adaptive if str(k).isdigit())
    below = [k for k in keys if k <= batch]
    return adaptive[str(below[-1] if below else keys[0])]


def sglang_draft_len(args: SglangArgs, batch: int, adaptive: Optional[dict[str, Any]] = None) -> int:
    """Draft tokens per request SGLang starts with at ``batch`` for ``args`` (and its adaptive config)."""
    if not args.speculative_adaptive:
        return sglang_static_draft_len(args)
    steps = sorted(set(sglang_adaptive_slot(adaptive, batch)["candidate_steps"]))
    return args.speculative_num_steps if args.speculative_num_steps in steps else steps[len(steps) // 2]


def sglang_per_batch(args: SglangArgs, max_batch: int, adaptive: Optional[dict] = None) -> list[int]:
    """:func:`sglang_draft_len` for every batch size 1..max_batch."""
    return [sglang_draft_len(args, b, adaptive) for b in range(1, max_batch + 1)]
