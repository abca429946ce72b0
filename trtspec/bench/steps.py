"""Traced engine steps: what every step of trtspec's runtime engine drafted, accepted and emitted per
request, and how long it took, for the predicted-versus-swept comparison (``sweep``).

The workload is served the way a server serves it: **continuous batching with refill**. Every
engine (one per D) has B rows and every prompt queued; when a request finishes, the next one joins
at the following step. A newcomer's prefill (the target's and the drafter's) runs in an untimed
:meth:`~trtspec.runtime.engine.Engine.admit` before the timed step, as the planner models decode
steps only. Two quantities come out of a trace:

* **steady-state decode throughput** at batch B and draft length D: tokens emitted / seconds over
  the *steady* steps, those in which all B rows were running (from the first step until the queue
  runs dry; the drain at the end, with fewer than B requests, is excluded). Requests are at every
  stage of their lives in these steps, as on a server: early and late tokens, and the last steps
  whose drafts the engine caps at a request's token budget. This is the oracle the planner's
  ``B * E[AL](D) / step(B, D)`` is judged against. Each steady step also records the context it
  attended to (the longest request of the batch), which the cost profile then uses.
* **per-position acceptance with censoring**: position k counts as *reached* in a step that
  proposed at least k drafts and accepted drafts 1..k-1; a_k = accepted_k / reached_k. A step whose
  chain the engine capped below k does not count against position k (summing accepted counts over
  all steps, as ``SpecStats.accepted_per_pos / drafts`` does, would).

:func:`paired_pass` steps the engines of all D **in turn** (one step of each D, then the next
round), so that a slow phase of a shared machine hits every D alike; the engines share the
pipeline's model weights (:func:`with_draft_len`).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


def with_draft_len(pipe: Any, draft_len: int) -> Any:
    """A view of ``pipe`` (``trtspec.runtime.Pipeline``) whose engines use D = ``draft_len`` (no
    schedule); it shares the target, the drafter's weights and the tokenizer with ``pipe``."""
    if draft_len < 0:
        raise ValueError(f"draft_len={draft_len}: expected >= 0")
    view = copy.copy(pipe)
    view.spec = dataclasses.replace(pipe.spec, draft_len=draft_len, tree=None, draft_len_schedule=None,
                                    speculation="static")
    view.adaptive = None
    return view


@dataclass
class PositionCounts:
    """Per draft position k = 1..len: ``reached[k-1]`` request-steps that proposed draft k with
    drafts 1..k-1 accepted; ``accepted[k-1]`` of those that accepted draft k."""

    reached: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def add(self, drafted: int, accepted: int) -> None:
        """One request-step that proposed ``drafted`` drafts and accepted the first ``accepted``."""
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(f"drafted={drafted}, accepted={accepted}: expected 0 <= accepted <= drafted")
        need = min(drafted, accepted + 1)
        if len(self.reached) < drafted:
            grow = drafted - len(self.reached)
            self.reached += [0] * grow
            self.accepted += [0] * grow
        for k in range(need):
            self.reached[k] += 1
        for k in range(accepted):
            self.accepted[k] += 1

    def merge(self, other: "PositionCounts") -> "PositionCounts":
        n = max(len(self.reached), len(other.reached))
        pad = lambda xs: list(xs) + [0] * (n - len(xs))  # noqa: E731
        return PositionCounts([a + b for a, b in zip(pad(self.reached), pad(other.reached))],
                              [a + b for a, b in zip(pad(self.accepted), pad(other.accepted))])

    def to_dict(self) -> dict:
        return {"reached": list(self.reached), "accepted": list(self.accepted)}


@dataclass
class Tally:
    """One (B, D) over one pass of the prompts. ``steady_*``: steady steps (see module docstring):
    engine steps, request-steps, drafts accepted, tokens emitted, seconds, and the summed context
    (longest request of the batch, in tokens); ``all_tokens`` / ``all_s``: every timed step (the
    drain included); ``total_tokens``: every token emitted; ``full_request_steps`` /
    ``full_accepted``: every request-step that drafted the full D, and its accepted drafts;
    ``positions``: acceptance counts over every step; ``by_category``: the same per prompt category."""

    steady_steps: int = 0
    steady_request_steps: int = 0
    steady_accepted: int = 0
    steady_tokens: int = 0
    steady_s: float = 0.0
    steady_context: int = 0
    all_tokens: int = 0
    all_s: float = 0.0
    total_tokens: int = 0
    full_request_steps: int = 0
    full_accepted: int = 0
    positions: PositionCounts = field(default_factory=PositionCounts)
    by_category: dict = field(default_factory=dict)

    @property
    def steady_tokens_per_s(self) -> float:
        return self.steady_tokens / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def all_tokens_per_s(self) -> float:
        return self.all_tokens / self.all_s if self.all_s > 0 else 0.0

    @property
    def steady_al(self) -> float:
        """Mean AL (bonus included) over the steady request-steps (1.0 without any)."""
        return 1.0 + self.steady_accepted / self.steady_request_steps if self.steady_request_steps else 1.0

    @property
    def full_al(self) -> float:
        """Mean AL over every request-step that drafted the full D (whole requests, not only the
        steady window; 1.0 without any)."""
        return 1.0 + self.full_accepted / self.full_request_steps if self.full_request_steps else 1.0

    @property
    def mean_context(self) -> float:
        """Mean context of the steady steps: tokens of the batch's longest request (0.0 without any)."""
        return self.steady_context / self.steady_steps if self.steady_steps else 0.0

    @property
    def steady_step_s(self) -> float:
        """Mean seconds per steady engine step (0.0 without any)."""
        return self.steady_s / self.steady_steps if self.steady_steps else 0.0


class _Tracer:
    """Turns an engine's cumulative per-request ``SpecStats`` into per-step deltas."""

    def __init__(self, draft_len: int, batch: int, categories: Mapping[Any, str], tally: Tally):
        self.d, self.batch, self.categories, self.tally = draft_len, batch, categories, tally
        self.prev: dict[Any, tuple[int, int]] = {}

    def record(self, outs: Sequence[Any], seconds: float | None, context: int = 0) -> None:
        """One step's outputs; ``seconds`` None: untimed; ``context``: the longest request it attended to."""
        t = self.tally
        accepted = emitted = 0
        for o in outs:
            dn0, da0 = self.prev.get(o.request_id, (0, 0))
            dn, da = int(o.stats.draft_tokens) - dn0, int(o.stats.accepted_tokens) - da0
            self.prev[o.request_id] = (int(o.stats.draft_tokens), int(o.stats.accepted_tokens))
            t.positions.add(dn, da)
            t.by_category.setdefault(self.categories[o.request_id], PositionCounts()).add(dn, da)
            if dn == self.d:
                t.full_request_steps += 1
                t.full_accepted += da
            accepted += da
            emitted += len(o.new_token_ids)
        t.total_tokens += emitted
        if seconds is None:
            return
        t.all_tokens += emitted
        t.all_s += seconds
        if len(outs) == self.batch:   # every row running: steady
            t.steady_steps += 1
            t.steady_request_steps += len(outs)
            t.steady_accepted += accepted
            t.steady_tokens += emitted
            t.steady_s += seconds
            t.steady_context += context


def paired_pass(pipes: Mapping[int, Any], ids: Sequence[list[int]], categories: Sequence[str], batch: int,
                max_new_tokens: int, now: Callable[[], float]) -> dict[int, Tally]:
    """Decode ``ids`` (prompt token ids; ``categories`` alongside) with continuous batching on
    ``batch`` rows, one engine per D (``pipes``: D -> pipeline), the engines stepped in turn; a
    finished request's row goes to the next prompt, whose prefill runs untimed before the step.
    Returns a :class:`Tally` per D. Greedy, ``max_new_tokens`` per request; ``now`` is the clock."""
    if len(ids) != len(categories):
        raise ValueError(f"categories: expected one per prompt ({len(ids)}), got {len(categories)}")
    any_pipe = next(iter(pipes.values()))
    ctx = int(any_pipe.target.config.max_position_embeddings)
    cats = {i: c for i, c in enumerate(categories)}
    longest = max(len(x) for x in ids)
    engines, tracers = {}, {}
    tallies = {d: Tally() for d in pipes}
    for d, pipe in pipes.items():
        eng = pipe.engine(max_batch_size=batch, max_seq_len=min(ctx, longest + max_new_tokens + 1))
        for i, prompt in enumerate(ids):
            eng.add_request(i, prompt, pipe.params(max_new_tokens=max_new_tokens))
        engines[d], tracers[d] = eng, _Tracer(d, batch, cats, tallies[d])
    while True:
        live = [d for d, e in engines.items() if e.has_work()]
        if not live:
            break
        for d in live:
            eng = engines[d]
            eng.admit()                                         # newcomers' prefill: untimed
            context = max(r.cache_len + 1 for r in eng.running)
            t0 = now()
            outs = eng.step()
            tracers[d].record(outs, now() - t0, context)
    return tallies
