"""One statistics object for speculative decoding, per request and aggregated.

Terms (per target step): the drafter proposes ``draft tokens``; the verifier *accepts* a prefix
of them (``accepted``); the target always adds one *bonus* token. So a step emits
``AL = accepted + 1`` tokens (before truncation at a stop token or the token budget).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class SpecStats:
    """Counters and times. ``steps``: target forward passes; ``drafts``: steps with >= 1 draft
    token; ``accepted_per_pos[k]``: steps that accepted the draft at depth k+1;
    ``draft_len_counts[d]``: steps that proposed d draft tokens (the chosen draft lengths); times in seconds."""

    steps: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    draft_len_counts: list[int] = field(default_factory=list)
    output_tokens: int = 0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    total_time_s: float = 0.0

    def record_step(self, draft_tokens: int, accepted: int, emitted: int) -> None:
        """Count one target step that proposed ``draft_tokens``, accepted ``accepted`` and kept ``emitted``."""
        self.steps += 1
        self.drafts += int(draft_tokens > 0)
        self.draft_tokens += draft_tokens
        self.accepted_tokens += accepted
        if len(self.accepted_per_pos) < accepted:
            self.accepted_per_pos += [0] * (accepted - len(self.accepted_per_pos))
        for k in range(accepted):
            self.accepted_per_pos[k] += 1
        if len(self.draft_len_counts) <= draft_tokens:
            self.draft_len_counts += [0] * (draft_tokens + 1 - len(self.draft_len_counts))
        self.draft_len_counts[draft_tokens] += 1
        self.output_tokens += emitted

    @property
    def mean_al(self) -> float:
        """Mean acceptance length including the bonus token: ``1 + accepted / steps`` (0 before any step)."""
        return 1.0 + self.accepted_tokens / self.steps if self.steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed draft tokens (0 when nothing was proposed)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of total (wall) time."""
        return self.output_tokens / self.total_time_s if self.total_time_s > 0 else 0.0

    def merge(self, other: "SpecStats", *, times: bool = True) -> "SpecStats":
        """Add ``other``'s counters (and times, unless ``times=False``) into self; returns self."""
        for name in ("steps", "drafts", "draft_tokens", "accepted_tokens", "output_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.accepted_per_pos = _add_lists(self.accepted_per_pos, other.accepted_per_pos)
        self.draft_len_counts = _add_lists(self.draft_len_counts, other.draft_len_counts)
        if times:
            self.draft_time_s += other.draft_time_s
            self.verify_time_s += other.verify_time_s
            self.total_time_s += other.total_time_s
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(mean_al=self.mean_al, acceptance_rate=self.acceptance_rate, tokens_per_s=self.tokens_per_s)
        return d


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    """Element-wise sum, the shorter list padded with zeros."""
    n = max(len(a), len(b))
    return [x + y for x, y in zip(a + [0] * (n - len(a)), b + [0] * (n - len(b)))]
