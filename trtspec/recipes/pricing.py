"""Step pricing: which source prices each op class of a forward, and what a real engine adds per step.

``Pricer`` (one per plan: a GPU, an ``--engine``) refines the roofline cost of each decoder block
(``trtspec.recipes.costmodel.block_cost``) with measured kernel latencies (``trtspec.recipes.perfdb``) where the
database has them, op class by op class, and records the source of each class in ``StepCost.sources``
(``perf-db trtllm 1.3.0rc20 h200_sxm`` or ``roofline``). A class the database is silent on keeps its roofline time.

Shapes the database does not measure, and the rule that derives them from what it does:

* **verification attention** (T = 1+D query rows per request; the generation tables hold one query row per
  request), between two physical limits, blended by the engine file's ``verification.verify_split`` s in [0, 1]
  (fitted on the corpus, ``benchmarks/bench_fidelity.py --fit``):

  - *packed* (s = 0): the T rows of a request read the same KV cache, and the G*T rows that share one KV head are
    packed into MMA tiles of ``gpu.attention_tile_rows`` (128) rows, each tile pass streaming that head's KV once
    (TensorRT-LLM's XQA speculative mode, FlashInfer / FlashAttention-3 GQA packing):
    ``P = T_generation(B, ctx + T) * ceil(G*T / 128)`` -- flat in D until G*T crosses a tile (guidelines 2-3);
  - *split* (s = 1): every verified token is a decode request of its own, ``S = T_generation(B*T, ctx + T)`` -- the
    KV cache re-read T times (aiconfigurator-core's own ``nextn`` pricing: generation ops at batch x (nextn+1));
  - ``T_verify = P + s * (S - P)``: s is the share of the extra KV passes the engine's kernels really pay (query
    packing that is partial, L2 reuse that the request's KV overflows). At D = 0 both are the plain decode price;
  - *MLA, packed*: one latent KV head serves every query head, and an MLA decode kernel folds the T query tokens
    into its query-row axis (FlashMLA: ``get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)``,
    deepseek-ai/FlashMLA README), so the H*T rows of a request share one pass over its latent cache: P is the
    generation-MLA table at H*T heads (``_mla_rows``), not T passes. The tables hold 1..``MLA_TABLE_HEADS`` heads
    and grow far slower than the head count while the latent read dominates (SGLang 0.5.14 on H200, fp8 KV, one
    request at 64k context: 164 us at 8 heads, 187 us at 128); beyond 128 rows the price goes on at the slope
    between the two largest collected head counts. P stays between the decode price and T times it; S as above;
* **sparse / compressed attention** (blocks with ``sparse``: DSA, MSA, DeepSeek-V4 CSA / HCA / window): a token
  reads its own selected entries, which the dense generation tables do not describe, so the attention class keeps
  its ``trtspec.recipes.variants`` price (source ``roofline``); its projections are measured GEMMs (the uniform
  mixer's plus one GEMM of the indexer's weights; DeepSeek-V4's own projections as one GEMM of their weight count).
  Layers with their own sizes (``dims``: Gemma 4, MiMo-V2, NAS) ask the tables for their own heads and head size
  (K and V heads of different sizes: variants.py);
* **GEMMs**: M = B*T rows is a measured axis (the package's interpolation); the LM head is a bf16 GEMM
  (Model-Optimizer leaves ``lm_head`` unquantized) with M = B*T (logits for every verified token);
* **MoE**: B*T routed tokens, power-law routing (``perfdb.MOE_DISTRIBUTION``), MoE TP = tp / ep and EP = ep
  (measured axes); the T tokens of one request share experts beyond chance (``trtspec.recipes.routing``), which
  ``perfdb`` takes off the experts the table's independent tokens load;
* **all-reduce**: two per layer (after the mixer and after the feed-forward) of B*T tokens (measured axis); with
  attention data parallelism (``dp``) the mixer's runs over the ``tp / dp`` GPUs of a group on its own tokens;
* **prefill** (a prompt of T tokens, nothing cached: ``trtspec.recipes.serving`` prices the prompts inside a
  measured run): GEMMs, experts and all-reduces at M = T rows, attention from the package's context-attention /
  context-MLA tables (causal, one prompt);
* **state mixers** (gated DeltaNet, Mamba-2): the recurrent-state kernels stay on the roofline (the package's
  kernels need sizes the descriptor does not keep); their projections are priced as one GEMM of the same weight
  count (n = params / hidden, k = hidden);
* **fixed costs**: the GPU file's per-layer figures (small kernels' floors, launch gaps: class ``overhead``) stay;
  the engine's per-forward, per-speculative-step and per-draft-forward costs (``recipes/engines/<engine>.yaml``)
  replace the GPU file's ``step_overhead_us`` / ``spec_overhead_us`` (class ``engine``).

``pricing="roofline"`` plans with no ``Pricer`` at all: every kernel on the roofline and the GPU file's fixed costs
(the analytic model alone, the baseline ``benchmarks/bench_fidelity.py`` prints beside the measured one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trtspec.recipes.engines import EngineProfile, load_engine
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.gpus import GPU
from trtspec.recipes.paths import book_dir
from trtspec.recipes.perfdb import PerfDB, PerfDBUnavailable, gemm_quant, moe_quant, open_db

PRICINGS = ("perf-db", "roofline")
ROOFLINE = "roofline"
# aiconfigurator-core collects generation MLA at num_heads 1, 2, ..., 128 (DeepSeek's 128 heads over TP 1..64;
# systems/data/<gpu>/mla/<engine>/<version>/generation_mla_perf.parquet): larger head counts are its extrapolation
MLA_TABLE_HEADS = 128


def _shown(path: str) -> str:
    """An engine file as provenance names it: ``recipes/engines/<name>.yaml`` for the book's own (wherever
    this checkout lives), else the path a user gave."""
    try:
        return "recipes/" + Path(path).resolve().relative_to(book_dir().resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


@dataclass
class Pricer:
    """Measured pricing for one GPU and engine (``db`` None: every kernel class falls back to the roofline)."""

    gpu: GPU
    engine: EngineProfile
    db: PerfDB | None
    note: str = ""

    @property
    def label(self) -> str:
        return self.db.label if self.db is not None else ROOFLINE

    def describe(self) -> dict:
        """What prices what, for plan provenance."""
        return {"kernels": self.label if self.db else f"roofline ({self.note})", "engine": self.engine.name,
                "engine_overheads": _shown(self.engine.path), "perf_db_tiers": sorted(self.db.tiers) if self.db else [],
                "verify_split": self.engine.verify_split,
                **({"kernel_scale": self.engine.kernel_scale} if self.engine.kernel_scale != 1.0 else {})}

    # ---- single GEMMs (drafter heads, fc layers) -----------------------------------------------------------------
    def gemm(self, n: float, k: int, m: int, prec, wbytes: float | None = None) -> float | None:
        """One weight GEMM of n x k (per GPU) on m rows, or None where the database has no such dtype/shape."""
        if self.db is None:
            return None
        wb = prec.weight_bytes if wbytes is None else wbytes
        q = gemm_quant(wb, prec.compute if wb <= prec.weight_bytes else "bf16")
        if q is None:
            return None
        return self.db.gemm(max(1, round(n)), int(k), int(m), q)

    def lm_head(self, params: float, hidden: int, tp: int, m: int) -> float | None:
        if self.db is None:
            return None
        return self.db.gemm(max(1, round(params / hidden / tp)), hidden, m, "bfloat16")

    # ---- one decoder block -----------------------------------------------------------------------------------------
    def block(self, arch, block, prec, tp: int, ep: int, batch: int, tokens: int, context: int, cost, *,
              dp: int = 1, prefill: bool = False) -> None:
        """Overwrite the measured op classes of ``cost`` (one block's roofline ``StepCost``) and set their sources;
        ``dp``: attention data parallelism, ``prefill``: ``batch`` prompts of ``tokens`` tokens
        (``trtspec.recipes.costmodel.block_cost``)."""
        if self.db is None:
            return
        m = batch * tokens
        ta, ba = tp // dp, -(-batch // dp)
        gemms = []
        if block.mixer:
            gemms += _mixer_gemms(self, arch, block, prec, ta, ba * tokens)
        if block.ffn:
            gemms += _ffn_gemms(self, arch, block, prec, tp, m)
        if gemms and all(t is not None for t in gemms):
            cost.linear = sum(gemms)
            cost.sources["linear"] = self.label
        if block.mixer in ("attention", "sliding", "mla") and block.sparse is None:
            att = _prefill_attention(self, arch, block, prec, ta, tokens) if prefill else \
                _attention(self, arch, block, prec, ta, ba, tokens, context)
            if att is not None:
                cost.attention = att * (ba if prefill else 1)
                cost.sources["attention"] = self.label
        if block.ffn == "moe":
            moe = arch.moe
            q = moe_quant(prec.quant)
            t = None if q is None or tp % ep else self.db.moe(m, arch.hidden, moe.intermediate, moe.experts_per_token,
                                                              moe.num_experts, tp // ep, ep, q,
                                                              requests=batch)
            if t is not None:
                cost.moe = t
                cost.sources["moe"] = self.label
        if tp > 1:
            mixer = self.db.allreduce(ba * tokens, arch.hidden, ta) if block.mixer else 0.0
            ffn = self.db.allreduce(m, arch.hidden, tp) if block.ffn else 0.0
            if mixer is not None and ffn is not None:
                cost.comm = mixer + ffn
                cost.sources["comm"] = self.label


def _mixer_gemms(p: Pricer, arch, block, prec, tp: int, m: int) -> list:
    h, mixer, sparse = arch.hidden, block.mixer, block.sparse
    wb = prec.mixer_weight_bytes
    if sparse is not None and sparse.full_mixer:  # DeepSeek-V4: its own projections, as one GEMM of their weights
        return [p.gemm(sparse.params / h / tp, h, m, prec, wb)]
    extra = [p.gemm(sparse.params / h / tp, h, m, prec, wb)] if sparse is not None and sparse.params else []
    if mixer in ("attention", "sliding"):
        d = arch.attn_dims(block)
        heads, kv = max(1, d.heads // tp), max(1, d.kv_heads // tp)
        q = heads * d.head_dim * (2 if arch.attn_output_gate else 1)  # the output gate rides on q_proj
        kv_out = kv * d.head_dim + (0 if d.shared_kv else kv * d.v_head_dim)
        return [p.gemm(q + kv_out, h, m, prec, wb), p.gemm(h, heads * d.v_head_dim, m, prec, wb)] + extra
    if mixer == "mla":
        mla, heads = arch.mla, max(1, arch.num_heads // tp)
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        fused_a = (mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim  # replicated, not split by TP
        out = [p.gemm(fused_a, h, m, prec, wb), p.gemm(heads * qk, mla.q_lora_rank or h, m, prec, wb),
               p.gemm(h, heads * mla.v_head_dim, m, prec, wb)]
        wq = prec.weight_bytes if wb is None else wb
        q = gemm_quant(wq, prec.compute if wq <= prec.weight_bytes else "bf16")
        q = q if q in ("fp8", "bfloat16") else "bfloat16"
        out += [p.db.mla_bmm(m, heads, q, True), p.db.mla_bmm(m, heads, q, False)]
        return out + extra
    spec = arch.linear if mixer == "linear" else arch.mamba
    return [p.gemm(spec.proj_params / h / tp, h, m, prec, wb)]  # equivalent GEMM of the projections' weights


def _ffn_gemms(p: Pricer, arch, block, prec, tp: int, m: int) -> list:
    h, gated = arch.hidden, arch.mlp_gated
    if block.ffn == "dense":
        inter = block.ffn_width or arch.intermediate
        return [p.gemm((2 if gated else 1) * inter / tp, h, m, prec), p.gemm(h, max(1, inter // tp), m, prec)]
    out = [p.db.gemm(arch.moe.num_experts, h, m, "bfloat16")]  # router
    shared = arch.moe.shared_intermediate
    if shared:
        out += [p.gemm((2 if gated else 1) * shared / tp, h, m, prec), p.gemm(h, max(1, shared // tp), m, prec)]
    return out


def _attention(p: Pricer, arch, block, prec, tp: int, batch: int, tokens: int, context: int) -> float | None:
    """Verification attention of B requests x T query rows: the packed and split prices blended by the engine's
    ``verify_split`` (see the module docstring); None where the tables hold no such kernel."""
    kvq = "fp8" if prec.kv_bytes <= 1.0 else "bfloat16"
    length = context + tokens
    if block.mixer == "mla":
        return _mla_verify(p, batch, length, max(1, arch.num_heads // tp), tokens, kvq)
    d = arch.attn_dims(block)
    if d.v_head_dim != d.head_dim:
        return None  # the generation tables hold K and V of one head size: variants.py prices the layer
    heads, kv = max(1, d.heads // tp), max(1, d.kv_heads // tp)
    group = max(1, heads // kv)

    def one(b):
        return p.db.attention(b, length, heads, kv, d.head_dim, kvq, block.window)
    base = one(batch)
    if base is None:
        return None
    packed = base * math.ceil(group * tokens / p.gpu.attention_tile_rows)
    split = p.engine.verify_split
    if tokens == 1 or split <= 0.0:
        return packed
    apart = one(batch * tokens)
    return None if apart is None else packed + split * (apart - packed)


def _mla_verify(p: Pricer, batch: int, length: int, heads: int, tokens: int, kvq: str) -> float | None:
    """MLA verification of ``batch`` requests x ``tokens`` query tokens over ``heads`` local heads: packed
    P = the H*T query rows in one latent pass (``_mla_rows``), kept within [decode price, T x decode price], blended
    towards split rows by the engine's ``verify_split`` (module docstring); None where the tables hold no kernel."""
    base = p.db.mla(batch, length, heads, kvq)
    if base is None or tokens == 1:
        return base
    rows = p.db.ladder(("mla_rows", heads, tokens, kvq, length), batch,
                       lambda b: _mla_rows(p, b, length, heads, tokens, kvq))  # monotone in the batch
    apart = p.db.mla(batch * tokens, length, heads, kvq)
    if rows is None or apart is None:
        return None
    packed = min(max(rows, base), tokens * base)
    return packed + p.engine.verify_split * max(0.0, apart - packed)


def _mla_rows(p: Pricer, batch: int, length: int, heads: int, tokens: int, kvq: str) -> float | None:
    """Generation MLA of ``batch`` requests whose ``heads * tokens`` query rows share one pass over each request's
    latent KV cache of ``length`` tokens (module docstring). The table is read at heads, 2*heads, 4*heads, ... up to
    ``MLA_TABLE_HEADS`` as perfdb reads its size ladders (running maximum, linear between two points: more rows
    never cost less); beyond the last point, at the per-row slope between the two largest collected head counts.
    None where the tables hold no such kernel."""
    rows, top = heads * tokens, MLA_TABLE_HEADS
    pts = [heads]
    while pts[-1] < rows and pts[-1] * 2 <= top:
        pts.append(pts[-1] * 2)
    env: list = []
    for h in pts:
        t = p.db.mla(batch, length, h, kvq)
        if t is None:
            return None
        env.append(max(t, env[-1]) if env else t)
    if rows <= pts[-1]:
        i = next(i for i, h in enumerate(pts) if h >= rows)
        if pts[i] == rows:
            return env[i]
        return env[i - 1] + (env[i] - env[i - 1]) * (rows - pts[i - 1]) / (pts[i] - pts[i - 1])
    hi, lo = p.db.mla(batch, length, top, kvq), p.db.mla(batch, length, top // 2, kvq)
    if hi is None or lo is None:
        return None
    return env[-1] + max(0.0, (hi - lo) / (top - top // 2)) * (rows - pts[-1])


def _prefill_attention(p: Pricer, arch, block, prec, tp: int, tokens: int) -> float | None:
    """One prompt of ``tokens`` tokens through one layer's attention: the package's context-attention (prefill)
    tables (bf16 FMHA; MLA: its context-MLA tables), None where they hold no such kernel."""
    kvq = "fp8" if prec.kv_bytes <= 1.0 else "bfloat16"
    if block.mixer == "mla":
        return p.db.context_mla(tokens, max(1, arch.num_heads // tp), kvq)
    d = arch.attn_dims(block)
    if d.v_head_dim != d.head_dim:
        return None
    return p.db.context_attention(tokens, max(1, d.heads // tp), max(1, d.kv_heads // tp), d.head_dim, kvq,
                                  block.window)


def make_pricer(gpu: GPU, engine: str = "trtllm", pricing: str = "perf-db",
                profile: EngineProfile | None = None) -> Pricer | None:
    """The ``Pricer`` for ``gpu`` under ``engine``; ``pricing='roofline'`` returns None (the analytic model alone);
    ``profile``: the engine's figures to use instead of its file (a deployment calibration's).

    A GPU without a ``perf_db`` system, or a database that cannot be loaded, keeps the engine's fixed costs and
    prices every kernel class by the roofline (``Pricer.note`` says why)."""
    if pricing not in PRICINGS:
        raise RecipeError(f"--pricing must be one of {PRICINGS}, got {pricing!r}")
    profile = profile if profile is not None else load_engine(engine)
    if pricing == "roofline":
        return None
    if not gpu.perf_db_system:
        return Pricer(gpu, profile, None, f"gpu {gpu.name!r} has no perf_db system in its GPU file")
    try:
        db = open_db(gpu.perf_db_system, profile.name, profile.perf_db_version_for(gpu.perf_db_system))
    except PerfDBUnavailable as exc:
        return Pricer(gpu, profile, None, str(exc))
    return Pricer(gpu, profile, db)
