"""Batch tiers of a recipe, each with the tree its target step verifies, and the plugins' size limits.

A recipe's TensorRT-LLM ``draft_len_schedule`` maps inclusive batch upper bounds to a draft length D
(``{4: 4, 8: 2, 32: 1}``: batch 1-4 drafts 4, 5-8 drafts 2, 9-32 drafts 1, above 32 speculation is
off). Each tier gets the tree the recipe's rows chose for it (``num_nodes`` nodes, ``topk`` children
per expanded node; a chain of ``D + 1`` nodes when the schedule moved the tier off its rows'
optimum) and, in the TensorRT engine, its own optimization profile (:mod:`trtspec.onnx.tensorrt`).
"""
from __future__ import annotations

from dataclasses import dataclass

#: Largest tree (nodes, root included) each plugin accepts: ``kMaxNodes`` in cpp/include/trtspec/kernels.h.
MAX_NODES = {"TrtSpecTreeMask": 4096, "TrtSpecVerifyGreedy": 4096, "TrtSpecVerifySample": 4096}
#: Longest chain TrtSpecVerifyBlock accepts: ``kMaxBlockDraft`` in cpp/include/trtspec/kernels.h.
MAX_BLOCK_DRAFT = 1024
#: The plugin node each verification mode ends in.
VERIFY_NODES = {"greedy": "TrtSpecVerifyGreedy", "sample": "TrtSpecVerifySample", "block": "TrtSpecVerifyBlock"}


class ExportError(ValueError):
    """The model, the recipe or the requested shapes cannot be exported."""


def check_tree_size(num_nodes: int, verify: str, topk: int = 1, where: str = "the tree") -> None:
    """Raise :class:`ExportError` unless a tree of ``num_nodes`` (root included) fits the plugins of ``verify``."""
    if verify not in VERIFY_NODES:
        raise ExportError(f"verify must be one of {tuple(VERIFY_NODES)}, got {verify!r}")
    limit = min(MAX_NODES["TrtSpecTreeMask"], MAX_NODES.get(VERIFY_NODES[verify], MAX_NODES["TrtSpecTreeMask"]))
    if not 1 <= num_nodes <= limit:
        raise ExportError(f"{where} has {num_nodes} nodes; TrtSpecTreeMask and {VERIFY_NODES[verify]} take 1..{limit} "
                          "nodes per tree (root included)")
    if verify == "block":
        if topk > 1:
            raise ExportError(f"{where} is a tree (topk={topk}, {num_nodes} nodes); TrtSpecVerifyBlock verifies chains "
                              "only: use --verify sample for trees")
        if num_nodes - 1 > MAX_BLOCK_DRAFT:
            raise ExportError(f"{where} drafts {num_nodes - 1} tokens; TrtSpecVerifyBlock takes chains of at most "
                              f"{MAX_BLOCK_DRAFT} drafts")


@dataclass(frozen=True)
class Tier:
    """Batches ``lo..hi`` (inclusive) draft ``draft_len`` tokens per step as a tree of ``num_nodes`` nodes."""

    lo: int
    hi: int
    draft_len: int
    num_nodes: int
    topk: int = 1

    def __post_init__(self):
        if not 1 <= self.lo <= self.hi:
            raise ExportError(f"tier batch range {self.lo}..{self.hi} must satisfy 1 <= lo <= hi")
        if self.draft_len < 0 or self.num_nodes < self.draft_len + 1:
            raise ExportError(f"tier {self.lo}..{self.hi}: {self.num_nodes} nodes cannot hold a depth-{self.draft_len} "
                              "draft (need >= draft_len + 1)")
        if self.draft_len == 0 and self.num_nodes != 1:
            raise ExportError(f"tier {self.lo}..{self.hi} drafts nothing but has {self.num_nodes} nodes")

    @property
    def opt_batch(self) -> int:
        """The batch TensorRT tunes the tier's kernels for: the middle of its range."""
        return (self.lo + self.hi + 1) // 2


def _tier_tree(rows: list, lo: int, hi: int, d: int) -> tuple[int, int]:
    """(num_nodes, topk) of the tier: the largest tree among its rows that kept their optimum D, else a chain."""
    kept = [r for r in rows if lo <= int(r["batch"]) <= hi and int(r.get("draft_len", -1)) == d
            and int(r.get("schedule_draft_len", d)) == d]
    if not kept:
        return d + 1, 1
    best = max(kept, key=lambda r: int(r.get("num_nodes", d + 1)))
    return int(best.get("num_nodes", d + 1)), int(best.get("topk", 1))


def tiers_from_recipe(recipe, max_batch: int, verify: str = "greedy") -> list[Tier]:
    """The recipe's batch tiers up to ``max_batch``, each tree checked against the plugins of ``verify``.

    ``recipe``: a :class:`trtspec.recipes.recipe.Recipe` (``draft_len_schedule``, ``max_draft_len``,
    ``max_concurrency``, ``rows``). Batches above the schedule's largest bound get a one-node tier
    (D = 0: the verify step is a plain decoding step).
    """
    if max_batch < 1:
        raise ExportError(f"max_batch must be >= 1, got {max_batch}")
    schedule = {int(k): int(v) for k, v in (recipe.draft_len_schedule or {}).items()}
    if not schedule and int(recipe.max_draft_len) > 0:
        schedule = {int(recipe.max_concurrency or max_batch): int(recipe.max_draft_len)}
    tiers, lo = [], 1
    for bound, d in sorted(schedule.items()):
        hi = min(bound, max_batch)
        if lo > hi:
            break
        nodes, topk = _tier_tree(recipe.rows or [], lo, hi, d) if d else (1, 1)
        check_tree_size(nodes, verify, topk, where=f"the tree of batch tier {lo}..{hi} (D={d})")
        tiers.append(Tier(lo, hi, d, nodes, topk))
        lo = hi + 1
    if lo <= max_batch:
        tiers.append(Tier(lo, max_batch, 0, 1))
    return tiers


def tier_for_batch(tiers: list[Tier], batch: int) -> Tier:
    """The tier serving ``batch`` requests."""
    for t in tiers:
        if t.lo <= batch <= t.hi:
            return t
    raise ExportError(f"batch {batch} is outside the tiers' range {tiers[0].lo}..{tiers[-1].hi}")
