"""Roofline step-time model of one forward pass, per op class (co-design guidelines 1-4 live here).

With a ``pricer`` (``trtspec.recipes.pricing``; the default of a plan) each op class is then re-priced from measured
kernel tables where they exist, and the engine's fixed costs replace the GPU file's ``step_overhead``; without one
(``pricing="roofline"``) this module alone is the analytic model described below.

All times in seconds, sizes in bytes, work in FLOPs; one GPU of a tensor-parallel group of ``tp`` GPUs. A forward
processes ``batch`` requests with ``tokens`` new tokens each (1 for plain decode, 1+D to verify a chain of D drafts,
``num_nodes`` for a tree) against a KV cache of ``context`` tokens.

* **Linear layers** (guideline 1): a GEMM with M = batch*tokens rows costs
  ``max(weight+activation bytes / BW, 2*M*params / peak)``. Once compute-bound, M is rounded up to the GEMM tile
  (``gpu.gemm_tile_m``): verification raises M to B*(1+D) and costs nothing extra until that crossover.
* **Attention** (guidelines 2-3): the G*tokens query rows that share one KV head go into MMA tiles of
  ``gpu.attention_tile_rows`` (128) rows; each tile pass streams that head's KV cache once (sliding-window layers:
  ``min(context, window)`` tokens; MLA: the shared ``kv_lora_rank + rope`` latent with G = all local heads). The
  arithmetic intensity is ~2*G*(1+D) FLOP per KV element, so the cost is flat until G*(1+D) reaches 128, then grows
  by one pass at each further multiple of 128. Hence D = 128/G - 1 and "prefer G*(1+D) a multiple of 128".
* **Linear attention / Mamba-2**: a fixed state per request is read once and written ``tokens`` times (verification
  keeps one state snapshot per draft position so that rejected drafts can be rolled back).
* **MoE**: T = batch*tokens independent, uniformly routed tokens would touch ``E*(1-(1-k/E)^T)`` distinct experts
  per layer on average; ``trtspec.recipes.routing`` counts fewer -- a Zipf expert popularity, and a request's
  successive verified tokens counted as fewer independent ones, since they share experts beyond chance; those
  experts' weights are loaded; each expert's grouped GEMM rounds its rows up to the tile once compute-bound.
* **Tensor parallel**: one all-reduce of the step's activations after each mixer and each feed-forward:
  ``latency + 2*(tp-1)/tp * bytes / link_bandwidth``.
* **Logits** (``logits_time``): the LM head is split over the vocabulary, so the engine all-gathers each token's
  logits from the ``tp`` GPUs (SGLang's ``LogitsProcessor`` and vLLM's logits processor gather the vocab-parallel
  shards before sampling) and the sampler or the verification reads the full rows once: ``(tp-1)/tp * rows * vocab
  * 2 bytes`` over the link plus ``rows * vocab * 2`` bytes from memory, for the rows that need logits (every
  verified token). Negligible at a decode batch; a batch of 32 requests verifying 16 tree tokens each gathers
  ~155 MB of bf16 logits per step (Qwen3's 152k vocabulary).
* **Fixed costs**: ``gpu.layer_overhead`` per Llama-style layer (launch gaps under CUDA graphs; other block kinds
  scale by their kernel count, ``KERNEL_WEIGHT``) and ``gpu.step_overhead`` per forward (scheduling, sampling, host
  sync); see the GPU file for the justification of each figure.
* **Latency floors** (``gpu.kernel_floor``): no kernel finishes faster than about one launch + one wave, whatever its
  roofline says. Each GEMM costs ``max(roofline, floor)`` (a group of n matrices: ``max(roofline, n*floor)``,
  ``GEMM_COUNT``); the attention / state kernel and each routed-expert grouped GEMM likewise; the small kernels of a
  block that move almost no bytes (norms, RoPE, activation, MoE top-k / permute / finalize: ``SMALL_KERNELS``) cost
  one floor each. Routed experts get one floor per grouped-GEMM launch, not per expert: a grouped GEMM runs all
  active experts' tiles in one launch on separate CTAs, so more experts cost bytes (the roofline), not launches.
  At batch 1 these floors bind only where the per-GPU work is tiny -- TP8 MLA+MoE layers (DeepSeek),
  small drafts -- and, because they are maxima, they do not grow with D: the growth comes from the roofline terms.

Guideline 4 (low-latency end) follows: at batch 1 both the target and a deep draft are dominated by per-layer work,
so speedup ~ AL / (1 + rho*D) with rho ~ draft depth / target depth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trtspec.recipes import routing, variants
from trtspec.recipes.arch import Architecture, Block
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.gpus import GPU

# quant -> (weight bytes/param, KV bytes/element, tensor-core dtype for GEMMs). fp4 = NVFP4: 4 bits + one fp8 scale
# per 16 values; int4 AWQ: 4 bits + an fp16 scale per 128 values, computed in bf16.
QUANTS = {
    "none": (2.0, 2.0, "bf16"), "bf16": (2.0, 2.0, "bf16"), "fp16": (2.0, 2.0, "bf16"),
    "fp8": (1.0, 1.0, "fp8"), "fp4": (0.5625, 1.0, "fp4"), "nvfp4": (0.5625, 1.0, "fp4"),
    "int4_awq": (0.5156, 2.0, "bf16"), "w4a8_awq": (0.5156, 1.0, "fp8"),
}
ACT_BYTES = 2.0      # activations travel in bf16
# Fixed per-layer cost relative to a Llama-style layer (~9 kernels: norm, qkv, rope, attention, o, all-reduce+norm,
# gate/up, act, down), by kernel count of each half: MLA absorbed decode ~9 kernels (q_a/q_b/kv_a, norms, absorb bmm x2,
# attention, o), MoE ~9 (router, top-k, permute, 2 grouped GEMMs, act, finalize, shared expert), Mamba-2 ~6,
# gated DeltaNet ~7, a plain MLP ~4-5.
KERNEL_WEIGHT = {"attention": 0.5, "sliding": 0.5, "mla": 1.0, "linear": 0.8, "mamba2": 0.7, "dense": 0.5, "moe": 1.0,
                 None: 0.0}
# Latency-floor kernel counts per block half (see module docstring). GEMM_COUNT: separate weight GEMM launches --
# GQA qkv + o; MLA fused q_a/kv_a, q_b, the two absorb bmm's and o (TensorRT-LLM's DeepSeek decode path); DeltaNet
# in_proj qkvz + ba + out; Mamba-2 in_proj + out; dense gate_up + down; MoE router + shared gate_up + shared down
# (routed experts: 2 grouped GEMMs, floored in moe_time). SMALL_KERNELS: kernels with negligible traffic -- input
# norm + RoPE/KV write (GQA), input/q_a/kv_a norms + RoPE (MLA), conv1d + gated norm + gating (DeltaNet, Mamba-2),
# post-attention norm + activation (dense), norm + top-k + permute + finalize (MoE; activation fused in the GEMM).
GEMM_COUNT = {"attention": 2, "sliding": 2, "mla": 5, "linear": 3, "mamba2": 2, "dense": 2, "moe": 3, None: 0}
SMALL_KERNELS = {"attention": 2, "sliding": 2, "mla": 4, "linear": 3, "mamba2": 3, "dense": 2, "moe": 4, None: 0}
ROUTED_GEMMS = 2
STATE_BYTES = 4.0    # recurrent (linear attention / SSM) states are kept in fp32


@dataclass(frozen=True)
class Precision:
    """Bytes per weight / KV element and the GEMM compute dtype for a ``--quant`` name (see ``QUANTS``).

    ``QUANT:attn=OTHER`` keeps the attention/mixer weights in ``OTHER`` (e.g. ``fp4:attn=bf16``, the mixed recipe
    TensorRT-LLM uses for DeepSeek-R1 at low latency); ``mixer_weight_bytes`` then differs from ``weight_bytes``."""

    quant: str
    weight_bytes: float
    kv_bytes: float
    compute: str
    mixer_weight_bytes: float | None = None

    @classmethod
    def of(cls, quant: str) -> "Precision":
        text = str(quant).lower().strip()
        base, _, rest = text.partition(":")
        if base not in QUANTS:
            raise RecipeError(f"unknown --quant {quant!r}; expected one of {', '.join(QUANTS)} "
                              "(optionally with ':attn=<quant>')")
        mixer = None
        if rest:
            key, _, other = rest.partition("=")
            if key != "attn" or other not in QUANTS:
                raise RecipeError(f"--quant {quant!r}: expected '{base}:attn=<one of {', '.join(QUANTS)}>'")
            mixer = QUANTS[other][0]
        return cls(text, *QUANTS[base], mixer_weight_bytes=mixer)


COST_CLASSES = ("linear", "attention", "state", "moe", "lm_head", "comm", "overhead", "engine")


@dataclass
class StepCost:
    """Seconds per op class for one forward; ``total`` sums them. ``engine``: the serving engine's fixed costs
    (``trtspec.recipes.engines``; 0 in the analytic model, whose fixed costs are all in ``overhead``). ``sources``
    maps an op class to what priced it (``perf-db ...`` / ``roofline`` / the engine file), for the plan."""

    linear: float = 0.0
    attention: float = 0.0
    state: float = 0.0
    moe: float = 0.0
    lm_head: float = 0.0
    comm: float = 0.0
    overhead: float = 0.0
    engine: float = 0.0
    sources: dict = field(default_factory=dict, compare=False)

    @property
    def total(self) -> float:
        return sum(getattr(self, k) for k in COST_CLASSES)

    def add(self, other: "StepCost", scale: float = 1.0) -> "StepCost":
        for k in COST_CLASSES:
            setattr(self, k, getattr(self, k) + scale * getattr(other, k))
        for k, label in other.sources.items():
            mine = self.sources.get(k)
            if mine is None:
                self.sources[k] = label
            elif label not in mine.split(" + "):
                self.sources[k] = f"{mine} + {label}"
        return self

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in COST_CLASSES}


def gemm_time(params: float, m: int, gpu: GPU, prec: Precision, hidden: int, wbytes: float | None = None,
              kernels: int = 1) -> float:
    """One group of ``kernels`` weight GEMMs (``params`` elements on this GPU in all, ``wbytes`` bytes each, default
    the quant's) applied to ``m`` rows of width ~``hidden``; never less than ``kernels * gpu.kernel_floor``."""
    if params <= 0 or m <= 0:
        return 0.0
    bw = gpu.bandwidth * gpu.eff_bandwidth
    wb = prec.weight_bytes if wbytes is None else wbytes
    peak = gpu.peak_flops(prec.compute if wb <= prec.weight_bytes else "bf16") * gpu.eff_compute
    t_mem = (params * wb + m * 2 * hidden * ACT_BYTES) / bw
    t_cmp = 2.0 * m * params / peak
    if t_cmp > t_mem:  # compute-bound: a partly filled tile costs a full one
        t_cmp = 2.0 * math.ceil(m / gpu.gemm_tile_m) * gpu.gemm_tile_m * params / peak
    return max(t_mem, t_cmp, kernels * gpu.kernel_floor)


def attention_time(arch: Architecture, block: Block, gpu: GPU, prec: Precision, tp: int, batch: int, tokens: int,
                   context: int) -> float:
    """Decode/verify attention of one layer (see module docstring, guidelines 2-3)."""
    if block.is_variant:  # own geometry or sparse / compressed attention: trtspec.recipes.variants prices it
        return variants.attention_time(arch, block, gpu, prec, tp, batch, tokens, context)
    bw = gpu.bandwidth * gpu.eff_bandwidth
    attn_dtype = "fp8" if prec.kv_bytes <= 1.0 and "fp8" in gpu.flops else "bf16"
    peak = gpu.peak_flops(attn_dtype) * gpu.eff_compute
    tile = gpu.attention_tile_rows
    length = context + tokens
    if block.mixer == "mla":
        heads = max(1, arch.num_heads // tp)
        latent = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        passes = math.ceil(heads * tokens / tile)
        bytes_pass = batch * length * latent * prec.kv_bytes
        flops_pass = batch * 2.0 * tile * length * (latent + arch.mla.kv_lora_rank)
        return max(passes * max(bytes_pass / bw, flops_pass / peak), gpu.kernel_floor)
    if block.window:
        length = min(length, block.window)
    kv_local = max(1, arch.num_kv_heads // tp)
    group = max(1, arch.num_heads // tp // kv_local)
    passes = math.ceil(group * tokens / tile)
    bytes_pass = batch * kv_local * length * 2 * arch.head_dim * prec.kv_bytes
    flops_pass = batch * kv_local * 4.0 * tile * length * arch.head_dim
    return max(passes * max(bytes_pass / bw, flops_pass / peak), gpu.kernel_floor)


def prefill_attention_time(arch: Architecture, block: Block, gpu: GPU, prec: Precision, tp: int, tokens: int) -> float:
    """Causal self-attention of one request's prompt of ``tokens`` tokens (a prefill, nothing cached before it):
    every (query, key) pair with the key at or before the query, within the layer's window -- ``T*w - w^2/2`` pairs
    for a span w = min(T, window) -- at 2*(d_k + d_v) FLOPs per pair and local head, compute-bound (the prompt's
    queries fill the MMA tiles). MLA is priced unabsorbed (per-head keys of qk_nope + qk_rope, values of
    v_head_dim), as prefill kernels run it. Sparse / compressed layers: ``tokens`` query tokens at the mid-prompt
    context (``trtspec.recipes.variants``: each query reads its own selected entries)."""
    if block.sparse is not None:
        return variants.attention_time(arch, block, gpu, prec, tp, 1, tokens, tokens // 2)
    if block.mixer == "mla":
        m = arch.mla
        heads, dk, dv = max(1, arch.num_heads // tp), m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    else:
        d = arch.attn_dims(block)
        heads, dk, dv = max(1, d.heads // tp), d.head_dim, d.v_head_dim
    span = min(tokens, block.window) if block.window else tokens
    pairs = tokens * span - span * span / 2.0
    flops = 2.0 * heads * pairs * (dk + dv)
    return max(flops / (gpu.peak_flops("bf16") * gpu.eff_compute), gpu.kernel_floor)


def prefill_state_time(spec, gpu: GPU, tp: int, tokens: int) -> float:
    """Linear-attention / Mamba-2 state of one prompt of ``tokens`` tokens: a chunked scan reads and writes the
    state once (no per-token snapshots: nothing is verified) and does ``tokens`` tokens' FLOPs."""
    bw = gpu.bandwidth * gpu.eff_bandwidth
    peak = gpu.peak_flops("bf16") * gpu.eff_compute
    per_request = (spec.state * STATE_BYTES + spec.conv * ACT_BYTES) / tp
    return max(2.0 * per_request / bw, tokens * spec.flops_per_token / tp / peak, gpu.kernel_floor)


def state_time(spec, gpu: GPU, prec: Precision, tp: int, batch: int, tokens: int) -> float:
    """Linear-attention / Mamba-2 state traffic: read once, write one snapshot per token (rollback of rejected drafts)."""
    bw = gpu.bandwidth * gpu.eff_bandwidth
    peak = gpu.peak_flops("bf16") * gpu.eff_compute
    per_request = (spec.state * STATE_BYTES + spec.conv * ACT_BYTES) / tp
    bytes_ = batch * per_request * (1 + tokens)
    flops = batch * tokens * spec.flops_per_token / tp
    return max(bytes_ / bw, flops / peak, gpu.kernel_floor)


def unique_experts(num_experts: int, k: int, routed_tokens: int) -> float:
    """Expected distinct experts hit by ``routed_tokens`` tokens choosing k of E uniformly: E*(1-(1-k/E)^T)."""
    return routing.unique_experts(num_experts, k, routed_tokens)


def moe_time(arch: Architecture, gpu: GPU, prec: Precision, tp: int, m: int, requests: int | None = None) -> float:
    """Routed experts of one MoE layer for ``m`` tokens of ``requests`` requests (shared experts are a dense GEMM,
    counted as linear): the distinct experts loaded under ``trtspec.recipes.routing``'s popularity and locality."""
    moe = arch.moe
    bw = gpu.bandwidth * gpu.eff_bandwidth
    peak = gpu.peak_flops(prec.compute) * gpu.eff_compute
    u = routing.popular_experts(moe.num_experts, moe.experts_per_token, routing.request_tokens(m, requests))
    per_expert = arch.expert_params / tp
    t_mem = (u * per_expert * prec.weight_bytes + m * moe.experts_per_token * 2 * arch.hidden * ACT_BYTES) / bw
    rows = m * moe.experts_per_token / u  # rows per active expert
    t_cmp = 2.0 * m * moe.experts_per_token * per_expert / peak
    if t_cmp > t_mem:
        t_cmp = 2.0 * u * math.ceil(rows / gpu.gemm_tile_m) * gpu.gemm_tile_m * per_expert / peak
    return max(t_mem, t_cmp, ROUTED_GEMMS * gpu.kernel_floor)


def allreduce_time(gpu: GPU, tp: int, nbytes: float) -> float:
    if tp <= 1:
        return 0.0
    link = gpu.link_bandwidth * gpu.eff_link
    if link <= 0:
        raise RecipeError(f"gpu {gpu.name!r} has no interconnect figure; cannot model --tp {tp}")
    return gpu.allreduce_latency + 2.0 * (tp - 1) / tp * nbytes / link


def block_cost(arch: Architecture, block: Block, gpu: GPU, prec: Precision, tp: int, batch: int, tokens: int,
               context: int, pricer=None, ep: int = 1, *, dp: int = 1, prefill: bool = False) -> StepCost:
    """One decoder layer of kind ``block``: the roofline, refined op class by op class by ``pricer``
    (``trtspec.recipes.pricing.Pricer``) where measured kernel data exists.

    ``dp``: attention data parallelism (``tp`` divisible by it): the token mixer of each GPU runs at attention TP
    ``tp / dp`` on its group's ceil(batch / dp) requests (its all-reduce over ``tp / dp`` GPUs), while the
    feed-forward / experts see every group's ``batch * tokens`` tokens over all ``tp`` GPUs (the all-gather or
    all-to-all that brings them there is priced as the all-reduce of those tokens). ``prefill``: ``batch`` prompts
    of ``tokens`` tokens with nothing cached (``prefill_attention_time``, ``prefill_state_time``)."""
    if dp < 1 or tp % dp:
        raise RecipeError(f"attention data parallelism {dp} must divide --tp {tp}")
    m = batch * tokens
    ta, ba = tp // dp, -(-batch // dp)
    ma = ba * tokens
    c = StepCost(overhead=gpu.layer_overhead * (KERNEL_WEIGHT[block.mixer] + KERNEL_WEIGHT[block.ffn])
                 + gpu.kernel_floor * (SMALL_KERNELS[block.mixer] + SMALL_KERNELS[block.ffn]))
    if block.mixer:
        c.linear += gemm_time(arch.mixer_params(block) / ta, ma, gpu, prec, arch.hidden, prec.mixer_weight_bytes,
                              kernels=GEMM_COUNT[block.mixer])
        state = arch.linear if block.mixer == "linear" else arch.mamba
        if block.mixer in ("linear", "mamba2"):
            c.state += ba * prefill_state_time(state, gpu, ta, tokens) if prefill else \
                state_time(state, gpu, prec, ta, ba, tokens)
        elif prefill:
            c.attention += ba * prefill_attention_time(arch, block, gpu, prec, ta, tokens)
        else:
            c.attention += attention_time(arch, block, gpu, prec, ta, ba, tokens, context)
        c.comm += allreduce_time(gpu, ta, ma * arch.hidden * ACT_BYTES)
    if block.ffn:
        gemms = GEMM_COUNT[block.ffn] if block.ffn == "dense" or arch.moe.shared_intermediate else 1  # router only
        c.linear += gemm_time(arch.ffn_params(block) / tp, m, gpu, prec, arch.hidden, kernels=gemms)
        if block.ffn == "moe":
            c.moe += moe_time(arch, gpu, prec, tp, m, batch)
        c.comm += allreduce_time(gpu, tp, m * arch.hidden * ACT_BYTES)
    c.sources = {k: "GPU file" if k == "overhead" else "roofline" for k in COST_CLASSES if getattr(c, k) > 0}
    if pricer is not None:
        pricer.block(arch, block, prec, tp, ep, batch, tokens, context, c, dp=dp, prefill=prefill)
    return c


def forward_cost(arch: Architecture, gpu: GPU, prec: Precision, *, tp: int = 1, batch: int = 1, tokens: int = 1,
                 context: int = 4096, blocks=None, lm_head_params: int | None = None, step_overhead: bool = True,
                 pricer=None, ep: int = 1, dp: int = 1, prefill: bool = False) -> StepCost:
    """One forward of ``blocks`` (default: all of ``arch``'s layers, as a Counter of Block -> count) plus the LM head
    (``lm_head_params`` elements, default vocab*hidden; logits for every token, gathered and read:
    ``logits_time``) and the fixed per-step overhead
    (the GPU file's ``step_overhead``; with a ``pricer``, its engine's ``step`` in class ``engine``). ``ep``: expert
    parallelism of the MoE layers (measured pricing only; the roofline splits experts by ``tp`` either way); ``dp``:
    attention data parallelism (``block_cost``). ``prefill``: ``batch`` prompts of ``tokens`` tokens, nothing
    cached, logits for each prompt's last token only."""
    if batch < 1 or tokens < 1 or context < 0 or tp < 1 or ep < 1:
        raise RecipeError(f"need batch >= 1, tokens >= 1, context >= 0, tp >= 1, ep >= 1; got {batch}, {tokens}, "
                          f"{context}, {tp}, {ep}")
    total = StepCost()
    if step_overhead and pricer is None:
        total.overhead = gpu.step_overhead
    elif step_overhead:
        total.engine = pricer.engine.step
        total.sources["engine"] = pricer.engine.name
    for block, count in (blocks if blocks is not None else arch.block_counts()).items():
        total.add(block_cost(arch, block, gpu, prec, tp, batch, tokens, context, pricer, ep, dp=dp, prefill=prefill),
                  count)
    head = arch.lm_head_params if lm_head_params is None else lm_head_params
    rows = batch if prefill else batch * tokens
    measured = pricer.lm_head(head, arch.hidden, tp, rows) if pricer is not None and head else None
    total.lm_head += measured if measured is not None else gemm_time(head / tp, rows, gpu, prec, arch.hidden)
    total.sources["lm_head"] = pricer.label if measured is not None else "roofline"
    if head:
        add_logits(total, gpu, tp, rows, head / arch.hidden)
    return total


def logits_time(gpu: GPU, tp: int, rows: int, vocab: float) -> tuple[float, float]:
    """(gather, read) seconds for the bf16 logits of ``rows`` tokens over ``vocab`` entries (module docstring): the
    all-gather of the ``tp`` vocabulary shards over the link (none at tp = 1) and one read of the full rows."""
    nbytes = rows * vocab * ACT_BYTES
    gather = 0.0
    if tp > 1:
        link = gpu.link_bandwidth * gpu.eff_link
        if link <= 0:
            raise RecipeError(f"gpu {gpu.name!r} has no interconnect figure; cannot model --tp {tp}")
        gather = (tp - 1) / tp * nbytes / link
    return gather, nbytes / (gpu.bandwidth * gpu.eff_bandwidth)


def add_logits(cost: StepCost, gpu: GPU, tp: int, rows: int, vocab: float) -> StepCost:
    """``cost`` plus ``logits_time`` (gather in class ``comm``, read in ``lm_head``; both on the roofline)."""
    gather, read = logits_time(gpu, tp, rows, vocab)
    cost.comm += gather
    cost.lm_head += read
    for key, t in (("comm", gather), ("lm_head", read)):
        mine = cost.sources.get(key)
        if t > 0 and (mine is None or "roofline" not in mine.split(" + ")):
            cost.sources[key] = "roofline" if mine is None else f"{mine} + roofline"
    return cost


def weight_bytes(arch: Architecture, prec: Precision, tp: int) -> float:
    """Weights resident on one GPU (all experts; embedding + LM head)."""
    return arch.total_params() * prec.weight_bytes / tp


def cache_bytes(arch: Architecture, prec: Precision, tp: int, batch: int, context: int) -> float:
    """KV cache (sliding layers keep only their window) and recurrent states for ``batch`` requests, one GPU (with
    attention data parallelism, call it with the attention TP and one group's requests)."""
    per_req = 0.0
    for block, count in arch.block_counts().items():
        if block.mixer in ("linear", "mamba2"):
            spec = arch.linear if block.mixer == "linear" else arch.mamba
            per_req += count * (spec.state * STATE_BYTES + spec.conv * ACT_BYTES) / tp
        elif block.is_variant:
            per_req += count * variants.cache_bytes(arch, block, prec, tp, context)
        else:
            length = min(context, block.window) if block.window else context
            kv_div = 1 if block.mixer == "mla" else min(tp, arch.num_kv_heads)
            per_req += count * length * arch.kv_elems_per_token(block) * prec.kv_bytes / kv_div
    return batch * per_req
