"""The acceptance check at the end of training: greedy chain decoding of held-out prompts with the local runtime.

All prompts run as one batch at D = the drafter's check length; every request-step adds its (drafted, accepted)
to per-position counts, censoring-aware: a step whose chain was capped below position k by the token budget
does not count against k. ``rates[k-1] = accepted[k-1] / reached[k-1]`` and the expected AL at every D <= the
check length follow (``AL(D) = 1 + sum_{k<=D} prod_{i<=k} rates_i``). The outputs are compared with the target's
own greedy decoding of the same prompts (``greedy_match``: the fraction that are identical).

The result is a ``trtspec.acceptance/v1`` profile (what ``trtspec plan --acceptance FILE`` and the recipe book
read), written as ``acceptance.json`` into the drafter's directory.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counts:
    """``reached[k-1]``: request-steps that proposed draft k with drafts 1..k-1 accepted; ``accepted[k-1]``:
    of those, the ones that accepted draft k."""

    reached: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def add(self, drafted: int, accepted: int) -> None:
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(f"drafted={drafted}, accepted={accepted}: expected 0 <= accepted <= drafted")
        if len(self.reached) < drafted:
            self.reached += [0] * (drafted - len(self.reached))
            self.accepted += [0] * (drafted - len(self.accepted))
        for k in range(min(drafted, accepted + 1)):
            self.reached[k] += 1
        for k in range(accepted):
            self.accepted[k] += 1

    def rates(self, n: int) -> list[float]:
        return [self.accepted[k] / self.reached[k] if k < len(self.reached) and self.reached[k] else 0.0
                for k in range(n)]


def al_curve(rates: list[float]) -> list[float]:
    """Expected AL at D = 1..len(rates) of a chain with conditional rates ``rates``."""
    out, joint, al = [], 1.0, 1.0
    for a in rates:
        joint *= a
        al += joint
        out.append(al)
    return out


def measure(target_dir, draft_dir, drafter: str, prompts: list[list[int]], draft_len: int, new_tokens: int,
            device: str = "cpu") -> dict:
    """Greedy decoding of ``prompts`` (one batch) with and without the drafter at D = ``draft_len``."""
    from trtspec.runtime import load_pipeline

    base = load_pipeline(target_dir, draft_len=0, device=device)
    ref = [o for o, _ in base.generate_ids(prompts, max_new_tokens=new_tokens)]
    pipe = load_pipeline(target_dir, draft_dir, drafter=drafter, draft_len=draft_len, device=device)
    eng = pipe.engine(max_batch_size=len(prompts))
    for i, ids in enumerate(prompts):
        eng.add_request(i, ids, pipe.params(max_new_tokens=new_tokens))
    got = {i: [] for i in range(len(prompts))}
    seen = {i: (0, 0) for i in range(len(prompts))}
    counts = Counts()
    steps = tokens = 0
    while eng.has_work():
        for o in eng.step():
            got[o.request_id] += o.new_token_ids
            d0, a0 = seen[o.request_id]
            drafted, accepted = o.stats.draft_tokens - d0, o.stats.accepted_tokens - a0
            seen[o.request_id] = (o.stats.draft_tokens, o.stats.accepted_tokens)
            steps += 1
            tokens += len(o.new_token_ids)
            if drafted:
                counts.add(drafted, accepted)
    match = sum(got[i] == ref[i] for i in range(len(prompts))) / len(prompts)
    return {"counts": counts, "greedy_match": match, "request_steps": steps, "tokens": tokens}


def profile(result: dict, drafter: str, draft_len: int, source: str, category: str = "coding") -> dict:
    """The ``trtspec.acceptance/v1`` document of a :func:`measure` result."""
    counts: Counts = result["counts"]
    if not counts.reached or counts.reached[0] < 1:
        raise ValueError("acceptance check: no verification step drafted anything")
    rates = counts.rates(draft_len)
    curve = al_curve(rates)
    joint, j = [], 1.0
    for a in rates:
        j *= a
        joint.append(j)
    steps = counts.reached[0]
    mean_al = 1 + sum(counts.accepted) / steps
    summary = {"rates": rates, "mean_al": mean_al, "num_steps": steps}
    return {"counts": {"reached": counts.reached, "accepted": counts.accepted}, "format": "trtspec.acceptance/v1",
            "drafter": drafter, "draft_len": draft_len, "rates": rates, "joint": joint, "mean_al": mean_al,
            "num_steps": steps, "al_by_draft_len": {str(d + 1): round(v, 6) for d, v in enumerate(curve)},
            "greedy_match": result["greedy_match"], "per_category": {category: summary}, "source": source}
