"""Acceptance metrics of speculative decoding, in vLLM's convention.

Terms (chain drafting, one target verification per step):

* a **step** (vLLM: a *draft*) is one target verification of a proposed chain of D tokens;
* ``accepted_per_pos[k]`` (k = 0..D-1) counts the steps whose draft position k+1 was accepted.
  Acceptance is a prefix, so the counts never increase with k;
* **AL** (acceptance length) = tokens produced by a step = accepted drafts + 1 bonus token,
  so 1 <= AL <= D+1, and mean AL = 1 + accepted / steps;
* **joint** acceptance ``joint[k] = P(accepted >= k+1) = accepted_per_pos[k] / steps``;
* **conditional** acceptance ``a_k = joint[k] / joint[k-1]`` (``joint[-1] = 1``), so that
  ``E[AL] = 1 + sum_k prod_{i<=k} a_i`` as in the acceptance profile.

Confidence intervals treat the **request** as the unit (steps within one request are
correlated): either a percentile bootstrap over requests with a fixed seed (default: 2000
resamples, seed 0, 95 %) or the normal approximation of the ratio estimator (delta method,
``se = sqrt(sum_r (a_r - R n_r)^2 / (m (m-1))) / mean(n)`` with a_r accepted and n_r steps of
request r and R = sum a / sum n).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

PROFILE_FORMAT = "trtspec.acceptance/v1"
CI_METHODS = ("bootstrap", "normal")


@dataclass(frozen=True)
class RequestRecord:
    """Counters of one finished request.

    ``num_drafts``: steps that verified a draft; ``accepted_tokens``: drafts accepted in total;
    ``accepted_per_pos``: per-position accepted counts (length = max D), or None when the source
    reports totals only (Triton, some servers); ``output_tokens``: tokens generated;
    ``latency_s``: seconds from submission to the last token (0 when unknown).
    """

    question_id: str
    category: str
    num_drafts: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...] | None = None
    output_tokens: int = 0
    latency_s: float = 0.0
    draft_tokens: int = 0

    def __post_init__(self) -> None:
        if self.num_drafts < 0 or self.accepted_tokens < 0 or self.output_tokens < 0 or self.latency_s < 0:
            raise ValueError(f"request {self.question_id!r}: counters must be >= 0, got {self}")
        if self.accepted_per_pos is not None:
            pp = tuple(int(x) for x in self.accepted_per_pos)
            object.__setattr__(self, "accepted_per_pos", pp)
            if sum(pp) != self.accepted_tokens:
                raise ValueError(f"request {self.question_id!r}: accepted_per_pos sums to {sum(pp)}, "
                                 f"accepted_tokens is {self.accepted_tokens}")
            if any(b > a for a, b in zip((self.num_drafts,) + pp, pp)) or any(x < 0 for x in pp):
                raise ValueError(f"request {self.question_id!r}: accepted_per_pos {list(pp)} must be >= 0 and "
                                 f"non-increasing, starting at most at num_drafts={self.num_drafts}")

    @property
    def mean_al(self) -> float:
        """Mean AL of this request (1 + accepted / drafts); 1.0 without drafts."""
        return 1.0 + self.accepted_tokens / self.num_drafts if self.num_drafts else 1.0


@dataclass(frozen=True)
class Interval:
    """A confidence interval for mean AL: ``(low, high)`` at ``level``, by ``method``."""

    low: float
    high: float
    level: float
    method: str


@dataclass(frozen=True)
class AcceptanceSummary:
    """Aggregated acceptance of a set of requests (or of server counters)."""

    num_requests: int
    num_steps: int
    accepted_tokens: int
    mean_al: float
    rates: tuple[float, ...]           # a_k, k = 1..D (conditional)
    joint: tuple[float, ...]           # P(accepted >= k), k = 1..D
    histogram: tuple[int, ...]         # steps with AL = 1..D+1
    rates_fitted: bool = False         # True: rates are the constant a fitted to mean AL (no per-position data)
    ci: Interval | None = None
    draft_len: int = 0

    def to_dict(self) -> dict:
        out = {
            "num_requests": self.num_requests, "num_steps": self.num_steps, "accepted_tokens": self.accepted_tokens,
            "mean_al": self.mean_al, "rates": list(self.rates), "joint": list(self.joint),
            "histogram": list(self.histogram), "rates_fitted": self.rates_fitted, "draft_len": self.draft_len,
        }
        if self.ci is not None:
            out["ci"] = {"low": self.ci.low, "high": self.ci.high, "level": self.ci.level, "method": self.ci.method}
        return out


def rates_from_counts(num_steps: int, accepted_per_pos: Sequence[int]) -> tuple[list[float], list[float]]:
    """(conditional a_k, joint P(accepted >= k)) from per-position counts over ``num_steps`` steps.

    A position that no step reached (joint[k-1] == 0) gets a_k = 0.0.
    """
    if num_steps <= 0:
        return [0.0] * len(accepted_per_pos), [0.0] * len(accepted_per_pos)
    joint = [c / num_steps for c in accepted_per_pos]
    rates, prev = [], 1.0
    for j in joint:
        rates.append(j / prev if prev > 0 else 0.0)
        prev = j
    return rates, joint


def histogram_from_counts(num_steps: int, accepted_per_pos: Sequence[int]) -> list[int]:
    """Steps with AL = 1, 2, ..., D+1: exactly j accepted = count(>= j) - count(>= j+1)."""
    ge = [num_steps] + list(accepted_per_pos) + [0]
    return [ge[j] - ge[j + 1] for j in range(len(accepted_per_pos) + 1)]


def expected_al(rates: Sequence[float]) -> float:
    """E[AL] = 1 + sum_k prod_{i<=k} a_i."""
    total, prod = 1.0, 1.0
    for a in rates:
        prod *= a
        total += prod
    return total


def fit_constant_rate(mean_al: float, draft_len: int) -> float:
    """The a in [0, 1] with 1 + a + a^2 + ... + a^D = ``mean_al`` (bisection, 1e-12)."""
    if draft_len < 1:
        raise ValueError(f"draft_len={draft_len}: expected >= 1")
    if not 1.0 <= mean_al <= draft_len + 1 + 1e-9:
        raise ValueError(f"mean_al={mean_al}: expected within [1, draft_len + 1 = {draft_len + 1}]")
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if expected_al([mid] * draft_len) < mean_al:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def al_interval(records: Sequence[RequestRecord], *, method: str = "bootstrap", level: float = 0.95,
                resamples: int = 2000, seed: int = 0) -> Interval | None:
    """Confidence interval of mean AL over requests (see module docstring); None with < 2 requests."""
    if method not in CI_METHODS:
        raise ValueError(f"method={method!r}: expected one of {CI_METHODS}")
    if not 0 < level < 1:
        raise ValueError(f"level={level}: expected in (0, 1)")
    recs = [r for r in records if r.num_drafts > 0]
    if len(recs) < 2:
        return None
    n = np.array([r.num_drafts for r in recs], dtype=np.float64)
    a = np.array([r.accepted_tokens for r in recs], dtype=np.float64)
    ratio = a.sum() / n.sum()
    m = len(recs)
    if method == "normal":
        from statistics import NormalDist

        z = NormalDist().inv_cdf(0.5 + level / 2)
        se = math.sqrt(float(((a - ratio * n) ** 2).sum()) / (m * (m - 1))) / float(n.mean())
        return Interval(1.0 + ratio - z * se, 1.0 + ratio + z * se, level, "normal")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, m, size=(resamples, m))
    boot = a[idx].sum(axis=1) / n[idx].sum(axis=1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return Interval(1.0 + float(lo), 1.0 + float(hi), level, f"bootstrap(resamples={resamples}, seed={seed})")


def summarize(records: Sequence[RequestRecord], *, draft_len: int, ci_method: str = "bootstrap",
              level: float = 0.95, seed: int = 0) -> AcceptanceSummary:
    """Aggregate request records run with draft length ``draft_len`` (>= 1).

    With per-position counts on every record, a_k/joint/histogram are exact; otherwise the
    rates are the constant a fitted to mean AL (``rates_fitted``) and the histogram is empty.
    """
    if draft_len < 1:
        raise ValueError(f"draft_len={draft_len}: expected >= 1 (D=0 has no acceptance)")
    steps = sum(r.num_drafts for r in records)
    accepted = sum(r.accepted_tokens for r in records)
    mean_al = 1.0 + accepted / steps if steps else 1.0
    ci = al_interval(records, method=ci_method, level=level, seed=seed)
    if records and all(r.accepted_per_pos is not None for r in records):
        per_pos = [0] * draft_len
        for r in records:
            assert r.accepted_per_pos is not None
            if len(r.accepted_per_pos) > draft_len:
                raise ValueError(f"request {r.question_id!r}: {len(r.accepted_per_pos)} positions > "
                                 f"draft_len={draft_len}")
            for k, c in enumerate(r.accepted_per_pos):
                per_pos[k] += c
        rates, joint = rates_from_counts(steps, per_pos)
        return AcceptanceSummary(len(records), steps, accepted, mean_al, tuple(rates), tuple(joint),
                                 tuple(histogram_from_counts(steps, per_pos)), False, ci, draft_len)
    a = fit_constant_rate(min(mean_al, draft_len + 1.0), draft_len) if steps else 0.0
    rates = [a] * draft_len
    joint = list(np.cumprod(rates)) if rates else []
    return AcceptanceSummary(len(records), steps, accepted, mean_al, tuple(rates), tuple(float(j) for j in joint),
                             (), True, ci, draft_len)


def summarize_counters(num_steps: int, accepted_per_pos: Sequence[int] | None, accepted_tokens: int, *,
                       draft_len: int, num_requests: int = 0) -> AcceptanceSummary:
    """Summary from aggregate counters (e.g. Prometheus deltas): no confidence interval."""
    rec = RequestRecord("<counters>", "<all>", num_steps, accepted_tokens,
                        tuple(accepted_per_pos) if accepted_per_pos is not None else None)
    s = summarize([rec], draft_len=draft_len)
    return AcceptanceSummary(num_requests, s.num_steps, s.accepted_tokens, s.mean_al, s.rates, s.joint,
                             s.histogram, s.rates_fitted, None, draft_len)


def summarize_positions(reached: Sequence[int], accepted: Sequence[int], *, draft_len: int, num_requests: int = 0,
                        prior_steps: float = 0.0) -> AcceptanceSummary:
    """Summary from censoring-aware per-position counts (``trtspec.bench.steps.PositionCounts``):
    ``reached[k-1]`` request-steps proposed draft k with drafts 1..k-1 accepted, ``accepted[k-1]``
    of them accepted it; a_k = accepted_k / reached_k (0.0 where no step reached k).

    ``prior_steps`` m >= 0 shrinks each a_k toward the pooled rate p = sum(accepted) / sum(reached):
    a_k = (accepted_k + m p) / (reached_k + m), so deep positions with few samples lean on the
    others (m = 0: none). Mean AL is the measured 1 + sum(accepted) / reached_1; no histogram
    (capped steps make it ambiguous) and no confidence interval.
    """
    if draft_len < 1:
        raise ValueError(f"draft_len={draft_len}: expected >= 1")
    if len(reached) != len(accepted) or len(reached) > draft_len:
        raise ValueError(f"reached/accepted: expected equal lengths <= draft_len={draft_len}, got "
                         f"{len(reached)} and {len(accepted)}")
    if any(a < 0 or a > r for r, a in zip(reached, accepted)):
        raise ValueError(f"accepted={list(accepted)}: each must be in 0..reached ({list(reached)})")
    if prior_steps < 0:
        raise ValueError(f"prior_steps={prior_steps}: expected >= 0")
    r = list(reached) + [0] * (draft_len - len(reached))
    a = list(accepted) + [0] * (draft_len - len(accepted))
    pooled = sum(a) / sum(r) if sum(r) else 0.0
    rates = []
    for rk, ak in zip(r, a):
        den = rk + prior_steps
        rates.append((ak + prior_steps * pooled) / den if den > 0 else 0.0)
    joint = [float(x) for x in np.cumprod(rates)]
    steps = r[0]
    mean_al = 1.0 + sum(a) / steps if steps else 1.0
    return AcceptanceSummary(num_requests, steps, sum(a), mean_al, tuple(rates), tuple(joint), (), False, None,
                             draft_len)


@dataclass(frozen=True)
class Throughput:
    """Output throughput: ``tokens_per_s`` = all output tokens / wall seconds; ``per_user_tokens_per_s``
    = mean over requests of output tokens / request latency."""

    output_tokens: int
    wall_s: float
    tokens_per_s: float
    per_user_tokens_per_s: float


def throughput(records: Sequence[RequestRecord], wall_s: float) -> Throughput:
    if wall_s <= 0:
        raise ValueError(f"wall_s={wall_s}: expected > 0")
    tokens = sum(r.output_tokens for r in records)
    users = [r.output_tokens / r.latency_s for r in records if r.latency_s > 0]
    return Throughput(tokens, wall_s, tokens / wall_s, float(np.mean(users)) if users else 0.0)


def by_category(records: Iterable[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """Records grouped by category, in first-seen order."""
    out: dict[str, list[RequestRecord]] = {}
    for r in records:
        out.setdefault(r.category, []).append(r)
    return out


@dataclass(frozen=True)
class AcceptanceProfile:
    """The acceptance profile JSON (``trtspec.acceptance/v1``) read by ``trtspec plan --acceptance``."""

    drafter: str
    draft_len: int
    overall: AcceptanceSummary
    per_category: dict[str, AcceptanceSummary] = field(default_factory=dict)
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level fields (e.g. per-position counts)

    def to_dict(self) -> dict:
        return {**self.extra,
            "format": PROFILE_FORMAT,
            "drafter": self.drafter,
            "draft_len": self.draft_len,
            "rates": list(self.overall.rates),
            "joint": list(self.overall.joint),
            "mean_al": self.overall.mean_al,
            "num_steps": self.overall.num_steps,
            "per_category": {c: {"rates": list(s.rates), "mean_al": s.mean_al, "num_steps": s.num_steps,
                                 **({"ci": [s.ci.low, s.ci.high]} if s.ci else {})}
                             for c, s in self.per_category.items()},
            "source": self.source,
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path


def load_profile(path: str | Path) -> dict:
    """Read and check an acceptance profile JSON (format, rates in [0, 1], len(rates) == draft_len)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"{path}: field 'format' must be {PROFILE_FORMAT!r}, got {data.get('format')!r}")
    rates = data.get("rates")
    if not isinstance(rates, list) or not all(isinstance(a, (int, float)) and 0 <= a <= 1 for a in rates):
        raise ValueError(f"{path}: field 'rates' must be a list of numbers in [0, 1]")
    if len(rates) != data.get("draft_len"):
        raise ValueError(f"{path}: len(rates)={len(rates)} differs from draft_len={data.get('draft_len')}")
    return data


def build_profile(records: Sequence[RequestRecord], *, drafter: str, draft_len: int, source: str,
                  ci_method: str = "bootstrap", seed: int = 0) -> AcceptanceProfile:
    """Overall and per-category summaries of ``records`` as an acceptance profile."""
    overall = summarize(records, draft_len=draft_len, ci_method=ci_method, seed=seed)
    cats = {c: summarize(rs, draft_len=draft_len, ci_method=ci_method, seed=seed)
            for c, rs in by_category(records).items()}
    return AcceptanceProfile(drafter, draft_len, overall, cats, source)
