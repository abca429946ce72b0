"""Draft-length optimizer: for each batch bucket, the drafter, D (and tree) that maximize the objective.

For every batch size B and offered drafter (guideline 5: pick the drafter per row) the optimizer evaluates every
chain D in [0, max_draft_len] -- a global argmax, since throughput versus D is a staircase (attention and GEMM tiles,
MoE expert loading), not a unimodal curve -- and, for tree drafters whose acceptance profile has ``rank_weights``,
Sequoia-style trees: for depth d and top-k width K the N best nodes by positional acceptance value
``prod_path a_depth * w_rank`` (each node's value is at most its parent's and its lower-rank sibling's, so the top-N
set is a valid tree and is optimal for its size).

Objectives (the batch B is held fixed in both):

* ``throughput`` maximizes aggregate tokens/s, B*E[AL]/step, and among configurations within ``tie_tolerance``
  of the best takes the smallest D (less wasted verification work; guideline 3's "stay below the next multiple of
  128"). The default tolerance is the resolution of the step prices: 0.1% for the analytic model and measured cost
  tables, 1% with measured kernel tables (``pricing='perf-db'``), whose neighbouring shapes scatter by about +-1%
  (e.g. the H200 FP8 GEMM 57344 x 8192 measures 129.6-131.9 us over m = 1..8), so that a D chosen there is not an
  artefact of that scatter.
* ``latency`` minimizes the mean per-user time per output token (TPOT), averaged over the users of the workload
  mix: ``mean_c step / E[AL_c]`` over the profile's overall rates and each of its ``per_category`` rates (equal
  weights), with no tolerance (any gain counts) and ties going to the larger E[AL]. Aggregate throughput uses the mean
  rate for the overall profile, per-user latency a mean of step/E[AL_c] (a harmonic mean of the categories' rates:
  the users whose text the drafter guesses badly weigh most), so with a mixed workload latency can take a different
  D than throughput (smaller or larger). With a single-category profile the two differ only by the tolerance.

Memory: a configuration whose weights + KV cache (B requests x (context + 1 + D) tokens) + draft weights exceed
``memory_fraction`` of the GPUs' memory is infeasible. D is chosen among the feasible ones; when even D = 0 does not
fit, the row keeps D = 0, ``fits_memory`` is False and the binding rule says so.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from trtspec.recipes.acceptance import AcceptanceProfile
from trtspec.recipes.arch import Architecture
from trtspec.recipes.calibration import CostTable
from trtspec.recipes.costmodel import Precision, StepCost, cache_bytes, forward_cost, weight_bytes
from trtspec.recipes.drafters import DrafterSpec
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.gpus import GPU
from trtspec.recipes.engines import ENGINES, EngineProfile
from trtspec.recipes.pricing import PRICINGS, make_pricer

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
OBJECTIVES = ("throughput", "latency")
TREE_TOPK = (1, 2, 4, 8)


@dataclass(frozen=True)
class PlanRequest:
    """Inputs of one plan. ``acceptance`` maps drafter kind -> profile; ``draft_len`` fixes D (what-if mode);
    ``context`` in tokens; ``max_tree_nodes`` bounds tree size (TensorRT-LLM max_total_draft_tokens + 1).

    ``engine`` (trtllm | vllm | sglang, default trtllm): whose measured kernels and per-step costs price the steps
    (``trtspec.recipes.pricing``); ``pricing``: ``perf-db`` (default: measured kernel data where it exists, the
    roofline elsewhere, the engine's fixed costs) or ``roofline`` (the analytic model alone, GPU-file fixed costs);
    ``ep``: expert-parallel GPUs of the MoE layers (divides ``tp``; measured MoE pricing only); ``engine_profile``:
    an ``EngineProfile`` of ``engine`` replacing its file ``recipes/engines/<engine>.yaml`` (a deployment
    calibration's fitted figures, ``trtspec.recipes.user_calibration``; ``pricing='perf-db'`` only);
    ``dp_attention``: attention data parallelism over the ``tp`` GPUs (SGLang / vLLM ``--enable-dp-attention``):
    each of that many groups attends over its own batch / dp_attention requests at attention TP tp / dp_attention,
    the experts still see every token (``trtspec.recipes.costmodel.block_cost``)."""

    model: Architecture
    gpu: GPU
    drafters: tuple
    acceptance: dict
    tp: int = 1
    quant: str = "none"
    batches: tuple = DEFAULT_BATCHES
    context: int = 4096
    max_draft_len: int = 16
    objective: str = "throughput"
    draft_len: int | None = None
    calibration: CostTable | None = None
    max_tree_nodes: int = 64
    tie_tolerance: float | None = None
    memory_fraction: float = 0.9
    engine: str = "trtllm"
    pricing: str = "perf-db"
    ep: int = 1
    engine_profile: EngineProfile | None = None
    dp_attention: int = 1

    def __post_init__(self):
        if not self.drafters:
            raise RecipeError("at least one drafter is needed (--drafter)")
        for d in self.drafters:
            if not isinstance(d, DrafterSpec):
                raise RecipeError(f"drafters must be DrafterSpec objects, got {d!r}")
            if d.kind not in self.acceptance:
                raise RecipeError(f"drafter {d.kind!r} has no acceptance source; pass --acceptance FILE|prior:NAME|"
                                  "rates=...|al=A@D (plan never assumes one)")
        if self.objective not in OBJECTIVES:
            raise RecipeError(f"--objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if not self.batches or any(int(b) < 1 for b in self.batches):
            raise RecipeError(f"--batch sizes must be >= 1, got {self.batches}")
        if self.tie_tolerance is not None and not 0 <= self.tie_tolerance < 1:
            raise RecipeError(f"tie_tolerance must be in [0, 1), got {self.tie_tolerance}")
        if self.tp < 1 or self.context < 0 or self.max_draft_len < 0 or self.max_tree_nodes < 2:
            raise RecipeError("need --tp >= 1, --context >= 0, max_draft_len >= 0, max_tree_nodes >= 2")
        if self.draft_len is not None and not 0 <= self.draft_len <= max(self.max_draft_len, self.draft_len):
            raise RecipeError(f"--draft-len must be >= 0, got {self.draft_len}")
        if self.engine not in ENGINES:
            raise RecipeError(f"unknown --engine {self.engine!r}; expected one of {', '.join(ENGINES)}")
        if self.pricing not in PRICINGS:
            raise RecipeError(f"--pricing must be one of {PRICINGS}, got {self.pricing!r}")
        if self.ep < 1 or self.tp % self.ep:
            raise RecipeError(f"--ep must be >= 1 and divide --tp {self.tp}, got {self.ep}")
        if self.dp_attention < 1 or self.tp % self.dp_attention:
            raise RecipeError(f"dp_attention must be >= 1 and divide --tp {self.tp}, got {self.dp_attention}")
        if self.engine_profile is not None and (self.engine_profile.name != self.engine or self.pricing != "perf-db"
                                                or self.calibration is not None):
            raise RecipeError(f"engine_profile {self.engine_profile.name!r} prices --engine {self.engine} with "
                              f"--pricing perf-db and no cost table only")
        if self.gpu.requires_calibration and self.calibration is None:
            raise RecipeError(f"gpu {self.gpu.name!r} has no datasheet figures; pass --calibration cost_table.json")
        Precision.of(self.quant)


@dataclass
class Point:
    """One evaluated configuration at one batch size (times in seconds)."""

    drafter: str
    draft_len: int
    num_nodes: int
    topk: int
    expected_al: float
    draft: StepCost
    verify: StepCost
    step: float
    tokens_per_s: float
    mix_als: tuple = ()  # E[AL] per workload-mix member (latency objective); empty: just expected_al

    @property
    def per_request_tokens_per_s(self) -> float:
        return self.expected_al / self.step

    @property
    def user_latency(self) -> float:
        """Mean per-user seconds per output token over the workload mix (see the module docstring)."""
        als = self.mix_als or (self.expected_al,)
        return sum(self.step / a for a in als) / len(als)


@dataclass
class Row:
    batch: int
    drafter: str
    draft_len: int
    num_nodes: int
    topk: int
    expected_al: float
    draft_ms: float
    verify_ms: float
    step_ms: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float
    binding_rule: str
    fits_memory: bool
    breakdown_ms: dict = field(default_factory=dict)
    latency_ms_per_token: float = 0.0  # mean per-user TPOT over the workload mix (what --objective latency minimizes)
    sources: dict = field(default_factory=dict)  # op class -> what priced it (verify and draft steps)
    interval: tuple = ()  # (low, high) of the speedup its validation supports (trtspec.recipes.intervals)
    uncertain: bool = False  # the interval (of the best D >= 1 on a D = 0 row) straddles 1
    settle: str = ""  # on an uncertain row: the measurement that settles it

    def to_dict(self) -> dict:
        out = {}
        for k, v in self.__dict__.items():
            if isinstance(v, float):
                v = round(v, 5)
            elif isinstance(v, dict):
                v = {a: round(b, 5) if isinstance(b, float) else b for a, b in v.items()}
            elif isinstance(v, tuple):
                v = [round(x, 4) for x in v]
            out[k] = v
        return out


@dataclass
class Plan:
    request: PlanRequest
    rows: list
    curves: dict  # batch -> drafter -> {chain D that fits in memory: predicted speedup over D=0} ({0: 1.0} if none)


_UNSET = object()


def request_pricer(req: PlanRequest):
    """The request's ``Pricer`` (None: a measured cost table prices the steps, or ``pricing='roofline'``)."""
    if req.calibration is not None:
        return None
    return make_pricer(req.gpu, req.engine, req.pricing, profile=req.engine_profile)


def _kernels_scaled(cost: StepCost, pricer) -> StepCost:
    """``cost`` with every class but the engine's fixed costs times the engine profile's ``kernel_scale``."""
    scale = pricer.engine.kernel_scale if pricer is not None else 1.0
    if scale != 1.0:
        for k, v in cost.as_dict().items():
            if k != "engine":
                setattr(cost, k, v * scale)
    return cost


class _Evaluator:
    """Caches target forwards per token count and draft phases per (drafter, D, width) for one batch size."""

    def __init__(self, req: PlanRequest, batch: int, pricer=_UNSET):
        self.req, self.batch = req, batch
        self.prec = Precision.of(req.quant)
        self.pricer = request_pricer(req) if pricer is _UNSET else pricer
        self.blocks = req.model.block_counts()
        self._verify: dict = {}
        self._draft: dict = {}

    @property
    def spec_overhead(self) -> float:
        """Fixed cost of a speculative step over a plain one (acceptance, KV rewind): the engine's per step and per
        request with a pricer, the GPU file's in the analytic model, none with a measured cost table (it holds the
        runtime's own)."""
        if self.req.calibration is not None:
            return 0.0
        if self.pricer is None:
            return self.req.gpu.spec_overhead
        eng = self.pricer.engine
        return eng.spec_step + self.req.model.num_layers * eng.spec_layer + self.batch * eng.spec_request

    def verify(self, tokens: int) -> StepCost:
        if tokens not in self._verify:
            r = self.req
            if r.calibration is not None:
                self._verify[tokens] = StepCost(linear=r.calibration.target_time(self.batch, tokens))
            else:
                self._verify[tokens] = _kernels_scaled(forward_cost(
                    r.model, r.gpu, self.prec, tp=r.tp, batch=self.batch, tokens=tokens, context=r.context,
                    pricer=self.pricer, ep=r.ep, blocks=self.blocks, dp=r.dp_attention), self.pricer)
        return self._verify[tokens]

    def draft(self, spec: DrafterSpec, depth: int, width: int) -> StepCost:
        key = (spec.kind, depth, width)
        if key not in self._draft:
            r = self.req
            if depth == 0:
                cost = StepCost()
            elif r.calibration is not None:
                if spec.kind in ("dflash",):
                    cost = StepCost(linear=r.calibration.draft_step_time(self.batch, depth))
                else:
                    cost = StepCost(linear=depth * r.calibration.draft_step_time(self.batch, width))
            else:
                cost = _kernels_scaled(spec.step_time(r.model, r.gpu, self.prec, tp=r.tp, batch=self.batch,
                                                      draft_len=depth, context=r.context, width=width,
                                                      pricer=self.pricer, ep=r.ep, dp=r.dp_attention), self.pricer)
            self._draft[key] = cost
        return self._draft[key]

    def point(self, spec: DrafterSpec, depth: int, al: float, nodes: int, topk: int = 1, mix_als: tuple = ()) -> Point:
        verify = self.verify(nodes)
        draft = self.draft(spec, depth, topk)
        step = verify.total + draft.total + (self.spec_overhead if depth > 0 else 0.0)
        return Point(spec.kind, depth, nodes, topk, al, draft, verify, step, self.batch * al / step, tuple(mix_als))


def tree_values(profile: AcceptanceProfile, depth: int, topk: int, max_nodes: int) -> list:
    """Positional-acceptance values of the best ``max_nodes - 1`` draft nodes (best first) of a tree of at most
    ``depth`` levels and ``topk`` children per node; E[AL] of the top-N tree = 1 + sum of the first N-1 values."""
    weights = (profile.rank_weights or (1.0,))[:topk]
    heap = [(-profile.rate(1) * w, 1) for w in weights]
    heapq.heapify(heap)
    out = []
    while heap and len(out) < max_nodes - 1:
        neg, d = heapq.heappop(heap)
        out.append(-neg)
        if d < depth:
            for w in weights:
                heapq.heappush(heap, (neg * profile.rate(d + 1) * w, d + 1))
    return out


def workload_mix(profile: AcceptanceProfile) -> list:
    """The profiles whose users the latency objective averages over: the overall rates and each per-category set."""
    return [profile] + [profile.for_category(c) for c in sorted(profile.per_category)]


def _candidates(ev: _Evaluator, spec: DrafterSpec, profile: AcceptanceProfile, req: PlanRequest) -> list:
    fixed = req.draft_len
    dmax = fixed if fixed is not None else req.max_draft_len
    mix = workload_mix(profile)  # Row.latency_ms_per_token is reported under both objectives
    curves = [m.al_curve(dmax) for m in mix]
    depths = [fixed] if fixed is not None else range(0, dmax + 1)
    pts = [ev.point(spec, d, curves[0][d], d + 1, mix_als=tuple(c[d] for c in curves) if len(curves) > 1 else ())
           for d in depths]
    if spec.is_tree and profile.rank_weights and fixed is None:
        for topk in TREE_TOPK[1:]:
            if topk > len(profile.rank_weights):
                break
            for depth in range(1, dmax + 1):
                vals = [tree_values(m, depth, topk, req.max_tree_nodes) for m in mix]
                als = [1.0] * len(mix)
                for i in range(len(vals[0])):
                    als = [a + (v[i] if i < len(v) else 0.0) for a, v in zip(als, vals)]
                    n = i + 2
                    if n > depth + 1:  # chains are covered above
                        pts.append(ev.point(spec, depth, als[0], n, topk, mix_als=tuple(als) if len(mix) > 1 else ()))
    return pts


MEASURED_TIE_TOLERANCE = 1e-2
ANALYTIC_TIE_TOLERANCE = 1e-3


def tie_tolerance(req: PlanRequest, pricer) -> float:
    """``req.tie_tolerance``, else the step prices' resolution (see the module docstring)."""
    if req.tie_tolerance is not None:
        return req.tie_tolerance
    return MEASURED_TIE_TOLERANCE if pricer is not None and pricer.db is not None else ANALYTIC_TIE_TOLERANCE


def _choose(points: list, req: PlanRequest, tol: float = ANALYTIC_TIE_TOLERANCE) -> Point:
    """Throughput: the smallest configuration within the tie tolerance of the best aggregate tokens/s. Latency: the
    lowest mean per-user time per token, ties to the larger E[AL]."""
    if req.objective == "latency":
        return min(points, key=lambda p: (p.user_latency, -p.expected_al, p.draft_len, p.num_nodes))
    best = max(p.tokens_per_s for p in points)
    good = [p for p in points if p.tokens_per_s >= best * (1.0 - tol) - 1e-15]
    return min(good, key=lambda p: (p.draft_len, p.num_nodes, -p.tokens_per_s))


def _better(a: Point, b: Point, req: PlanRequest) -> bool:
    """Is drafter choice ``a`` better than ``b`` under the objective (guideline 5: pick the drafter per row)?"""
    if req.objective == "latency":
        return a.user_latency < b.user_latency * (1 - 1e-9)
    return a.tokens_per_s > b.tokens_per_s * (1 + 1e-9)


def _binding(req: PlanRequest, ev: _Evaluator, spec: DrafterSpec, profile: AcceptanceProfile, p: Point) -> str:
    if req.draft_len is not None:
        return f"fixed: --draft-len {req.draft_len}"
    if p.num_nodes > p.draft_len + 1:
        return f"tree: {p.num_nodes} nodes, depth {p.draft_len}, top-{p.topk} (positional acceptance)"
    d = p.draft_len
    if d >= req.max_draft_len and d > 0:
        return f"max_draft_len {req.max_draft_len} reached"
    nxt = ev.point(spec, d + 1, profile.expected_al(d + 1), d + 2)
    dv = nxt.verify.as_dict()
    cv = p.verify.as_dict()
    deltas = {k: dv[k] - cv[k] for k in dv}
    deltas["draft"] = nxt.draft.total - p.draft.total + (ev.spec_overhead if d == 0 else 0.0)
    total = sum(deltas.values())
    a_next = profile.rate(d + 1)
    if total <= 0.005 * p.step:
        return f"acceptance: a_{d + 1} = {a_next:.2f} adds too little AL"
    main = max(deltas, key=deltas.get)
    prefix = "no gain: " if d == 0 else ""
    m = req.model
    if main == "attention":
        kv_local = max(1, m.num_kv_heads // req.tp)
        g = max(1, m.num_heads // req.tp) if m.mla else max(1, m.num_heads // req.tp // kv_local)
        tile = req.gpu.attention_tile_rows
        return (f"{prefix}guidelines 2-3: attention tile, G*(1+D) = {g * (d + 1)} -> {g * (d + 2)} "
                f"crosses {tile * ((g * (d + 1)) // tile + 1)}" if (g * (d + 2) - 1) // tile > (g * (d + 1) - 1) // tile
                else f"{prefix}attention KV reads grow with 1+D")
    if main in ("linear", "lm_head"):
        return f"{prefix}guideline 1: GEMMs compute-bound at M = B*(1+D) = {ev.batch * (d + 2)}"
    if main == "moe":
        return f"{prefix}MoE: more distinct experts loaded per layer as B*(1+D) grows"
    if main == "state":
        return f"{prefix}linear-attention/Mamba state snapshots grow with 1+D"
    if main == "draft":
        rho = (nxt.draft.total - p.draft.total) / max(ev.verify(1).total, 1e-12)
        return f"{prefix}guideline 4: draft cost rho*D, rho = {rho:.3f}"
    if main == "comm":
        return f"{prefix}tensor parallel: all-reduce bytes grow with B*(1+D) = {ev.batch * (d + 2)} tokens"
    if main == "engine":
        return f"{prefix}engine fixed costs ({req.engine}) per step grow with D"
    return f"{prefix}{main} (fixed costs) grows with D"


def _interval(req: PlanRequest, p: Point, spec: DrafterSpec, best_spec: Point | None, base: Point,
              rule: str) -> tuple:
    """(interval of the row's speedup, uncertain, binding rule, settle) -- see ``trtspec.recipes.intervals``. A row
    with D >= 1 gets its own interval; a D = 0 row is exact (1x) but is uncertain when the interval of the best
    D >= 1 straddles 1 (speculation might win there). An uncertain row names the measurement that settles it."""
    from trtspec.recipes.intervals import settle_command, speedup_interval, uncertain

    if p.draft_len == 0 and best_spec is None:
        return (1.0, 1.0), False, rule, ""
    point, kind = (p, spec) if p.draft_len > 0 else (best_spec, next(d for d in req.drafters
                                                                     if d.kind == best_spec.drafter))
    lo, hi = speedup_interval(req, kind, point.tokens_per_s / base.tokens_per_s)
    if not uncertain(lo, hi):
        return ((lo, hi) if p.draft_len else (1.0, 1.0)), False, rule, ""
    what = "" if p.draft_len else f" for D={point.draft_len}"
    rule += f"; uncertain: {lo:.2f}-{hi:.2f}x{what} straddles 1"
    return ((lo, hi) if p.draft_len else (1.0, 1.0)), True, rule, settle_command(req, point.draft_len, base)


def memory_needed(req: PlanRequest, spec: DrafterSpec, batch: int, nodes: int, memo: dict | None = None) -> float:
    """Bytes on one GPU: target weights + KV cache / states for ``batch`` requests of ``context + nodes`` tokens +
    the drafter's weights and its own KV cache for those tokens (none at D = 0, where speculation is off; a draft
    model's KV per token is a sizeable share of the target's, e.g. 44% for Qwen3-1.7B beside Qwen3-32B). With
    attention data parallelism a GPU holds one group's ceil(batch / dp_attention) requests at attention TP
    tp / dp_attention. ``memo``: a dict reused across calls of one plan (weights, per-request cache bytes per
    length and draft weights are computed once)."""
    memo = {} if memo is None else memo
    prec = Precision.of(req.quant)
    ta, groups = req.tp // req.dp_attention, -(-batch // req.dp_attention)
    if "weights" not in memo:
        memo["weights"] = weight_bytes(req.model, prec, req.tp)
    length = req.context + nodes
    if ("kv", length) not in memo:
        memo["kv", length] = cache_bytes(req.model, prec, ta, 1, length)
    if nodes > 1 and ("draft", spec.kind) not in memo:
        memo["draft", spec.kind] = (spec.memory_bytes(req.model, prec, req.tp),
                                    spec.kv_bytes_per_token(req.model, prec, ta))
    weights, kv_token = memo["draft", spec.kind] if nodes > 1 else (0.0, 0.0)
    return memo["weights"] + groups * (memo["kv", length] + kv_token * length) + weights


def _fits(req: PlanRequest, spec: DrafterSpec, batch: int, nodes: int, memo: dict | None = None) -> bool:
    return req.gpu.requires_calibration or \
        memory_needed(req, spec, batch, nodes, memo) <= req.memory_fraction * req.gpu.memory_bytes


def _memory_note(req: PlanRequest, spec: DrafterSpec, batch: int, nodes: int) -> str:
    need = memory_needed(req, spec, batch, nodes) / 1e9
    have = req.memory_fraction * req.gpu.memory_bytes / 1e9
    return f"{need:.1f} GB/GPU > {have:.1f} GB ({req.memory_fraction:.0%} of {req.gpu.memory_bytes / 1e9:.0f} GB)"


def plan(req: PlanRequest) -> Plan:
    """Evaluate every batch bucket of ``req``; returns rows (one per batch) and chain speedup curves for plots.

    Only configurations that fit in memory are chosen; a row where even D = 0 does not fit keeps D = 0 with
    ``fits_memory`` False and a binding rule saying by how much it overflows."""
    from trtspec.recipes.jumps import RowState, config_key, jump_rule

    rows, curves, memo, state = [], {}, {}, None
    pricer = request_pricer(req)
    tol = tie_tolerance(req, pricer)
    for batch in sorted({int(b) for b in req.batches}):
        ev = _Evaluator(req, batch, pricer)
        base = ev.point(req.drafters[0], 0, 1.0, 1)
        best, capped, best_spec, seen = None, None, None, {}
        curves[batch] = {}
        for spec in req.drafters:
            profile = req.acceptance[spec.kind]
            pts = _candidates(ev, spec, profile, req)
            fits_nodes = {n: _fits(req, spec, batch, n, memo) for n in {p.num_nodes for p in pts}}
            feasible = [p for p in pts if fits_nodes[p.num_nodes]]
            seen.update({config_key(p): p for p in feasible})
            drafting = [p for p in feasible if p.draft_len > 0]
            if drafting and (best_spec is None or _better(_choose(drafting, req, tol), best_spec, req)):
                best_spec = _choose(drafting, req, tol)
            # the engine schedule (recipe.derive_schedule) and the plot see only configurations that fit
            chain = [p for p in feasible if p.num_nodes == p.draft_len + 1] or [base]
            curves[batch][spec.kind] = {p.draft_len: round(p.tokens_per_s / base.tokens_per_s, 6) for p in chain}
            if not feasible:
                continue
            choice = _choose(feasible, req, tol)
            unconstrained = _choose(pts, req, tol) if len(feasible) < len(pts) else choice
            if best is None or _better(choice, best[0], req):
                best = (choice, spec, profile)
                capped = unconstrained if unconstrained is not choice else None
        fits = best is not None
        if not fits:  # nothing fits, not even plain decode: report D = 0, flagged
            best = (base, req.drafters[0], req.acceptance[req.drafters[0].kind])
        p, spec, profile = best
        if not fits:
            rule = f"memory: does not fit even without speculation ({_memory_note(req, spec, batch, 1)})"
        elif capped is not None:
            rule = (f"memory: D={capped.draft_len} ({capped.num_nodes} tokens/request) does not fit "
                    f"({_memory_note(req, spec, batch, capped.num_nodes)}); best feasible")
        else:
            rule = _binding(req, ev, spec, profile, p)
            if p.draft_len == 0 and best_spec is not None:
                rule += (f"; speculation loses here: the best D >= 1 ({best_spec.drafter}, D={best_spec.draft_len}) "
                         f"would give {best_spec.tokens_per_s / base.tokens_per_s:.2f}x")
        breakdown = {k: v * 1e3 for k, v in p.verify.as_dict().items()}
        breakdown["draft"] = p.draft.total * 1e3
        sources = {f"verify.{k}": v for k, v in sorted(p.verify.sources.items())}
        sources.update({f"draft.{k}": v for k, v in sorted(p.draft.sources.items())})
        interval, unsure, rule, settle = _interval(req, p, spec, best_spec, base, rule)
        cur = RowState(batch, p.tokens_per_s / base.tokens_per_s,
                       best_spec.tokens_per_s / base.tokens_per_s if best_spec is not None else None, p, base, fits,
                       capped is not None, spec.kind if p.draft_len else "none", ev.spec_overhead, seen)
        jump = jump_rule(pricer, state, cur)
        state = cur
        if jump:
            rule += f"; {jump}"
        rows.append(Row(
            batch=batch, drafter=spec.kind if p.draft_len else "none", draft_len=p.draft_len, num_nodes=p.num_nodes,
            topk=p.topk, expected_al=p.expected_al, draft_ms=p.draft.total * 1e3, verify_ms=p.verify.total * 1e3,
            step_ms=p.step * 1e3, tokens_per_s=p.tokens_per_s, baseline_tokens_per_s=base.tokens_per_s,
            speedup=p.tokens_per_s / base.tokens_per_s, binding_rule=rule,
            fits_memory=bool(fits), breakdown_ms=breakdown, latency_ms_per_token=p.user_latency * 1e3,
            sources=sources, interval=interval, uncertain=unsure, settle=settle,
        ))
    return Plan(req, rows, curves)
