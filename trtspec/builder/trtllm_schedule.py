"""The draft length per batch size that a TensorRT-LLM version actually runs, and the schedule trtspec emits for it.

TensorRT-LLM resolves the runtime draft length of a batch of ``b`` requests from ``speculative_config``
(``get_draft_len_for_batch_size``): the value of the smallest ``draft_len_schedule`` key ``>= b``, 0 above the
largest key; ``max_concurrency: N`` is the schedule ``{N: max_draft_len}`` for decoding types with dynamic draft
length, and a speculation cut-off above ``N`` for the two-model n-gram drafter; decoding types without dynamic draft
length (DSpark, vanilla MTP where the version says so) draft ``max_draft_len`` at every batch. A version with
``min_runtime_draft_len`` (PR #16888) floors the resolved value at 1 for one-engine drafters.

One-engine drafters (EAGLE-3 one-model, MTP, DFlash, DSpark, one-model draft-target, SA) keep drafter state that
is refreshed only while drafting runs, so on a version without that floor a resolved 0 silently collapses their
acceptance for the rest of each affected request (PR #16888). :func:`plan_schedule` therefore never lets their
runtime value reach 0 there: where the planner wants D = 0 it uses D = 1, the smallest safe length, and says so;
on a version with the floor it emits the recipe's schedule as planned and says that the runtime drafts 1, not 0.
:func:`runtime_draft_len` is the resolution rule itself, used to check every emitted config batch by batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from trtspec.builder.engine_facts import EngineVersion


@dataclass(frozen=True)
class SchedulePlan:
    """The schedule part of ``speculative_config`` for one version, and what it means (README / recipe notes)."""

    max_draft_len: int
    draft_len_schedule: Optional[dict[int, int]] = None
    max_concurrency: Optional[int] = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def floor_of(facts: EngineVersion, decoding_type: str) -> int:
    """``min_runtime_draft_len`` of ``decoding_type`` on this version (0 where the version has none)."""
    floors = facts["min_runtime_draft_len"]
    return int(floors.get(decoding_type, 0)) if floors else 0


def is_static(facts: EngineVersion, decoding_type: str, mtp_layers: Optional[int] = None) -> bool:
    """Does this version draft ``max_draft_len`` at every batch for ``decoding_type`` (no per-batch length)?
    Vanilla MTP (more than one MTP layer) counts as static wherever the version's facts say a shorter runtime
    draft leaves MTP modules stale."""
    if decoding_type == "MTP" and (mtp_layers or 1) > 1 and facts["vanilla_mtp_static"]:
        return True
    return decoding_type in facts["static_draft_len"] and decoding_type in facts["one_engine"]


def is_dynamic(facts: EngineVersion, decoding_type: str, mtp_layers: Optional[int] = None) -> bool:
    """Does this version honour ``draft_len_schedule`` for ``decoding_type``?"""
    if decoding_type == "MTP" and (mtp_layers or 1) > 1:
        return bool(facts["vanilla_mtp_schedule_honoured"])
    return decoding_type in facts["dynamic_draft_len"]


def runtime_draft_len(spec: dict, batch: int, facts: EngineVersion, mtp_layers: Optional[int] = None) -> int:
    """The draft length ``facts``' version runs at ``batch`` for the emitted ``speculative_config`` ``spec``."""
    dtype, d = spec["decoding_type"], int(spec["max_draft_len"])
    schedule, max_conc = spec.get("draft_len_schedule"), spec.get("max_concurrency")
    if is_dynamic(facts, dtype, mtp_layers):
        if schedule is None and max_conc is not None:
            schedule = {int(max_conc): d}
        if schedule is None:
            return d
        hit = [int(k) for k in schedule if batch <= int(k)]
        value = int(schedule[min(hit)]) if hit else 0
        return max(value, floor_of(facts, dtype))
    if dtype in facts["one_engine"]:
        return d  # static one-engine drafter: no zero path, max_draft_len at every batch
    return 0 if max_conc is not None and batch > int(max_conc) else d  # two-model drafter's cut-off


def zero_draft_batches(spec: dict, facts: EngineVersion, max_batch_size: int,
                       mtp_layers: Optional[int] = None) -> list[int]:
    """Batch sizes in ``1..max_batch_size`` where a one-engine drafter would run at draft length 0 (must be [])."""
    if spec["decoding_type"] not in facts["one_engine"]:
        return []
    return [b for b in range(1, max_batch_size + 1) if runtime_draft_len(spec, b, facts, mtp_layers) == 0]


def _merge(schedule: dict[int, int]) -> dict[int, int]:
    """Neighbouring tiers with the same draft length become one (the larger bound is kept)."""
    items = sorted(schedule.items())
    return {k: v for i, (k, v) in enumerate(items) if i + 1 == len(items) or items[i + 1][1] != v}


def _tiers(schedule: dict[int, int]) -> str:
    lo, parts = 1, []
    for k, v in sorted(schedule.items()):
        parts.append(f"batch {lo}-{k}: D={v}" if lo < k else f"batch {k}: D={v}")
        lo = k + 1
    return ", ".join(parts)


def plan_schedule(*, decoding_type: str, max_draft_len: int, schedule: Optional[dict[int, int]],
                  max_concurrency: Optional[int], max_batch_size: int, facts: EngineVersion,
                  mtp_layers: Optional[int] = None) -> SchedulePlan:
    """The ``max_draft_len`` / ``draft_len_schedule`` / ``max_concurrency`` to emit for the planner's wish
    (``schedule``: inclusive upper batch bound -> D, above the largest key: 0; or ``max_concurrency``)."""
    d, label, notes = int(max_draft_len), facts.label, []
    schedule = {int(k): int(v) for k, v in (schedule or {}).items()} or None
    if max_concurrency is not None and int(max_concurrency) >= max_batch_size:
        notes.append(f"max_concurrency {max_concurrency} >= max_batch_size {max_batch_size} changes nothing: "
                     "left out (speculation at every batch)")
        max_concurrency = None
    wanted = schedule if schedule else ({int(max_concurrency): d} if max_concurrency else None)
    if is_static(facts, decoding_type, mtp_layers):
        why = ("vanilla MTP (more than one MTP layer) keeps a static draft length" if decoding_type == "MTP"
               else f"{decoding_type} has no per-batch draft length")
        if wanted and (min(wanted.values()) < d or max(wanted) < max_batch_size):
            notes.append(f"{label}: {why}; the planned {_tiers(wanted)} (D=0 above) cannot be expressed, so "
                         f"{decoding_type} drafts {d} at every batch size")
        return SchedulePlan(max_draft_len=d, notes=tuple(notes))
    if not is_dynamic(facts, decoding_type, mtp_layers):  # two-model drafter (NGram): an on/off cut-off only
        on = [k for k, v in (wanted or {}).items() if v > 0]
        cut = max(on) if on and max(on) < max_batch_size else None
        if wanted and len(set(wanted.values()) - {0}) > 1:
            notes.append(f"{label}: {decoding_type} has no dynamic draft length: schedule {wanted} emitted as "
                         f"max_draft_len {d} with max_concurrency {cut}")
        return SchedulePlan(max_draft_len=d, max_concurrency=cut, notes=tuple(notes))
    floor = floor_of(facts, decoding_type)
    one_engine = decoding_type in facts["one_engine"]
    if wanted is None:
        return SchedulePlan(max_draft_len=d, notes=tuple(notes))
    reaches_zero = max(wanted) < max_batch_size or 0 in wanted.values()
    if floor >= 1 or not one_engine or not reaches_zero:
        if reaches_zero and floor >= 1:
            notes.append(f"{label}: where the plan says D=0 ({_zero_text(wanted, max_batch_size)}) the runtime "
                         f"drafts min_runtime_draft_len = {floor}, keeping {decoding_type}'s drafter state fresh")
        if schedule:
            return SchedulePlan(max_draft_len=d, draft_len_schedule=_merge(schedule), notes=tuple(notes))
        return SchedulePlan(max_draft_len=d, max_concurrency=max_concurrency, notes=tuple(notes))
    safe = {k: max(v, 1) for k, v in wanted.items()}
    if max(safe) < max_batch_size:
        safe[max_batch_size] = 1
    safe = _merge(safe)
    notes.append(f"{label} has no runtime floor on the draft length (PR #16888 not in it): a zero-draft tier would "
                 f"stop refreshing {decoding_type}'s drafter state and silently collapse acceptance, so D=1 (the "
                 f"smallest safe length) replaces D=0 ({_zero_text(wanted, max_batch_size)})")
    if len(safe) == 1:
        return SchedulePlan(max_draft_len=d, notes=tuple(notes))
    return SchedulePlan(max_draft_len=d, draft_len_schedule=safe, notes=tuple(notes))


def _zero_text(wanted: dict[int, int], max_batch_size: int) -> str:
    parts, lo = [], 1
    for k, v in sorted(wanted.items()):
        if v == 0:
            parts.append(f"batch {lo}-{k}" if lo < k else f"batch {k}")
        lo = k + 1
    if max(wanted) < max_batch_size:
        parts.append(f"batch > {max(wanted)}")
    return ", ".join(parts)
