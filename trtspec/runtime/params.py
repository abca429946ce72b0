"""Typed configs of the runtime: sampling per request, speculation per engine. Defaults live here only."""
from __future__ import annotations

from dataclasses import dataclass, field

VERIFY_METHODS = ("greedy", "sample", "block")
SPECULATION_MODES = ("static", "adaptive")
DRAFTERS = ("draft_model", "ngram", "eagle3", "mtp", "dflash", "dspark")
#: drafters whose one forward drafts a whole block (D at most the block's drafts, chains only)
BLOCK_DRAFTERS = ("dflash", "dspark")


def tree_size(branching: int, depth: int) -> int:
    """Nodes of a top-k tree, root included: ``1 + K + (L-1) K^2`` (``1`` for depth 0)."""
    return 1 if depth == 0 else 1 + branching + (depth - 1) * branching * branching


@dataclass(frozen=True)
class SamplingParams:
    """Per request. ``temperature`` 0 = greedy; ``top_k`` 0 = off; ``top_p`` 1.0 = off;
    ``max_new_tokens``: tokens to generate at most; ``stop_token_ids``: end generation (kept in the output);
    ``seed``: this request's random stream in ``[0, 2**64)`` (its draft draws and its verification's
    uniforms, step by step), so the same request with the same seed samples the same tokens at any
    batch position, alone or among others; None = derived from the engine's seed and the order
    the request was added in."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self):
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 1 << 64):
            raise ValueError(f"seed must be None or an int in [0, 2**64), got {self.seed!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def transform(self) -> tuple[float, int, float]:
        return (self.temperature, self.top_k, self.top_p)


@dataclass(frozen=True)
class TreeShape:
    """A top-k draft tree: ``topk`` children per expanded node, ``depth`` levels
    (``1 + K + (L-1) K^2`` nodes with the root); ``topk=1`` is a chain of ``depth`` drafts."""

    topk: int
    depth: int

    def __post_init__(self):
        if self.topk < 1 or self.depth < 0:
            raise ValueError(f"tree needs topk >= 1 and depth >= 0, got topk={self.topk}, depth={self.depth}")

    @classmethod
    def parse(cls, text: str) -> "TreeShape":
        """``"topk=K,depth=L"`` -> TreeShape(K, L)."""
        try:
            kv = dict(part.split("=", 1) for part in text.replace(" ", "").split(","))
            if set(kv) != {"topk", "depth"}:
                raise KeyError(sorted(kv))
            return cls(topk=int(kv["topk"]), depth=int(kv["depth"]))
        except (ValueError, KeyError) as e:
            raise ValueError(f"tree must look like 'topk=K,depth=L', got {text!r}") from e


@dataclass(frozen=True)
class SpecConfig:
    """Speculation settings of an engine.

    ``draft_len``: D, drafts per step for a chain (0 = plain decoding through the same path);
    ``tree``: a top-k tree instead of a chain (its depth replaces ``draft_len``);
    ``verify``: greedy | sample | block (block: chains only; a step with a sampled request under
    greedy is verified by sample); ``draft_len_schedule``: batch size ->
    D with TensorRT-LLM semantics (key = inclusive upper bound of a batch tier; above the largest
    key D = 0); ``siblings_without_replacement``: Gumbel-top-k siblings in sample mode;
    ``max_draft_len`` / ``max_tree_nodes``: configured limits; ``seed``: the engine's seed, from
    which a request without its own SamplingParams.seed gets one (by the order it was added in);
    ``speculation``: ``static`` (the D above, or the schedule's, every step) or ``adaptive`` (each
    step's depths in 0..max_depth chosen by :mod:`trtspec.runtime.controller`).
    """

    draft_len: int = 4
    tree: TreeShape | None = None
    verify: str = "greedy"
    draft_len_schedule: dict[int, int] | None = None
    siblings_without_replacement: bool = False
    max_draft_len: int = 16
    max_tree_nodes: int = 256
    seed: int = 0
    speculation: str = "static"
    schedule_items: tuple = field(default=(), init=False, repr=False)

    def __post_init__(self):
        if self.verify not in VERIFY_METHODS:
            raise ValueError(f"verify must be one of {VERIFY_METHODS}, got {self.verify!r}")
        if self.speculation not in SPECULATION_MODES:
            raise ValueError(f"speculation must be one of {SPECULATION_MODES}, got {self.speculation!r}")
        if not 0 <= self.draft_len <= self.max_draft_len:
            raise ValueError(f"draft_len must be in 0..max_draft_len={self.max_draft_len}, got {self.draft_len}")
        if self.tree is not None:
            if self.tree.depth > self.max_draft_len:
                raise ValueError(f"tree depth {self.tree.depth} exceeds max_draft_len={self.max_draft_len}")
            n = tree_size(self.tree.topk, self.tree.depth)
            if n > self.max_tree_nodes:
                raise ValueError(f"tree topk={self.tree.topk},depth={self.tree.depth} has {n} nodes, over "
                                 f"max_tree_nodes={self.max_tree_nodes}")
            if self.verify == "block" and self.tree.topk > 1:
                raise ValueError("verify='block' verifies chains only; use a chain (topk=1) or verify='sample'")
        sched = self.draft_len_schedule
        if sched:
            if any(int(k) < 1 for k in sched):
                raise ValueError(f"draft_len_schedule keys are batch sizes >= 1, got {sorted(sched)}")
            bad = {k: v for k, v in sched.items() if not 0 <= v <= self.max_draft_len}
            if bad:
                raise ValueError(f"draft_len_schedule values must be in 0..max_draft_len={self.max_draft_len}: {bad}")
            object.__setattr__(self, "schedule_items", tuple(sorted((int(k), int(v)) for k, v in sched.items())))

    @property
    def branching(self) -> int:
        return 1 if self.tree is None else self.tree.topk

    @property
    def max_depth(self) -> int:
        """The deepest draft any step can propose."""
        if self.schedule_items:
            return max(v for _, v in self.schedule_items)
        return self.draft_len if self.tree is None else self.tree.depth

    def depth_for_batch(self, batch: int) -> int:
        """D for a batch of ``batch`` requests: the schedule's tier (smallest key >= batch; 0 above
        the largest key), else the fixed ``draft_len`` / tree depth."""
        if self.schedule_items:
            return next((v for k, v in self.schedule_items if batch <= k), 0)
        return self.max_depth
