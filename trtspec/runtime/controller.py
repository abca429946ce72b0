"""Adaptive speculation: before every step, choose each request's draft length for the batch's best
expected tokens per second.

Terms. Request i carries conditional acceptance estimates ``a_i1 .. a_iDmax`` (position k accepted
given 1..k-1 were), an exponential moving average over its own recent steps, seeded with a prior
(the recipe's or bench's acceptance profile). Its expected output of a step that drafts d tokens
(the bonus token included) is::

    p_ik   = a_i1 * ... * a_ik                       (position k accepted; non-increasing in k)
    E_i(d) = 1 + p_i1 + ... + p_id                   (concave in d)

A step with depths d = (d_1 .. d_B) verifies ``S = sum(n(d_i))`` tokens (``n(d) = d + 1`` for a
chain, the tree's node count for a tree) and drafts ``M = max(d_i)`` serial draft steps. Its cost,
from the device's cost table (``trtspec profile``'s ``cost_table.json``, one table per verification
method since sampled verification builds probability rows the greedy one does not)::

    packed verification  (engines that verify only the real tokens):   T_method(B, S / B) + M * Td_method(B)
    padded verification  (the trtspec runtime pads every request to M): T_method(B, n(M))  + M * Td_method(B)

and the controller maximises ``rate(d) = sum_i E_i(d_i) / cost(d)`` over every d with
``0 <= d_i <= cap_i`` (``cap_i``: the request's token budget), drafting nothing included. Exact
search: for a fixed M the cost depends on S alone, and since every E_i is concave the best d of a
given S takes the ``S - B`` largest gains ``p_ik`` (k <= M); so each (M, S) is one prefix sum.
With padded verification every request gets ``min(M, cap_i)`` (a shorter chain saves nothing).

Hysteresis (stated): the batch's depth M changes only when the best M's predicted rate beats the
current M's, re-evaluated on the same estimates, by more than ``hysteresis`` (default 2%), and at
least ``min_dwell`` steps (default 4) after the last change unless the batch size changed since or
the batch shares no request with the one M was chosen for: the dwell damps estimates that wander,
not a new batch (on the demo pair at concurrency 16, a depth chosen at B = 1 as a load started was
kept by the dwell while the batch grew to 4, drafting 13% below drafting nothing; at concurrency 1
each request's first steps kept the depth its predecessor's last steps chose). On a stationary
stream the EMAs settle and the choice stops moving; a loss of at most ``hysteresis`` is the price.
A step whose requests' budgets allow less than M (requests near their end) serves the best depth
within them and leaves M as it was: a budget running out is not a reason to change the batch's
depth (at concurrency 1 on the demo pair, the last step of every request switched M to 0, and the
dwell then held 0 for the next request's first steps).

Drafting margin (stated): a depth M > 0 is chosen over drafting nothing only when its predicted rate
beats drafting nothing by more than ``draft_margin`` (default 5%). What a step's price misses falls
on drafting alone -- a drafter's one-off catch-up on every token it missed when the batch starts
drafting again, which prices learned over steady steps under-weight, and prices learned from a
handful of steps -- so a near tie goes to drafting nothing (on the demo pair on one CPU core at
B = 16, a D = 1 step priced 4% behind drafting nothing served 12% fewer tokens/s end to end).

Catch-up (priced from the table, so sampled steps price it too). A drafter with its own cache (a
draft model, EAGLE-3, MTP) feeds what it missed before it drafts: every token committed while the
batch drafted nothing, and a newcomer's whole prompt (an adaptive engine feeds it only once a step
drafts). Given each request's ``backlog`` (tokens its drafter must feed) and ``remaining`` tokens,
a drafting step pays the one-off ``C = catch_up(B, max backlog)`` (the table's ``catch_up`` section
beyond the two tokens at most that a steady step feeds), charged to every token the batch's requests have left::

    rate(d) = sum_i E_i(d_i) / (cost(d) + sum_i E_i(d_i) * C / sum_i remaining_i)      (M > 0)

that is, drafting starts only when the time it saves over the requests' remaining tokens exceeds
the one-off: near the end of its requests, after a stretch of drafting nothing, it does not start
(on the demo pair on one CPU core the drafter feeds a backlog of 128 tokens for 16 requests in
36-43 ms, four decode steps at B = 16). A steady drafting batch has a backlog of one or two tokens:
nothing to charge.

Turnover (charged when the engine gives each request's token budget ``length_i``). A request that
finishes leaves its slot empty for the next step unless a request is waiting: in a closed loop (each
client sends its next request once the last one is answered) the replacement arrives during that
step. The empty slot still pays the step's fixed part, ``L(B, M) = cost(B, M) / B - (cost(B, M) -
cost(B - 1, M))`` (nothing at B = 1: no step runs), and drafting makes requests finish in fewer steps,
so it leaves slots empty more often: every token yielded brings its request ``1 / length_i`` nearer its
end. With ``v`` the share of finished requests whose slot the next step left empty (learned from the
engine's steps, :meth:`Controller.observe_turnover`) and ``1 / length`` the batch's mean of
``1 / length_i``, every step -- drafting nothing too -- is charged per token yielded::

    rate(d) = sum_i E_i(d_i) / (cost(d) + sum_i E_i(d_i) * (C / sum_i remaining_i + v * L(B, M) / length))

(on the demo pair on one CPU core at concurrency 4, with 32-token requests, full-batch steps served
D = 4 within 1% of drafting nothing, and end to end 11% less: its requests finished three times
as often, and 40% of its steps ran with an empty slot against 13%).

Seeds. A request joining the batch starts from the engine's pooled estimate: per-position rates
over every request's recent steps (weight ``pool`` per request-step, folded in once per step from
exact counts), itself seeded by the prior; so a uniform workload's newcomers start where their
predecessors ended, not at the prior. There is one pool per verification method (greedy
verification accepts the target's argmax, sampled verification its distribution: on the demo pair
the same prompts accept differently).

Cost. A choice whose inputs (the batch, its caps, the method, every estimate) did not change since
the last step reuses the last evaluation -- a batch drafting nothing learns nothing, so this is
most steps there; so does one whose batch drafts nothing by the last evaluation's choice while only
its caps shrank or its catch-up charge grew, which only lower drafting's rates -- and step prices
are memoized per shape.

Prices as served. The table times bare steps; a served step also pays a drafter's catch-up, the
loop's own work, contexts longer than the table's, and a machine slower or faster than when it was
timed. When the table states its ``clock``, the engine times each step on it (the target's prefill
of newcomers aside; the drafter's prefill of a newcomer runs in the first step that drafts, so
drafting pays for it) and :class:`ServedCosts` learns, per (table section, batch band, depth), the factor between what
steps cost as served and what the table says; a depth not measured yet borrows the nearest measured
depth's, a band not measured yet the nearest band's. While the batch drafts, one step in
``explore_every`` (16) serves the depth measured longest ago instead of the chosen one, so that
every depth is priced as it is served now, not only the chosen one (on the demo pair on one CPU
core at B = 1 the table prefers D = 4 where D = 2 serves 5% more tokens/s).
Greedy steps only: a sampled step's depths decide which tokens are drawn, so its price never
depends on timing and seeded sampled outputs stay reproducible.

Evidence. While the batch drafts nothing its estimates cannot learn, so a prior more pessimistic
than the workload keeps speculation off for good (a prior is measured on one workload and one
verification method -- the demo pair's, greedy on standard-library functions -- and serves every
other). So until a verification method's
pool has seen ``evidence`` request-steps (default 16) draft position 1, a batch that would draft
nothing drafts one token per request instead (an evidence probe) -- unless the costs say that no
depth could pay even if every draft were accepted (``B (M + 1) / cost(M) <= B / cost(0)`` for every
M). The pool weighs its prior as ``prior_weight`` request-steps (default 8) and is a running mean
until the EMA weight ``pool`` takes over, so those first steps move it as far as they should. They
cost a few steps once per method, where a wrong prior costs every step after.

Probes (off by default). With ``probe_every`` = n, after n steps of drafting nothing one step drafts
one token for every request, under the same condition; it follows a workload that drifts after the
evidence was gathered. A probe is not a switch of the chosen depth. They are off by default: a
drafter with its own cache (draft model, EAGLE-3) must first catch up on every token it missed (on
the demo pair at B = 16 a probe every 16 steps cost 15% of throughput before the catch-up was priced).

Estimates. After a step that drafted d and accepted a, positions ``1..min(d, a+1)`` were reached:
``a_ik += ema * ([k <= a] - a_ik)``. Positions the request has not reached follow its level: the
prior shifted by the mean logit difference between its estimates and the prior where it drafted
(a request accepting better than the prior near the root is expected to deeper too, so a longer
draft gets tried); positions it reached before but not in this step relax toward that level by
``relax`` per step; a step that drafted nothing for it changes nothing. Requests are
keyed by their id; everything the choice depends on is summed exactly (``math.fsum``) and ties go to
the smaller depth, so the choice does not depend on where a request sits in the batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from trtspec.runtime.params import tree_size

COST_TABLE_FORMAT = "trtspec.cost_table/v1"
#: verification method -> the cost-table section priced for it (block verification builds the same rows as sample)
METHOD_TABLES = {"greedy": "greedy", "sample": "sample", "block": "sample"}
DEFAULT_PRIOR = 0.7


class CostTableError(ValueError):
    """A cost table the controller cannot price with; the message names the field."""


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear through (xs, ys) (xs ascending); below xs[0]: ys[0]; above xs[-1]: the last
    segment extended (never decreasing), so a batch or token count past the grid still costs more."""
    if len(xs) == 1 or x <= xs[0]:
        return ys[0] if len(xs) == 1 or x <= xs[0] else ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + w * (ys[i] - ys[i - 1])
    slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
    return ys[-1] + slope * (x - xs[-1])


class _Grid:
    """``{B: {tokens: seconds}}`` with :func:`_interp` in tokens, then in B."""

    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, Mapping) or not raw:
            raise CostTableError(f"{where}: expected a mapping {{batch: {{tokens: seconds}}}}")
        rows = {}
        try:
            for b, row in raw.items():
                pts = sorted((int(t), float(s)) for t, s in row.items())
                if int(b) < 1 or not pts or any(t < 1 or not s > 0 for t, s in pts):
                    raise ValueError
                rows[int(b)] = pts
        except (TypeError, ValueError, AttributeError):
            raise CostTableError(f"{where}: expected batch sizes >= 1 mapping tokens >= 1 to seconds > 0") from None
        self.rows = dict(sorted(rows.items()))

    def __call__(self, batch: float, tokens: float) -> float:
        bs = list(self.rows)
        per_b = [_interp([t for t, _ in self.rows[b]], [s for _, s in self.rows[b]], tokens) for b in bs]
        return _interp(bs, per_b, batch)


class StepCosts:
    """Step seconds of one device from a cost table (``trtspec.cost_table/v1``, as a dict).

    ``target[B][T]``: one verification step with T tokens per request; ``draft[B]["1"]``: one draft
    step. An optional ``sample`` section ``{"target": ..., "draft": ...}`` prices steps verified by
    sampling (``trtspec profile --verify greedy,sample`` measures it); without it sampled steps are
    priced as greedy ones. An optional ``catch_up`` section ``{B: {T: seconds}}`` prices the drafter
    feeding T committed tokens per request of B before it drafts (``trtspec profile`` measures it):
    what a drafter with its own cache pays on the tokens it missed while the batch drafted nothing;
    without it that one-off is not priced. ``packed``: verification cost follows the verified tokens (see module
    docstring); False (the trtspec runtime) pads every request to the batch's depth.
    """

    def __init__(self, table: Mapping[str, Any], *, packed: bool = False):
        if table.get("format") != COST_TABLE_FORMAT:
            raise CostTableError(f"cost table: field 'format' must be {COST_TABLE_FORMAT!r}, got {table.get('format')!r}")
        self.packed = packed
        self.device = str(table.get("device", ""))
        clock = table.get("clock")
        if clock not in (None, "wall", "cpu"):
            raise CostTableError(f"cost table: field 'clock' must be 'wall' or 'cpu', got {clock!r}")
        self.clock: str | None = clock   # what its seconds were measured on; None: unknown (no learning)
        greedy = (_Grid(table.get("target"), "cost table 'target'"), _Grid(table.get("draft"), "cost table 'draft'"))
        self.tables = {"greedy": greedy, "sample": greedy}
        self.priced_sampled = "sample" in table
        self._memo: dict[tuple, float] = {}   # (method, batch, tokens, depth) -> seconds: a step's price is read
        #                                       for every depth before every step, from a handful of shapes
        if self.priced_sampled:
            s = table["sample"]
            if not isinstance(s, Mapping):
                raise CostTableError("cost table 'sample': expected {\"target\": ..., \"draft\": ...}")
            self.tables["sample"] = (_Grid(s.get("target"), "cost table 'sample.target'"),
                                     _Grid(s.get("draft"), "cost table 'sample.draft'"))
        self.feed = _Grid(table["catch_up"], "cost table 'catch_up'") if "catch_up" in table else None

    def seconds(self, method: str, batch: int, tokens_per_request: float, depth: int) -> float:
        """One step: verification of ``tokens_per_request`` tokens for each of ``batch`` requests plus
        ``depth`` serial draft steps, verified by ``method`` (greedy | sample | block)."""
        key = (method, batch, tokens_per_request, depth)
        got = self._memo.get(key)
        if got is None:
            target, draft = self.tables[METHOD_TABLES[method]]
            got = target(batch, tokens_per_request) + (depth * draft(batch, 1) if depth else 0.0)
            if len(self._memo) >= 65536:   # packed steps price fractional token counts: keep it bounded
                self._memo.clear()
            self._memo[key] = got
        return got

    def catch_up(self, batch: int, backlog: int) -> float:
        """The one-off of ``batch`` requests whose drafter must first feed up to ``backlog`` committed
        tokens each: the feed's price beyond the two tokens at most that a steady step feeds with its
        first draft (0 without a ``catch_up`` section)."""
        if self.feed is None or backlog <= 2:
            return 0.0
        key = ("catch_up", batch, backlog)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = max(self.feed(batch, backlog) - self.feed(batch, 2), 0.0)
        return got


class ServedCosts:
    """What steps cost as served against what the table says, learned from the engine's own steps
    on the table's clock, per (table section, batch band 1 | 2-3 | 4-7 | 8-15 | ..., batch depth M)::

        served(B, M) = factor(band, M) * table(B, M)

    ``factor`` is an EMA of measured / table seconds over the band's steps at depth M. It holds what
    the table's timing did not catch at that depth: how fast the machine runs now, contexts longer
    than the table's, the drafter's catch-up on the tokens committed since its last proposal, its
    own bookkeeping, kernels that step where the table's did not (on the demo pair on one CPU core,
    served steps at B = 1 grow 0.4 ms from 3 to 4 verified tokens where the table grows 0.0 ms, and
    a D = 1 proposal costs 0.3 ms beside the table's draft step: the table prefers D = 4 where D = 2
    serves 5% more tokens/s).

    A depth the band has not measured takes the factor of its nearest measured depth of the same
    kind (drafting or not), else of any kind; a band not measured yet, the nearest measured band's
    at that depth (how fast the machine runs now holds for every batch). So the table gives the shape
    between depths and the served steps the level. Each depth keeps its own factor rather than one
    level shared by all: a shared level moves with whichever depth was served last, and an offset
    per depth measured against it drifts with it, mispricing the depths not served since. The
    section's first step sets its scale outright; the first measurement of any other (band, depth)
    counts as much as the value it borrowed; afterwards one step moves a factor by at most a factor
    2 before weighting (an outlier, not a new level), a running mean until the EMA weight takes
    over. The target's prefill of newcomers is not in the steps timed: it costs the same whatever the
    depth. The drafter's catch-up is (the engine feeds a newcomer's prompt to the drafter in the first
    step that drafts): at concurrency 4 on the demo pair, leaving it out made drafting lose 13% end to
    end while the steps alone said that drafting paid. Its priced one-off joins the table's seconds
    that a step's measurement is set against, so the factor stays what the table misses. A step served
    after one of the other kind (drafting after drafting nothing, or the reverse) is not learned: it
    pays for the switch (on the demo pair on one CPU core, a step drafting nothing right after drafting
    steps costs 20% more than a steady one, 4.67 against 3.89 ms at B = 4: the caches hold the draft
    model), and the switch is rare where the dwell holds. Published values follow the running ones only
    when these move by more than ``PUBLISH``, so a stationary batch keeps reusing its evaluation.
    """

    PUBLISH = 0.02

    def __init__(self, weight: float):
        self.weight = weight
        self.running: dict[tuple, float] = {}     # (section, band, M) -> factor
        self.counts: dict[tuple, int] = {}
        self.last: dict[tuple, int] = {}          # (section, band, M) -> the controller's step that measured it
        self.published: dict[tuple, float] = {}
        self.version = 0
        self._factors: dict[tuple, float] = {}    # factor() per key, until the published values change

    @staticmethod
    def band(batch: int) -> int:
        return int(batch).bit_length()

    def factor(self, section: str, band: int, depth: int) -> float:
        """The published factor of (band, depth), else borrowed as the class docstring says, else 1."""
        got = self._factors.get((section, band, depth))
        if got is None:
            got = self._factors[section, band, depth] = self._factor(section, band, depth)
        return got

    def _factor(self, section: str, band: int, depth: int) -> float:
        got = self.published.get((section, band, depth))
        if got is not None:
            return got
        mine = [((k > 0) != (depth > 0), abs(k - depth), k, v) for (s, b, k), v in self.published.items()
                if s == section and b == band]   # the same kind first, then the nearest depth
        if mine:
            return min(mine)[3]
        near = [(abs(b - band), abs(k - depth), b, k, v) for (s, b, k), v in self.published.items() if s == section]
        return min(near)[4] if near else 1.0

    def price(self, section: str, batch: int, depth: int, table: float) -> float:
        return self.factor(section, self.band(batch), depth) * table

    def observe(self, section: str, batch: int, depth: int, seconds: float, table: float, step: int = 0) -> None:
        """A step of ``batch`` requests at depth ``depth`` took ``seconds`` where the table says ``table``."""
        key = (section, self.band(batch), depth)
        if not any(k[0] == section for k in self.published):   # the section's first step sets the scale
            value = seconds / table
        else:
            old = self.factor(section, key[1], depth)
            measured = min(max(seconds / table, old / 2), old * 2)
            prev = self.running.get(key, old)
            w = max(self.weight, 1.0 / (self.counts.get(key, 0) + 2))   # a running mean (the start counting once)
            value = prev + w * (measured - prev)
        self.running[key], self.counts[key], self.last[key] = value, self.counts.get(key, 0) + 1, step
        pub = self.published.get(key)
        if pub is None or abs(value - pub) > self.PUBLISH * pub:
            self.published[key] = value
            self.version += 1
            self._factors.clear()

    def age(self, section: str, batch: int, depth: int, step: int) -> float:
        """Steps since the band last measured ``depth`` (inf: never)."""
        last = self.last.get((section, self.band(batch), depth))
        return math.inf if last is None else step - last


@dataclass(frozen=True)
class AdaptiveConfig:
    """Settings of the controller (see the module docstring for the rule).

    ``costs``: the device's :class:`StepCosts`; ``prior``: conditional acceptance per draft position
    a_1, a_2, ... (the last value repeats past its end; default 0.7 everywhere); ``ema``: weight of
    the newest step in each estimate (default 0.1, about the last 20 steps); ``relax``: per-step pull
    of positions a step did not reach toward the request's level, and of that level toward the
    prior while it drafts nothing (default 0.002: about 350 steps to halve); ``hysteresis``:
    relative gain a new depth must promise (default 0.02); ``draft_margin``: relative gain any depth must
    promise over drafting nothing before it is chosen (default 0.05); ``min_dwell``: steps between depth
    changes (default 4); ``probe_every``: steps of drafting nothing before a one-token probe
    (default 0: never); ``pool``: weight of one request-step in the pooled estimate that seeds
    newcomers (default 0.02); ``learn``: weight of one step in the served step prices (:class:`ServedCosts`)
    (default 0.1; 0 prices from the table alone; only tables that state their ``clock`` are learned);
    ``explore_every``: while the batch drafts and step prices are learned, one step in this many serves
    the depth measured longest ago instead of the chosen one (default 16; 0: never); ``evidence``:
    request-steps at draft position 1 a verification method's pool needs before a batch may draft
    nothing without an evidence probe (default 16; 0: trust the prior); ``prior_weight``: request-steps
    the prior counts for in the pool's running mean (default 8); ``turnover``: charge the slots that
    finishing requests leave empty (default True; see the module docstring).
    """

    costs: StepCosts
    prior: tuple[float, ...] = (DEFAULT_PRIOR,)
    ema: float = 0.1
    relax: float = 0.002
    hysteresis: float = 0.02
    draft_margin: float = 0.05
    min_dwell: int = 4
    probe_every: int = 0
    pool: float = 0.02
    learn: float = 0.1
    explore_every: int = 16
    evidence: int = 16
    prior_weight: float = 8.0
    turnover: bool = True

    def __post_init__(self):
        prior = tuple(float(a) for a in self.prior)
        if not prior or any(not 0.0 <= a <= 1.0 for a in prior):
            raise ValueError(f"prior: expected acceptance rates in [0, 1], got {list(self.prior)}")
        object.__setattr__(self, "prior", prior)
        if not 0.0 < self.ema <= 1.0:
            raise ValueError(f"ema: expected in (0, 1], got {self.ema}")
        if not 0.0 <= self.relax <= 1.0:
            raise ValueError(f"relax: expected in [0, 1], got {self.relax}")
        if not 0.0 <= self.draft_margin < 1.0:
            raise ValueError(f"draft_margin: expected in [0, 1), got {self.draft_margin}")
        if not 0.0 <= self.learn <= 1.0:
            raise ValueError(f"learn: expected in [0, 1], got {self.learn}")
        if not 0.0 <= self.pool < 1.0:
            raise ValueError(f"pool: expected in [0, 1), got {self.pool}")
        if min(self.hysteresis, self.min_dwell, self.probe_every, self.explore_every, self.evidence) < 0:
            raise ValueError(f"hysteresis, min_dwell, probe_every, explore_every and evidence: expected >= 0, got "
                             f"{self.hysteresis}, {self.min_dwell}, {self.probe_every}, {self.explore_every}, "
                             f"{self.evidence}")
        if not self.prior_weight > 0:
            raise ValueError(f"prior_weight: expected > 0, got {self.prior_weight}")

    def prior_at(self, k: int) -> float:
        """Prior conditional acceptance of draft position k (1-based)."""
        return self.prior[min(k, len(self.prior)) - 1]


def prior_from_profile(doc: Mapping[str, Any]) -> tuple[float, ...]:
    """Per-position rates of an acceptance profile (``acceptance.json``: ``rates`` a_1..a_D)."""
    rates = doc.get("rates")
    if not isinstance(rates, list) or not rates:
        raise ValueError("acceptance profile: field 'rates' must be a non-empty list of a_k")
    return tuple(float(a) for a in rates)


def _mean_then_ema(ema: float, n: int, total: float) -> float:
    """Weight of ``n`` new observations in an estimate that is a running mean over ``total`` observations
    (its seed's weight included) until the EMA's weight for ``n`` observations, ``1 - (1 - ema)^n``, is larger."""
    return max(1.0 - (1.0 - ema) ** n, n / total)


def _logit(p: float) -> float:
    p = min(max(p, 0.01), 0.99)
    return math.log(p / (1.0 - p))


@dataclass
class _Estimate:
    """One request's conditional acceptance per position (``rates``), which positions it has ever
    reached (``observed``), the rates it was seeded with (``prior``), and its level against them
    (``offset``: mean logit difference over the positions it reached last). Positions it never
    reached take ``sigmoid(logit(prior_k) + offset)``: a request accepting more than its seed at the
    positions it drafts is expected to do so deeper too, so that the controller can find out that a
    longer draft pays. ``gains`` and ``cum`` are derived from ``rates`` after every update."""

    rates: list[float]
    observed: list[bool]
    prior: list[float] = field(default_factory=list)   # what it was seeded with
    offset: float = 0.0
    gains: list[float] = field(default_factory=list)   # p_k = a_1 ... a_k
    cum: list[float] = field(default_factory=list)     # cum[d] = p_1 + ... + p_d (cum[0] = 0)

    def __post_init__(self):
        self._derive()

    def _derive(self) -> None:
        p, self.gains, self.cum = 1.0, [], [0.0]
        for a in self.rates:
            p *= a
            self.gains.append(p)
            self.cum.append(self.cum[-1] + p)

    def update(self, reached: int, accepted: int, cfg: "AdaptiveConfig") -> None:
        """One step that reached positions 1..``reached`` (>= 1) and accepted 1..``accepted``."""
        prior = self.prior
        for k in range(reached):
            self.rates[k] += cfg.ema * ((1.0 if k < accepted else 0.0) - self.rates[k])
            self.observed[k] = True
        self.offset = math.fsum(_logit(self.rates[k]) - _logit(prior[k]) for k in range(reached)) / reached
        for k in range(reached, len(self.rates)):
            anchor = 1.0 / (1.0 + math.exp(-(_logit(prior[k]) + self.offset)))
            self.rates[k] = self.rates[k] + cfg.relax * (anchor - self.rates[k]) if self.observed[k] else anchor
        self._derive()


@dataclass
class Choice:
    """One step's decision: per-request depths (batch order), the batch depth M, the predicted
    tokens/s of every M considered, whether M changed, whether this step is a probe, and the
    drafter's catch-up it pays (seconds on the table; 0 when it drafts nothing)."""

    depths: list[int]
    depth: int
    rates: dict[int, float] = field(default_factory=dict)
    switched: bool = False
    probe: bool = False
    catch_up: float = 0.0


class Controller:
    """The per-engine controller: :meth:`choose` before a step, :meth:`observe` after it.

    ``max_depth``: D_max (chain length, or tree depth); ``branching``: K of a top-K tree (1: chain);
    requests are identified by ``request_id`` and forgotten when they leave the batch.
    """

    def __init__(self, cfg: AdaptiveConfig, max_depth: int, branching: int = 1):
        if max_depth < 0 or branching < 1:
            raise ValueError(f"max_depth >= 0 and branching >= 1 expected, got {max_depth}, {branching}")
        self.cfg, self.max_depth, self.branching = cfg, max_depth, branching
        self.prior = [cfg.prior_at(k) for k in range(1, max_depth + 1)]
        self.pools: dict[str, list[float]] = {}     # per verification method: pooled rates, seeds newcomers
        self.pool_seen: dict[str, list[bool]] = {}  # per method: which pool positions a step has reached
        self.pool_n: dict[str, list[int]] = {}      # per method: request-steps that reached each pool position
        self.estimates: dict[Any, _Estimate] = {}
        self.current: int | None = None        # the batch depth M in force
        self.since = 0                         # steps since M last changed
        self.since_batch = 0                   # the batch size when M last changed
        self._since_ids: frozenset = frozenset()  # the requests in the batch when M last changed
        self.switches = 0
        self.probes = 0
        self.idle = 0                          # consecutive steps that drafted nothing by choice
        self.steps = 0
        self._version = 0                      # bumped whenever an estimate or a pool changes
        costs = cfg.costs
        self.served = ServedCosts(cfg.learn) if cfg.learn > 0 and costs.clock is not None else None
        self.clock = costs.clock if self.served is not None else None   # what the engine times its steps on
        self.reused = 0                        # choices that reused the last evaluation
        self.vacancy = 0.0                     # published share of finished requests whose slot the next step left empty
        self._vacancy = [0.0, 0]               # (running value, finished requests seen)
        self._prev_kind: bool | None = None    # whether the last step timed drafted
        self._explore_next: int | None = None  # the depth an exploring run serves next
        self._last: tuple | None = None        # (key, caps, catch-up charge, per-depth results, best M) of the last evaluation:
        #                                        reused while the batch, its caps, the method and every estimate
        #                                        are unchanged (see _reusable)

    # -- estimates ---------------------------------------------------------------------------
    def _pool(self, method: str) -> list[float]:
        """The pooled rates of steps verified by ``method``: greedy and sampled verification accept
        different drafts (the target's argmax vs its distribution), so each learns its own."""
        pool = self.pools.get(method)
        if pool is None:
            pool = self.pools[method] = list(self.prior)
        return pool

    @property
    def pool(self) -> list[float]:
        """The pooled rates of greedy steps (see :meth:`_pool`)."""
        return self._pool("greedy")

    def _state(self, rid, method: str = "greedy") -> _Estimate:
        est = self.estimates.get(rid)
        if est is None:
            pool = self._pool(method)
            est = self.estimates[rid] = _Estimate(list(pool), [False] * self.max_depth, list(pool))
        return est

    def gains(self, rid) -> list[float]:
        """``p_k`` for k = 1..max_depth: the probability that draft position k is accepted."""
        return self._state(rid).gains

    def seed(self, rid, rates: Sequence[float]) -> None:
        """Set request ``rid``'s conditional acceptance estimates (positions 1..max_depth)."""
        est = self._state(rid)
        if len(rates) != self.max_depth or any(not 0.0 <= a <= 1.0 for a in rates):
            raise ValueError(f"rates: expected {self.max_depth} values in [0, 1], got {list(rates)}")
        est.rates[:] = [float(a) for a in rates]
        est._derive()
        self._version += 1

    def observe(self, request_ids: Sequence, drafted: Sequence[int], accepted: Sequence[int],
                method: str = "greedy") -> None:
        """Fold one step verified by ``method`` into each request's estimates: it drafted ``drafted[i]`` and
        accepted ``accepted[i]`` (a request that drafted nothing learns nothing)."""
        reached, hits = [0] * self.max_depth, [0] * self.max_depth
        for rid, d, a in zip(request_ids, drafted, accepted):
            if not 0 <= a <= d:
                raise ValueError(f"request {rid!r}: accepted={a} must be in 0..drafted={d}")
            if d == 0:
                continue
            self._state(rid, method).update(min(d, a + 1), a, self.cfg)
            for k in range(min(d, a + 1, self.max_depth)):
                reached[k] += 1
                hits[k] += k < a
        if not any(reached):
            return
        self._version += 1
        pool = self._pool(method)
        seen = self.pool_seen.setdefault(method, [False] * self.max_depth)
        counts = self.pool_n.setdefault(method, [0] * self.max_depth)
        for k, n in enumerate(reached):   # integer counts: the same whatever the batch order
            if n:
                counts[k] += n   # a running mean with the prior as prior_weight request-steps, then the EMA
                w = _mean_then_ema(self.cfg.pool, n, counts[k] + self.cfg.prior_weight)
                pool[k] += w * (hits[k] / n - pool[k])
                seen[k] = True
        self._pool_level(pool, seen)

    def _pool_level(self, pool: list[float], seen: list[bool]) -> None:
        """Pool positions no step has reached yet follow the pool's level: the prior shifted by the mean
        logit difference over the positions reached (as a request's own estimates do), so a workload
        accepting better than the prior near the root is expected to deeper too, and gets tried there."""
        reached = [k for k, s in enumerate(seen) if s]
        if not reached or len(reached) == len(seen):
            return
        offset = math.fsum(_logit(pool[k]) - _logit(self.prior[k]) for k in reached) / len(reached)
        for k, s in enumerate(seen):
            if not s:
                pool[k] = 1.0 / (1.0 + math.exp(-(_logit(self.prior[k]) + offset)))

    # -- step prices -------------------------------------------------------------------------
    def price(self, method: str, batch: int, tokens_per_request: float, depth: int, extra: float = 0.0) -> float:
        """Seconds of a step: the table's (plus ``extra``, the catch-up charged to it), or what such a step
        costs as served (:class:`ServedCosts`) when learned."""
        table = self.cfg.costs.seconds(method, batch, tokens_per_request, depth) + extra
        if not self.learns(method):
            return table
        return self.served.price(METHOD_TABLES[method], batch, depth, table)

    def learns(self, method: str) -> bool:
        """Whether steps verified by ``method`` are priced from measured steps: greedy ones only, when the
        table states its clock. A sampled step's depths decide which tokens rejection sampling draws, so
        they must not depend on timing: seeded sampled outputs stay reproducible."""
        return self.served is not None and method == "greedy"

    def observe_cost(self, method: str, batch: int, depth: int, seconds: float,
                     tokens_per_request: float | None = None, catch_up: float = 0.0) -> None:
        """Fold in what a step of ``batch`` requests at batch depth ``depth`` really took (on the table's
        clock, :attr:`clock`; admissions aside); ``tokens_per_request``: verified tokens (default: the
        padded step's, the depth's node count); ``catch_up``: the one-off it paid (:attr:`Choice.catch_up`)."""
        prev, self._prev_kind = self._prev_kind, depth > 0
        if not self.learns(method) or not seconds > 0 or batch < 1 or prev != (depth > 0):
            return   # a step after one of the other kind pays for the switch: not what the depth costs
        tokens = self._nodes(depth) if tokens_per_request is None else tokens_per_request
        table = self.cfg.costs.seconds(method, batch, tokens, depth) + catch_up
        self.served.observe(METHOD_TABLES[method], batch, depth, seconds, table, self.steps)

    def observe_turnover(self, finished: int, joined: int) -> None:
        """``finished`` requests finished in a step and the next step admitted ``joined``: fold the
        share whose slot stayed empty (``max(finished - joined, 0) / finished``) into :attr:`vacancy`, a
        running mean over finished requests until its weight falls to 0.1 per request; published when it
        moves by more than 0.05, so that an idle batch keeps reusing its evaluation."""
        if finished <= 0 or not self.cfg.turnover:
            return
        value, seen = self._vacancy
        seen += finished
        w = _mean_then_ema(0.1, finished, seen)
        value += w * (max(finished - joined, 0) / finished - value)
        self._vacancy = [value, seen]
        if abs(value - self.vacancy) > 0.05:
            self.vacancy = value
            self._version += 1

    def _slot_loss(self, method: str, batch: int, depth: int) -> float:
        """Seconds an empty slot costs a step of ``batch`` at ``depth``: the step's fixed part per slot."""
        full = self.price(method, batch, self._nodes(depth), depth)
        less = self.price(method, batch - 1, self._nodes(depth), depth) if batch > 1 else 0.0
        return max(full / batch - (full - less), 0.0)

    # -- the choice --------------------------------------------------------------------------
    def _nodes(self, depth: int) -> int:
        return tree_size(self.branching, depth)

    def _best_for_depth(self, costs, method, ests, caps, M, per_token=0.0, turnover=0.0) -> tuple[float, list[int]]:
        """Best rate with batch depth M (request i drafts at most min(M, cap_i)) and the depths achieving it;
        ``per_token``: the catch-up's seconds charged to each token a drafting step yields; ``turnover``:
        ``v / length``, charged at the empty slot's price per token any step yields."""
        B = len(caps)
        q = (per_token if M else 0.0) + (turnover * self._slot_loss(method, B, M) if turnover else 0.0)
        if not costs.packed or M == 0:
            tokens = B + math.fsum(e.cum[min(M, c)] for e, c in zip(ests, caps))
            return tokens / self.price(method, B, self._nodes(M), M, q * tokens), [min(M, c) for c in caps]
        gains = [e.gains for e in ests]
        # the S - B largest gains (k <= M), best S: gains of one request are non-increasing in k,
        # so a prefix of this order always takes each request's positions 1, 2, ... in turn
        items = sorted((-g[k], k, i) for i, (g, c) in enumerate(zip(gains, caps)) for k in range(min(M, c)))
        base = self._nodes(0)
        best_rate, best_n = B / self.price(method, B, base, M, q * B), 0
        total, accepted = B * base, 0.0
        for n, (neg, k, _) in enumerate(items, 1):
            total += self._nodes(k + 1) - self._nodes(k)
            accepted -= neg
            rate = (B + accepted) / self.price(method, B, total / B, M, q * (B + accepted))
            if rate > best_rate:
                best_rate, best_n = rate, n
        out = [0] * B
        for _, k, i in items[:best_n]:
            out[i] = max(out[i], k + 1)
        return best_rate, out

    def choose(self, request_ids: Sequence, caps: Sequence[int], method: str = "greedy",
               order_keys: Sequence | None = None, backlog: Sequence[int] | None = None,
               remaining: Sequence[int] | None = None, lengths: Sequence[int] | None = None) -> Choice:
        """Depths for the batch ``request_ids`` (batch order); ``caps[i]``: the most request i may
        draft this step (its token budget; 0 when its drafter cannot draft); ``method``: the
        step's verification. ``order_keys`` (default the ids) break exact ties between requests in
        packed mode, so the choice does not depend on batch order. ``backlog[i]``: committed tokens
        request i's drafter must feed before it drafts, and ``remaining[i]``: the tokens it may still
        produce -- given both, a drafting step is charged the catch-up; ``lengths[i]``: request i's whole
        token budget, given which steps are charged the turnover (see the module docstring)."""
        if len(caps) != len(request_ids):
            raise ValueError(f"caps: expected one per request ({len(request_ids)}), got {len(caps)}")
        per_token, catch = self._catch_up(len(caps), backlog, remaining)
        turnover = self._turnover(len(caps), lengths)
        live = set(request_ids)
        for rid in [r for r in self.estimates if r not in live]:
            del self.estimates[rid]
        self.steps += 1
        caps = [max(0, min(int(c), self.max_depth)) for c in caps]
        if order_keys is not None:   # a batch-order-free order of requests for tie-breaking
            perm = sorted(range(len(caps)), key=lambda i: str(order_keys[i]))
        else:
            perm = sorted(range(len(caps)), key=lambda i: str(request_ids[i]))
        ids = [request_ids[i] for i in perm]
        caps_p = [caps[i] for i in perm]
        top = max(caps_p, default=0)
        key = (method, tuple(ids), self._version, self.served.version if self.learns(method) else 0, turnover)
        reused = self._reusable(key, caps_p, per_token)
        if reused:   # nothing the choice depends on has changed
            found = self._last[3]
            self.reused += 1
        else:
            ests = [self._state(rid, method) for rid in ids]
            costs = self.cfg.costs
            found = {M: self._best_for_depth(costs, method, ests, caps_p, M, per_token, turnover)
                     for M in range(top + 1)}
        rates = {M: r for M, (r, _) in found.items()}
        margin = 1.0 + self.cfg.draft_margin
        score = {M: r / margin if M else r for M, r in rates.items()}   # drafting must beat nothing by the margin
        best = max(score, key=lambda M: (score[M], -M))
        if not reused:
            self._last = (key, caps_p, per_token, found, best)
        switched = False
        self.since += 1
        capped = self.current is not None and top < self.current   # the requests' budgets bound the depth
        if self.current is None:
            self.current, switched = best, True
        elif best != self.current and not capped:
            settled = (self.since >= self.cfg.min_dwell or len(caps) != self.since_batch
                       or self._since_ids.isdisjoint(ids))
            if score[best] > score[self.current] * (1.0 + self.cfg.hysteresis) and settled:
                self.current, switched = best, True
                self.switches += 1
        if switched:
            self.since, self.since_batch, self._since_ids = 0, len(caps), frozenset(ids)
        M = best if capped else self.current
        depths_p = found[M][1]
        probe = False
        if M == 0 and top > 0:
            self.idle += 1
            due = self.cfg.probe_every and self.idle >= self.cfg.probe_every
            if (due or self.needs_evidence(method)) and self._could_pay(method, caps_p, rates[0]):
                depths_p, M, probe = [min(1, c) for c in caps_p], 1, True
                self.probes += 1
        if M > 0:
            self.idle = 0
        if M > 0 and not probe:
            explore = self._explore_due(method, len(caps_p), M, top)
            if explore is not None:
                depths_p, M, probe = [min(explore, c) for c in caps_p], explore, True
                self.probes += 1
        depths = [0] * len(caps)
        for j, i in enumerate(perm):
            depths[i] = depths_p[j]
        return Choice(depths, M, rates, switched, probe, catch if M else 0.0)

    def _reusable(self, key: tuple, caps: list[int], per_token: float) -> bool:
        """Whether the last evaluation decides this step too: the same inputs, or the same requests and
        estimates with caps no larger and a catch-up charge no smaller while the batch drafts nothing by that
        evaluation's own choice -- both only lower the rates of drafting, so drafting nothing stays the best
        (an idle batch's backlog grows every step, and its requests' caps shrink as they near their end)."""
        if self._last is None or self._last[0] != key:
            return False
        last_caps, last_q = self._last[1], self._last[2]
        if caps == last_caps and per_token == last_q:
            return True
        idle = self.current == 0 and self._last[4] == 0
        return idle and per_token >= last_q and all(c <= d for c, d in zip(caps, last_caps))

    def _turnover(self, batch: int, lengths) -> float:
        """``v`` times the batch's mean ``1 / length_i``: the expected finished requests per token yielded
        whose slot the next step leaves empty (0 without ``lengths``)."""
        if lengths is None:
            return 0.0
        if len(lengths) != batch or any(int(n) < 1 for n in lengths):
            raise ValueError(f"lengths: expected one token budget >= 1 per request ({batch}), got {list(lengths)}")
        if not self.vacancy:
            return 0.0
        return self.vacancy * math.fsum(1.0 / int(n) for n in lengths) / batch

    def _catch_up(self, batch: int, backlog, remaining) -> tuple[float, float]:
        """(seconds charged per token a drafting step yields, the one-off) for the batch's backlog."""
        if backlog is None:
            return 0.0, 0.0
        if remaining is None or len(backlog) != batch or len(remaining) != batch:
            raise ValueError(f"backlog and remaining: expected one each per request ({batch}), got "
                             f"{None if backlog is None else len(backlog)} and {None if remaining is None else len(remaining)}")
        catch = self.cfg.costs.catch_up(batch, max(backlog, default=0))
        return (catch / max(math.fsum(remaining), 1.0) if catch else 0.0), catch

    def _explore_due(self, method: str, batch: int, M: int, top: int) -> int | None:
        """While the batch drafts at M, one step in ``explore_every`` serves the depth in 0..``top`` its
        band measured longest ago (never first, drafting nothing first among those -- until then it
        borrows a drafting depth's factor, the other kind; then the nearest to M), so that every
        depth's price follows what it costs as served, not only the chosen one's. Depth 0 is served
        for two steps in a row: the first, after drafting, pays for the switch and is not learned."""
        every = self.cfg.explore_every
        if self._explore_next is not None:   # drafting nothing explores for two steps: the second is learned
            d, self._explore_next = self._explore_next, None
            return d
        if not every or not self.learns(method) or self.steps % every:
            return None
        section = METHOD_TABLES[method]
        ages = [(-self.served.age(section, batch, d, self.steps), d > 0, abs(d - M), d) for d in range(top + 1) if d != M]
        if not ages:
            return None
        d = min(ages)[3]
        self._explore_next = 0 if d == 0 else None
        return d

    def needs_evidence(self, method: str) -> bool:
        """Whether ``method``'s pool has seen fewer than ``evidence`` request-steps draft position 1."""
        return self.max_depth > 0 and self.pool_n.get(method, [0])[0] < self.cfg.evidence

    def _could_pay(self, method: str, caps: Sequence[int], rate0: float) -> bool:
        """Whether some depth would beat drafting nothing if every draft were accepted."""
        B = len(caps)
        return any(B + sum(min(M, c) for c in caps) > rate0 * self.price(method, B, self._nodes(M), M)
                   for M in range(1, max(caps) + 1))
