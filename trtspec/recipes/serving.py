"""How a published figure was served: the running batch under the engine's caps, and the prefill inside the time.

A serving benchmark (``vllm bench serve``, SGLang's ``bench_serving``, a server's decode counter) does not time
decode steps at a fixed batch. ``Workload`` holds what a source states about its run (``trtspec.recipes.
measurements``: concurrency, ``isl`` / ``osl``, ``includes_prefill``, ``max_num_seqs``, the engine's logged KV
capacity) and turns one decode step into what the source measured:

* **the running batch** (``Workload.running``): n = min(concurrency, ``max_num_seqs``, floor(KV capacity / tokens
  per running request)), the rest waiting in the queue. A running request holds its prompt, on average half its
  output (requests at uniformly spread progress) and the D + 1 lookahead slots of a speculative step:
  ``isl + osl / 2 + D + 1`` tokens (``TOKENS_RULE``). Checked on the one source that logs both (Tomas Ruiz's vLLM
  runs, tomasruizt/vllm-scripts@d94d714 ``results/logs-2026-01-23`` and ``online-throughput/``): Qwen3-32B on one
  H100 with a Qwen3-4B draft (18,560 tokens, ISL 147 / OSL 200, D = 3) gives 73 running against 52-92 logged
  (median about 66) at concurrency 128-256; at the same D with the 1.7B draft (32,528 tokens) 129 against 90-158;
  EAGLE-3 (47,264 tokens) 188 against 140-222; Llama-3.3-70B on 2 H100 with EAGLE-3 D = 5 (13,280 tokens, ISL 174 /
  mean OSL 146) 52 against 42-50 at concurrency 64. Where the source states no capacity the batch is the concurrency
  (the interval carries the rest). The speculative server's capacity is its own logged one, else the baseline's
  less the drafter's weights, over the target's plus the draft's KV per token (``spec_capacity``: an upper bound,
  the engine also sets aside more activation memory when it speculates -- 2.3 GiB more in those logs);
* **the prefill in the measured time** (``includes_prefill``): under continuous batching every request's prompt is
  prefilled on the same GPUs (chunked prefill mixes it into the decode steps), once per ``osl`` output tokens. Per
  decode step of n running requests emitting n * AL tokens, n * AL / osl prompts are prefilled, so the step costs
  ``T + n * AL * T_prefill / osl`` (``amortized_prefill``) for an aggregate figure (output tok/s over the run) and
  ``T + (n - 1) * AL * T_prefill / osl`` for one user's (TPOT, per-user tok/s: a user's own prefill is in its
  time to first token, the other running requests' prefills stall its decode). ``T_prefill`` is one prompt of
  ``isl`` tokens through the target (``trtspec.recipes.costmodel.forward_cost`` with ``prefill=True``: GEMMs at
  M = isl, causal attention from the context-attention tables) plus, when speculating, through the drafter's own
  layers (``DrafterSpec.prefill_time``); no per-step engine cost (the prefill rides in the decode steps). The
  speculative prefill share grows with AL, which is why short outputs after long prompts (the vLLM GB300 post's
  ISL 2k / OSL 64) make speculation lose at every concurrency.

``round_times`` gives, per case, the time of one *round*: the time in which the deployment emits ``batch * AL``
tokens of an aggregate figure (``batch`` the published concurrency: (batch / n) decode steps of n running
requests) or one running user emits AL tokens of a per-user figure, so that ``batch * AL / round`` (aggregate),
``1 / round`` (per user) and ``AL * round(0) / round(D)`` (speedup) keep their closed forms
(``trtspec.recipes.fidelity``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trtspec.recipes.errors import RecipeError

TOKENS_RULE = "isl + osl / 2 + D + 1"


@dataclass(frozen=True)
class Workload:
    """What a source states about how its figure was served (module docstring). ``per_user``: the figure is one
    user's (TPOT or per-user tok/s), not the deployment's."""

    concurrency: int
    isl: int | None = None
    osl: int | None = None
    includes_prefill: bool = False
    per_user: bool = False
    max_num_seqs: int | None = None
    kv_tokens: int | None = None
    spec_kv_tokens: int | None = None

    def __post_init__(self):
        if self.concurrency < 1:
            raise RecipeError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.includes_prefill and not (self.isl and self.osl):
            raise RecipeError("includes_prefill: pricing the prefill needs isl and osl")

    def tokens_per_request(self, draft_len: int) -> float | None:
        """KV tokens one running request holds (``TOKENS_RULE``), None without isl and osl."""
        if not (self.isl and self.osl):
            return None
        return self.isl + self.osl / 2.0 + draft_len + 1

    def running(self, draft_len: int, capacity: int | None = None) -> int:
        """Requests running at once at draft length ``draft_len`` (0: no speculation) under ``capacity`` KV tokens
        (default: the logged one of that server)."""
        n = self.concurrency
        if self.max_num_seqs:
            n = min(n, self.max_num_seqs)
        cap = capacity if capacity is not None else (self.spec_kv_tokens if draft_len else None) or self.kv_tokens
        per = self.tokens_per_request(draft_len)
        if cap and per:
            n = min(n, max(1, math.floor(cap / per)))
        return n

    def prompts_per_step(self, running: int, al: float) -> float:
        """Prompts prefilled per decode step of ``running`` requests at acceptance ``al`` (module docstring): each
        request is replaced after ``osl`` tokens; one user's figure sees the other ``running - 1`` requests' only."""
        if not self.includes_prefill:
            return 0.0
        return max(0, running - 1 if self.per_user else running) * al / self.osl

    @property
    def active(self) -> bool:
        """Does the workload change anything beyond the published batch (caps or prefill)?"""
        return bool(self.includes_prefill or self.max_num_seqs or self.kv_tokens or self.spec_kv_tokens)


def spec_capacity(kv_tokens: int, target, drafter, prec, tp: int) -> int:
    """KV tokens of a speculative server whose no-speculation twin logged ``kv_tokens``: the same KV memory less the
    drafter's weights, over the target's plus the draft's KV per token (an upper bound: see the module docstring)."""
    from trtspec.recipes.costmodel import cache_bytes

    per_target = cache_bytes(target, prec, tp, 1, 1)
    memory = kv_tokens * per_target - drafter.memory_bytes(target, prec, tp)
    per = per_target + drafter.kv_bytes_per_token(target, prec, tp)
    return max(1, int(memory / per))


ROW_CLASSES = ("linear", "moe", "comm")  # what an extra row of a step costs: its GEMMs, experts and all-reduce
_MEMO: dict = {}  # (ids of the objects, shapes) -> (seconds, the objects: kept alive so that their ids stay theirs)


def _memo(key: tuple, keep: tuple, fn):
    if key not in _MEMO:
        _MEMO[key] = (fn(), keep)
    return _MEMO[key][0]


def _rows(request, rows: int, pricer) -> float:
    """The row-proportional classes (``ROW_CLASSES``) of one target forward over ``rows`` rows, seconds."""
    from trtspec.recipes.costmodel import Precision, forward_cost

    if rows <= 0:
        return 0.0
    db = pricer.db if pricer is not None else None
    key = ("rows", id(request.model), id(request.gpu), request.quant, request.tp, request.ep, int(rows), id(db),
           pricer is None)

    def price():
        c = forward_cost(request.model, request.gpu, Precision.of(request.quant), tp=request.tp, batch=1,
                         tokens=int(rows), context=0, step_overhead=False, pricer=pricer, ep=request.ep,
                         prefill=True, lm_head_params=0)
        return sum(getattr(c, k) for k in ROW_CLASSES)
    return _memo(key, (request.model, request.gpu, db), price)


def _prompt(request, drafter, isl: int, pricer) -> float:
    """One prompt's causal attention / state scan through the target, plus the drafter's own prefill, seconds."""
    from trtspec.recipes.costmodel import Precision, forward_cost

    db = pricer.db if pricer is not None else None
    key = ("prompt", id(request.model), id(request.gpu), request.quant, request.tp, request.ep, int(isl), id(db),
           pricer is None, drafter)

    def price():
        prec = Precision.of(request.quant)
        c = forward_cost(request.model, request.gpu, prec, tp=request.tp, batch=1, tokens=int(isl), context=0,
                         step_overhead=False, pricer=pricer, ep=request.ep, prefill=True, lm_head_params=0)
        draft = drafter.prefill_time(request.model, request.gpu, prec, tp=request.tp, tokens=int(isl),
                                     pricer=pricer, ep=request.ep) if drafter is not None else 0.0
        return c.attention + c.state + draft
    return _memo(key, (request.model, request.gpu, db), price)


def step_prefill(workload: Workload | None, request, drafter, running: int, tokens: int, al: float,
                 pricer) -> float:
    """Seconds of prefill per decode step of ``running`` requests verifying ``tokens`` tokens each at acceptance
    ``al`` (module docstring): the prompts' P = prompts * isl rows added to the step's running * tokens rows (their
    GEMMs, experts and all-reduces: the marginal price, so that weights a decode step loads anyway are not counted
    twice), plus each prompt's own causal attention and the drafter's prefill; times the engine profile's
    ``kernel_scale``. 0 where the figure holds no prefill."""
    if workload is None or not workload.includes_prefill:
        return 0.0
    if request.dp_attention != 1:
        raise RecipeError("the prefill of a run with attention data parallelism is not priced (each group prefills "
                          "its own prompts); give such a figure includes_prefill: false or null")
    prompts = workload.prompts_per_step(running, al)
    if prompts <= 0:
        return 0.0
    decode = running * tokens
    extra = round(prompts * workload.isl)
    scale = pricer.engine.kernel_scale if pricer is not None else 1.0
    marginal = _rows(request, decode + extra, pricer) - _rows(request, decode, pricer)
    return scale * (max(0.0, marginal) + prompts * _prompt(request, drafter, workload.isl, pricer))


def round_times(workload: Workload | None, batch: int, steps: tuple, prefill: tuple, running: tuple) -> tuple:
    """(round at D = 0, round at the case's D) in seconds (module docstring): ``steps`` the decode steps at the
    running batches ``running`` = (n0, nd), ``prefill`` their ``step_prefill``."""
    if workload is None:
        return steps
    out = [(step + pre) * (1 if workload.per_user else batch / n) for step, pre, n in zip(steps, prefill, running)]
    return out[0], out[1]
