"""Measured kernel latencies from aiconfigurator-core (NVIDIA's configurator core, Apache-2.0), per GPU and engine.

aiconfigurator-core ships latencies collected per system (``h200_sxm``, ``b200_sxm``, ...) and engine version
(TensorRT-LLM, vLLM, SGLang): GEMM by (m, n, k, dtype) from m = 1, generation attention by (batch, context, heads,
KV heads, head size, window, KV dtype), generation MLA, MLA batched GEMMs, MoE by (tokens, hidden, expert width,
top-k, experts, TP, EP, dtype) and custom all-reduce by (tokens, hidden, TP). This module asks its own query API
(``perf_database.get_database`` + ``EngineHandle.evaluate_ops_json`` over its op classes), which interpolates within
and extrapolates beyond the collected grid; it never reads the parquet files itself.

* ``open_db(system, engine, version)`` loads one database lazily (cached per process, about 1-1.5 s) or raises
  ``PerfDBUnavailable`` with the reason (package missing, no data for that system / engine / version);
* ``PerfDB`` methods return seconds, or ``None`` where the database holds no data for that shape or dtype (e.g.
  NVFP4 on Hopper, an MoE shape never collected): the caller falls back to the roofline for that op;
* FP8 is collected per-tensor (``fp8``) or in 128x128 blocks (``fp8_block``, SGLang's and DeepSeek-style
  checkpoints' scaling); a shape one of them lacks is asked in the other (same bytes, same tensor cores); a 4-bit
  routed-expert shape missing in NVFP4 is asked in MXFP4 (``w4a8_mxfp4_mxfp8``, then ``w4a16_mxfp4``);
* **monotone in the size axis** (GEMM rows, MoE / all-reduce / MLA-bmm tokens, attention / MLA batch): a shape is
  asked only at the points of a fixed ladder (``LADDER``: 1, 2, 3, 4, 6, 8, 12, ... -- about 1.5x apart, at least as
  dense as the package's own grids) and priced between two of them by linear interpolation of the ladder's running
  maximum, so a larger batch or a longer draft never costs less than a smaller one (a table whose larger shape
  measures faster -- another kernel chosen there -- keeps the smaller shape's price: the planner does not assume the
  engine pads to exploit it). Where the price grows faster than the size between two ladder points (a kernel or
  tile switch in the measured data, e.g. a fused-MoE config change), ``switches`` records it for the plan to name;
* **routed experts by expert loading**: below ``T_full = experts / topk`` tokens (the decode and verification
  regime, where a step loads a growing set of distinct experts) a routed-expert shape is priced by its least-squares
  fit ``a + b * u(T)`` over the table's ladder points there, with u(T) = E * (1 - (1 - k/E)^T) the experts T tokens
  touch on average (a: the launches of the routing, permutation and grouped GEMMs; b: one expert's weights), and
  above ``T_full`` by the table itself, never below the fit. A kernel switch inside the decode regime of a table
  (e.g. a fused-MoE configuration change between 4 and 6 tokens) is the engine's choice for that shape, which
  published serving runs do not show (Kimi-K2.6 EAGLE-3 on 8 RTX PRO 6000: 1.32x / 1.41x at concurrency 1 / 4), so
  it does not move the price. The regime lasts while the tokens still touch new experts, up to the coupon-collector
  point ``loading_edge`` (fewer than one expert expected untouched, ~(E/k) ln E tokens): between ``T_full`` and it
  the price follows the table's growth from one ladder point to the next, except across a kernel switch (growth
  beyond the fit's, i.e. beyond the experts loaded, x ``SWITCH_RATIO``), where it grows as the fit does
  (Llama-4-Scout, 16 experts top-1, SGLang on H200: 267 us at 16 tokens, 500 us at 24 and 732 us at 32 while the
  tokens touch 10 -> 13 -> 14 experts, against a published EAGLE-3 step at batch 8 x 4 tokens that costs no more
  than a plain decode step). The table's tokens route independently; a request's successive verified tokens share
  experts beyond chance (``trtspec.recipes.routing.request_tokens``), so a step of several tokens per request is
  priced with the experts it is expected not to load -- u(T) - u(T'), T' the independent tokens that load as many
  -- taken off at the fit's price per expert, b;
* prefill attention (``context_attention`` / ``context_mla``: one prompt, causal, bf16 FMHA) is asked at the
  prompt's own length, the package interpolating between the lengths it collected;
* every answer is memoised per shape and ladder point, so a plan costs at most one query per shape and ladder point;
* ``tiers`` collects the provenance tiers the engine reported (``silicon`` = collected rows; anything else, e.g.
  ``empirical``, is a formula the package fell back to) so the plan can say what priced each op class.

Shapes it does not measure are derived by the caller (``trtspec.recipes.pricing``), never guessed here.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import math
from dataclasses import dataclass, field

from trtspec.recipes.errors import RecipeError
from trtspec.recipes.routing import request_tokens, unique_experts

_GEMM_QUANTS = {2.0: "bfloat16", 1.0: "fp8", 0.5625: "nvfp4", 0.5156: "int4_wo"}
_MOE_QUANTS = {"none": "bfloat16", "bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4",
               "nvfp4": "nvfp4", "int4_awq": "int4_wo", "w4a8_awq": "w4afp8"}
# An engine collects FP8 in one of two scalings: per-tensor ("fp8") or 128x128 blocks ("fp8_block", what SGLang and
# DeepSeek-style checkpoints run). Same bytes and tensor-core dtype: a shape missing in one is asked in the other.
_ALTERNATIVES = {"fp8": ("fp8", "fp8_block")}
# 4-bit experts come in two scalings: NVFP4 (fp8 scale per 16) and MXFP4 (e8m0 scale per 32, what DeepSeek-V4 and
# gpt-oss ship, run as w4a8 with mxfp8 activations or w4a16): about the same weight bytes; a routed-expert shape
# missing in one is asked in the others, in this order.
_MOE_ALTERNATIVES = {**_ALTERNATIVES, "nvfp4": ("nvfp4", "w4a8_mxfp4_mxfp8", "w4a16_mxfp4")}
# Token routing of the MoE tables: aiconfigurator-core's own default (sdk/config.py workload_distribution
# "power_law", alpha 1.01 in its DeepSeek-family models): real traffic is skewed, so B*(1+D) tokens touch fewer
# distinct experts than uniform ("balanced") routing would, and the collected latency grows smoothly with tokens.
MOE_DISTRIBUTION = "power_law_1.01"
# Size-axis points a shape is asked at (see the module docstring); extended by x1.5 / x1.33 steps past the end.
LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
          6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536)
SWITCH_RATIO = 1.15  # price growth beyond size growth x this between two ladder points = a kernel / tile switch


class PerfDBUnavailable(RecipeError):
    """No measured database for this (system, engine, version); the message says why."""


def gemm_quant(weight_bytes: float, compute: str) -> str | None:
    """aiconfigurator GEMM quant mode for a weight precision (bytes/param) and compute dtype, None if it has none."""
    if compute == "fp8" and weight_bytes < 1.0:
        return None  # w4a8: no GEMM table
    return _GEMM_QUANTS.get(round(float(weight_bytes), 4))


def moe_quant(quant: str) -> str | None:
    """aiconfigurator MoE quant mode for a trtspec ``--quant`` base name."""
    return _MOE_QUANTS.get(str(quant).split(":")[0])


def _no_data_errors() -> tuple:
    from aiconfigurator_core.sdk import errors

    return (errors.PerfDataNotAvailableError, errors.MissingSystemFlopsError,
            errors.InterpolationDataNotAvailableError, errors.EmpiricalNotImplementedError,
            errors.UnsupportedAttentionBackendError)


@dataclass
class PerfDB:
    """One loaded database; see the module docstring. Times in seconds."""

    system: str
    engine: str
    version: str
    _handle: object = field(repr=False, default=None)
    database: object = field(repr=False, default=None)  # the package's PerfDatabase (its backends take it)
    _memo: dict = field(default_factory=dict, repr=False)
    tiers: set = field(default_factory=set, repr=False)
    _env: dict = field(default_factory=dict, repr=False)
    switches: dict = field(default_factory=dict, repr=False)  # key -> [(size_lo, size_hi, price ratio)]
    _fits: dict = field(default_factory=dict, repr=False)  # routed-expert key -> (a, b) of a + b * u(T)

    @property
    def label(self) -> str:
        return f"perf-db {self.engine} {self.version} {self.system}"

    def _eval(self, make_op, *, batch: int, s: int, x: int | None, key: tuple, context: bool = False) -> float | None:
        full = (key, batch, s, x)
        if full in self._memo:
            return self._memo[full]
        from aiconfigurator_core.sdk.engine import build_ops_json

        try:
            (_, ms, _, tier), = self._handle.evaluate_ops_json(build_ops_json([make_op()]), is_context=context,
                                                               batch_size=int(batch), s=int(s),
                                                               x=None if x is None else int(x))
        except _no_data_errors():
            value = None
        else:
            value = float(ms) * 1e-3 if ms > 0 else None
            if value is not None:
                self.tiers.add(str(tier))
        self._memo[full] = value
        return value

    def _monotone(self, key: tuple, x: int, at) -> float | None:
        """The price at size ``x`` of the shape ``key`` whose raw price at size v is ``at(v)`` (None: no data),
        from the running maximum over the ladder (module docstring)."""
        x = max(1, int(x))
        pts, env = self._env.setdefault(key, ([], []))
        while not pts or pts[-1] < x:
            n = len(pts)
            v = LADDER[n] if n < len(LADDER) else int(pts[-1] * (1.5 if n % 2 else 4 / 3))
            raw = at(v)
            prev = env[-1] if env else None
            cur = prev if raw is None else (raw if prev is None else max(raw, prev))
            if raw is not None and prev is not None and raw > prev * (v / pts[-1]) * SWITCH_RATIO:
                self.switches.setdefault(key, []).append((pts[-1], v, raw / prev))
            pts.append(v)
            env.append(cur)
        i = bisect.bisect_left(pts, x)
        if pts[i] == x or i == 0:
            return env[i]
        lo, hi = env[i - 1], env[i]
        if lo is None or hi is None:
            return hi
        return lo + (hi - lo) * (x - pts[i - 1]) / (pts[i] - pts[i - 1])

    def ladder(self, key: tuple, size: int, at) -> float | None:
        """``at(v)`` (a price at size v, None: no data) read on the size ladder -- running maximum, linear between
        two points (module docstring) -- for prices that ``trtspec.recipes.pricing`` derives from the tables."""
        return self._monotone(key, size, at)

    def switch_between(self, lo: int, hi: int) -> list:
        """Kernel / tile switches recorded on any shape between sizes ``lo`` and ``hi`` (exclusive, inclusive):
        ``[(key kind, size_lo, size_hi, ratio)]``."""
        return [(key[0], a, b, r) for key, found in self.switches.items() for a, b, r in found if lo < b and a < hi]

    def gemm(self, n: int, k: int, m: int, quant: str) -> float | None:
        """One GEMM [m, k] x [k, n] in ``quant`` (aiconfigurator mode name)."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import GEMM

        if n < 1 or k < 1 or m < 1:
            return 0.0
        for name in _ALTERNATIVES.get(quant, (quant,)):
            q = getattr(common.GEMMQuantMode, name)
            key = ("gemm", n, k, name)
            t = self._monotone(key, m, lambda v: self._eval(lambda: GEMM("gemm", 1, int(n), int(k), q), batch=1, s=1,
                                                             x=v, key=key))
            if t is not None:
                return t
        return None

    def attention(self, batch: int, context: int, heads: int, kv_heads: int, head_dim: int, kv_quant: str,
                  window: int | None = None) -> float | None:
        """One layer's generation attention: ``batch`` requests, one query token each, ``context`` cached tokens."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import GenerationAttention

        q = getattr(common.KVCacheQuantMode, kv_quant)
        extra = {"window_size": int(window)} if window else {}
        key = ("attn", heads, kv_heads, head_dim, kv_quant, window, max(1, context))
        return self._monotone(key, batch, lambda v: self._eval(
            lambda: GenerationAttention("generation_attention", 1, int(heads), int(kv_heads), q,
                                        head_size=int(head_dim), **extra), batch=v, s=max(1, context), x=None, key=key))

    def mla(self, batch: int, context: int, heads: int, kv_quant: str) -> float | None:
        """One layer's generation MLA (absorbed, latent KV) for ``heads`` local heads, one query token per request."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import GenerationMLA

        q = getattr(common.KVCacheQuantMode, kv_quant)
        key = ("mla", heads, kv_quant, max(1, context))
        return self._monotone(key, batch, lambda v: self._eval(
            lambda: GenerationMLA("generation_attention", 1, int(heads), q), batch=v, s=max(1, context), x=None,
            key=key))

    def context_attention(self, tokens: int, heads: int, kv_heads: int, head_dim: int, kv_quant: str,
                          window: int | None = None) -> float | None:
        """One layer's causal prefill attention of one prompt of ``tokens`` tokens (bf16 FMHA, the package's
        context-attention tables; its own interpolation between collected prompt lengths)."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import ContextAttention

        q = getattr(common.KVCacheQuantMode, kv_quant)
        extra = {"window_size": int(window)} if window else {}
        key = ("ctx_attn", heads, kv_heads, head_dim, kv_quant, window)
        return self._eval(lambda: ContextAttention("context_attention", 1, int(heads), int(kv_heads), q,
                                                   common.FMHAQuantMode.bfloat16, head_size=int(head_dim), **extra),
                          batch=1, s=max(1, int(tokens)), x=None, key=key, context=True)

    def context_mla(self, tokens: int, heads: int, kv_quant: str) -> float | None:
        """One layer's causal prefill MLA of one prompt of ``tokens`` tokens for ``heads`` local heads."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import ContextMLA

        q = getattr(common.KVCacheQuantMode, kv_quant)
        key = ("ctx_mla", heads, kv_quant)
        return self._eval(lambda: ContextMLA("context_attention", 1, int(heads), q, common.FMHAQuantMode.bfloat16),
                          batch=1, s=max(1, int(tokens)), x=None, key=key, context=True)

    def mla_bmm(self, tokens: int, heads: int, quant: str, pre: bool) -> float | None:
        """The absorbed MLA batched GEMM before (``pre``) or after attention for ``tokens`` tokens."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import MLABmm

        q = getattr(common.GEMMQuantMode, quant)
        key = ("mla_bmm", heads, quant, pre)
        return self._monotone(key, tokens, lambda v: self._eval(
            lambda: MLABmm("mla_bmm", 1, int(heads), q, if_pre=bool(pre)), batch=v, s=1, x=v, key=key))

    def moe(self, tokens: int, hidden: int, inter: int, topk: int, experts: int, moe_tp: int, moe_ep: int,
            quant: str, requests: int | None = None) -> float | None:
        """Routed experts of one MoE layer (grouped GEMMs, activation) for ``tokens`` tokens (``MOE_DISTRIBUTION``)
        of ``requests`` requests (None: independent tokens; see ``_expert_loading``)."""
        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk.operations import MoE

        for name in _MOE_ALTERNATIVES.get(quant, (quant,)):
            q = getattr(common.MoEQuantMode, name)
            key = ("moe", hidden, inter, topk, experts, moe_tp, moe_ep, name)

            def at(v, q=q, key=key):
                return self._eval(lambda: MoE("moe", 1, int(hidden), int(inter), int(topk), int(experts), int(moe_tp),
                                              int(moe_ep), q, MOE_DISTRIBUTION, 1), batch=v, s=1, x=v, key=key)

            t = self._monotone(key, tokens, at)
            if t is not None:
                return self._expert_loading(key, tokens, topk, experts, at, t, requests)
        return None

    def _expert_loading(self, key: tuple, tokens: int, topk: int, experts: int, at, table: float,
                        requests: int | None = None) -> float:
        """The decode regime of a routed-expert table read through its fit ``a + b * u(T)`` (module docstring):
        below ``T_full = experts / topk`` tokens the cost is a fixed launch part plus the distinct experts loaded,
        u(T) = E * (1 - (1 - k/E)^T), so a kernel switch the table shows there does not move the price; above it
        the table's own (monotone) price, never below the fit. Tokens of ``requests`` requests share experts within
        a request: the experts they are expected not to load, u(T) - u(T'), come off at b each (T' =
        ``routing.request_tokens``; nothing comes off once every expert is loaded either way)."""
        full = max(1, math.ceil(experts / topk))
        if key not in self._fits:
            pts = [v for v in LADDER if v <= full] or [1]
            rows = [(unique_experts(experts, topk, v), self._monotone(key, v, at)) for v in pts]
            rows = [(u, y) for u, y in rows if y is not None]
            self._fits[key] = _line(rows)
        a, b = self._fits[key]

        def fit(t: float) -> float:
            return a + b * unique_experts(experts, topk, t)

        spared = b * (unique_experts(experts, topk, tokens) -
                      unique_experts(experts, topk, request_tokens(tokens, requests)))
        if tokens <= full:
            return fit(tokens) - spared
        walked = self._without_switches(key, tokens, full, loading_edge(experts, topk), at, fit)
        return max(walked, fit(tokens)) - spared

    def _without_switches(self, key: tuple, tokens: int, full: int, edge: int, at, fit) -> float:
        """The routed-expert table above ``full`` tokens walked ladder point by ladder point from its price at
        ``full``: each step grows by the table's own ratio, except, for a step that starts below ``edge`` (still
        loading new experts), a kernel switch -- growth beyond the fit's (the experts loaded) x ``SWITCH_RATIO`` --
        which grows by the fit's ratio (module docstring)."""
        pts = [full] + [v for v in LADDER if v > full]
        price = self._monotone(key, full, at)
        for lo, hi in zip(pts, pts[1:]):
            t_lo, t_hi = self._monotone(key, lo, at), self._monotone(key, hi, at)
            if price is None or t_lo is None or t_hi is None:
                return self._monotone(key, tokens, at) or 0.0
            ratio = t_hi / t_lo
            if lo < edge and ratio > fit(hi) / fit(lo) * SWITCH_RATIO:
                ratio = fit(hi) / fit(lo)
            step = price * ratio
            if hi >= tokens:
                return price + (step - price) * (tokens - lo) / (hi - lo)
            price = step
        return price * self._monotone(key, tokens, at) / self._monotone(key, pts[-1], at)

    def allreduce(self, tokens: int, hidden: int, tp: int) -> float | None:
        """One all-reduce of ``tokens`` x ``hidden`` bf16 activations over ``tp`` GPUs (0 for tp = 1)."""
        from aiconfigurator_core.sdk.operations import CustomAllReduce

        if tp <= 1:
            return 0.0
        key = ("ar", hidden, tp)
        return self._monotone(key, tokens, lambda v: self._eval(
            lambda: CustomAllReduce("allreduce", 1, int(hidden), int(tp)), batch=v, s=1, x=v, key=key))


def loading_edge(experts: int, topk: int) -> int:
    """Tokens by which top-``topk`` routing over ``experts`` is expected to have touched every expert: the
    coupon-collector point where fewer than one expert is expected untouched, E * (1 - k/E)^T < 1, i.e.
    T > ln(E) / -ln(1 - k/E) ~ (E/k) ln E; at least E/k."""
    if topk >= experts:
        return 1
    return max(math.ceil(experts / topk), math.ceil(math.log(experts) / -math.log(1.0 - topk / experts)))


def _line(rows: list) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b*u over ``rows`` of (u, y), both >= 0 (b = 0 with a single point)."""
    if len(rows) < 2:
        return (rows[0][1] if rows else 0.0), 0.0
    n = len(rows)
    mu, my = sum(u for u, _ in rows) / n, sum(y for _, y in rows) / n
    var = sum((u - mu) ** 2 for u, _ in rows)
    b = max(0.0, sum((u - mu) * (y - my) for u, y in rows) / var) if var > 0 else 0.0
    a = my - b * mu
    if a < 0:  # through the origin instead
        a, b = 0.0, sum(u * y for u, y in rows) / sum(u * u for u, _ in rows)
    return a, b


class _CYaml:
    """``yaml`` as aiconfigurator-core's loader uses it, parsing with libyaml (``CSafeLoader``): the same safe
    YAML 1.1 documents, several times faster. Its version-slot lookup parses every system file of the package
    (about 0.75 s of a cold plan in pure Python)."""

    def __init__(self, yaml):
        self._yaml = yaml

    def __getattr__(self, name):
        return getattr(self._yaml, name)

    def safe_load(self, stream):
        return self._yaml.load(stream, Loader=self._yaml.CSafeLoader)

    def load(self, stream, Loader=None):  # noqa: N803 (PyYAML's keyword)
        fast = self._yaml.CSafeLoader if Loader in (None, self._yaml.SafeLoader) else Loader
        return self._yaml.load(stream, Loader=fast)


@contextlib.contextmanager
def _libyaml(module):
    """Within the block, ``module.yaml`` parses safe YAML with libyaml when PyYAML was built with it."""
    import yaml

    if not getattr(yaml, "__with_libyaml__", False) or getattr(module, "yaml", None) is not yaml:
        yield
        return
    module.yaml = _CYaml(yaml)
    try:
        yield
    finally:
        module.yaml = yaml


@functools.lru_cache(maxsize=None)
def open_db(system: str, engine: str, version: str) -> PerfDB:
    """Load (once per process) the database of ``system`` / ``engine`` / ``version``; see the module docstring."""
    try:
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError as exc:
        raise PerfDBUnavailable(f"aiconfigurator-core is not installed ({exc}); pip install aiconfigurator-core") from exc
    log = logging.getLogger("aiconfigurator_core")
    level = log.level
    log.setLevel(max(level, logging.ERROR))  # its loader logs every fallback table it reads at WARNING
    try:
        try:
            with _libyaml(perf_database):
                db = perf_database.get_database(system, engine, version)
        except ValueError as exc:
            raise PerfDBUnavailable(f"aiconfigurator-core has no {engine} {version} data for {system}: {exc}") from exc
        if db is None:
            raise PerfDBUnavailable(f"aiconfigurator-core has no {engine} {version} data for {system}")
        handle = EngineHandle.for_database(db)
    finally:
        log.setLevel(level)
    return PerfDB(system, engine, version, handle, db)
