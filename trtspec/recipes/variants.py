"""Attention variants beyond uniform GQA / MLA: per-layer geometry, and sparse or compressed attention.

**Per-layer geometry** (``AttnDims``): layers of one model that differ in query heads, KV heads or head sizes --
Gemma 4 global layers (2 KV heads of 512, V = K) beside its sliding layers (8 of 256), MiMo-V2-Flash sliding layers
(8 KV heads) beside its global ones (4), Step-3.7 sliding layers, Nemotron-NAS pruned layers. Priced with the dense
tile rule of ``trtspec.recipes.costmodel.attention_time`` on the layer's own sizes.

**Sparse / compressed attention** (``SparseAttention``, one per layer):

* ``dsa`` -- DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5.x): MLA whose query tokens each attend to the
  ``index_topk`` cache entries a lightning indexer selects. The indexer scores every cached token,
  ``sum_h w_h * ReLU(q_h . k_s)``, with ``index_n_heads`` query heads of ``index_head_dim`` against one FP8 key per
  token (``index_head_dim`` bytes plus one fp32 scale per 128). GLM-5.2/5.3 let most layers reuse the previous
  layer's selection (``indexer_types: shared``): such a layer has no indexer weights, keys or pass.
* ``msa`` -- MiniMax Sparse Attention (MiniMax-M3): GQA whose query tokens attend, per KV head, to the
  ``sparse_topk_blocks`` blocks of ``sparse_block_size`` tokens an indexer selects (``sparse_num_index_heads``
  heads of ``sparse_index_dim`` against one bf16 index key per token, max-pooled per block; the local block always
  wins a slot).
* ``csa`` / ``hca`` / ``swa`` -- DeepSeek-V4: shared-KV MQA (one KV head of ``head_dim`` read as key and value)
  over the last ``sliding_window`` tokens, plus, for ``compress_ratios`` 4 (CSA, compressed sparse attention), the
  ``index_topk`` of the context/4 compressed entries its indexer (FP4 keys) selects, and for 128 (HCA, heavily
  compressed attention) all context/128 compressed entries; ratio 0 is the window alone.

**Roofline price** of one layer for B requests x T query tokens at context C (L = C + T positions):

* main attention: sparse kernels (FlashMLA sparse, MiniMax's block top-k kernel) gather each query token's own
  entries, so T tokens cost T single-token decodes -- there is no flat region in D as for dense GQA, and
  guidelines 2-3 do not apply. The G query heads of one token that share a KV entry fill the rows of one MMA tile,
  padded to ``SPARSE_ROWS`` (FlashMLA pads heads to 64 or 128). With n entries read per token:
  bytes = B*T*kv_heads*n*entry_bytes, FLOPs = B*T*kv_heads*2*rows*n*(d_k + d_v). Entries shared by the T tokens of
  a request may hit in L2, so this is an upper bound.
* indexer: its H_I heads x T query rows share a pass over the keys (the paged MQA-logits kernels take a request's
  1+D tokens together): ceil(H_I*T / tile) passes over L/compress keys, 2*T*H_I*d_I FLOPs per key, plus the fp32
  logits written once and read once by the top-k. Its cost grows with the context, not with the top-k.
* each kernel (attention, index logits, top-k) costs at least ``gpu.kernel_floor``.

KV cache per request (one GPU): MLA-style latents (DSA, DeepSeek-V4) use FlashMLA's FP8 layout when the KV cache
is 1 byte/value -- the RoPE part stays bf16 and each 128 values carry one fp32 scale -- and are not split by TP;
DeepSeek-V4 adds its compressors' fp32 decode state (``2 * ratio * coff * head_dim * 4`` bytes, coff 2 for CSA,
plus the CSA indexer's) as aiconfigurator-core 0.12.0 ``sdk/models/deepseek_v4.py`` counts it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trtspec.recipes.errors import ConfigError

SPARSE_KINDS = ("dsa", "msa", "csa", "hca", "swa")
DSV4_RATIOS = {0: "swa", 4: "csa", 128: "hca"}   # compress_ratios value -> layer kind (transformers deepseek_v4)
SPARSE_ROWS = 64          # sparse attention kernels pad a token's query heads to 64-row tiles
LOGIT_BYTES = 8.0         # fp32 index logit written once and read once by the top-k, per (query token, key)
STATE_BYTES = 4.0         # compressor decode state is fp32


def fp8_key_bytes(dim: int) -> float:
    """One FP8 index key of ``dim`` values with one fp32 scale per 128 (DeepSeek-V3.2 / GLM-5 indexer cache)."""
    return dim + 4.0 * math.ceil(dim / 128)


def fp4_key_bytes(dim: int) -> float:
    """One FP4 index key (DeepSeek-V4's compressed indexer cache, aiconfigurator-core ``common.py``)."""
    return dim * 0.5


@dataclass(frozen=True)
class AttnDims:
    """Attention geometry of one layer where it differs from the model's (``heads`` query heads, ``kv_heads`` KV
    heads, ``head_dim`` for Q/K, ``v_head_dim`` for V; ``shared_kv``: V reuses K's projection, no ``v_proj``)."""

    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    shared_kv: bool = False

    def __post_init__(self):
        for attr in ("heads", "kv_heads", "head_dim", "v_head_dim"):
            if not isinstance(getattr(self, attr), int) or getattr(self, attr) <= 0:
                raise ConfigError(f"attention layer: '{attr}' must be a positive integer, got {getattr(self, attr)!r}")
        if self.heads % self.kv_heads:
            raise ConfigError(f"attention layer: {self.heads} query heads are not a multiple of {self.kv_heads} "
                              "KV heads")

    def params(self, hidden: int) -> int:
        """q, k, (v), o projection weights."""
        kv = self.kv_heads * self.head_dim + (0 if self.shared_kv else self.kv_heads * self.v_head_dim)
        return hidden * (self.heads * self.head_dim + kv) + self.heads * self.v_head_dim * hidden


@dataclass(frozen=True)
class Indexer:
    """Lightning indexer of a sparse layer: ``heads`` x ``head_dim`` query rows per token scored against one key of
    ``key_bytes`` per indexed entry, on ``compute`` tensor cores (the FP8 MQA-logits kernels of DSA / DeepSeek-V4;
    bf16 for MSA). ``sharded``: heads split across TP ranks like the KV heads (MSA; DSA and DeepSeek-V4 indexers
    run whole on every rank). ``shared``: this layer reuses another layer's selection."""

    heads: int
    head_dim: int
    key_bytes: float
    compute: str = "fp8"
    sharded: bool = False
    shared: bool = False
    params: int = 0


@dataclass(frozen=True)
class SparseAttention:
    """One sparse / compressed attention layer (see module docstring). ``topk``: entries (dsa, csa) or tokens (msa)
    each query token reads from the selection; ``window``: recent tokens always read; ``compress``: tokens per
    compressed entry; ``params``: weights the variant adds to the layer's base mixer, or all the mixer's weights when
    ``full_mixer``; ``state_bytes``: fixed per-request cache bytes (compressor state)."""

    kind: str
    topk: int = 0
    window: int = 0
    compress: int = 1
    indexer: Indexer | None = None
    params: int = 0
    full_mixer: bool = False
    state_bytes: float = 0.0

    def __post_init__(self):
        if self.kind not in SPARSE_KINDS:
            raise ConfigError(f"unknown sparse attention kind {self.kind!r}; expected one of {SPARSE_KINDS}")
        if self.topk < 0 or self.window < 0 or self.compress < 1 or self.params < 0:
            raise ConfigError(f"bad sparse attention sizes: {self}")

    def entries(self, length: int) -> int:
        """Cache entries one query token reads at ``length`` positions."""
        window = min(length, self.window)
        if self.kind in ("dsa", "msa"):
            return min(length, self.topk)
        if self.kind == "csa":
            return window + min(length // self.compress, self.topk)
        if self.kind == "hca":
            return window + length // self.compress
        return window

    def indexed_keys(self, length: int) -> int:
        """Keys the indexer scores per query token (0 without an own indexer pass)."""
        if self.indexer is None or self.indexer.shared:
            return 0
        return length // self.compress

    def cached_entries(self, context: int) -> int:
        """Main-attention cache entries kept per request at ``context`` tokens."""
        if self.kind in ("dsa", "msa"):
            return context
        return min(context, self.window) + (context // self.compress if self.compress > 1 else 0)


# ---- geometry helpers (arch: a trtspec.recipes.arch.Architecture; duck-typed to keep this module below arch) ----
def _latent(arch) -> tuple:
    """(nope, rope, d_k, d_v) of an MLA-style latent entry."""
    nope, rope = arch.mla.kv_lora_rank, arch.mla.qk_rope_head_dim
    return nope, rope, nope + rope, arch.mla.v_head_dim


def latent_entry_bytes(nope: int, rope: int, kv_bytes: float) -> float:
    """One MLA-style latent cache entry: FlashMLA's FP8 layout at 1 byte/value (RoPE in bf16, fp32 scale per 128)."""
    if kv_bytes >= 2:
        return (nope + rope) * kv_bytes
    return nope * kv_bytes + rope * 2.0 + 4.0 * math.ceil(nope / 128)


def _mla_based(sparse: SparseAttention) -> bool:
    return sparse.kind != "msa"


# ---- roofline ---------------------------------------------------------------------------------------------------
def _peaks(gpu, prec) -> tuple:
    bw = gpu.bandwidth * gpu.eff_bandwidth
    attn = "fp8" if prec.kv_bytes <= 1.0 and "fp8" in gpu.flops else "bf16"
    return bw, gpu.peak_flops(attn) * gpu.eff_compute


def _dense_time(dims: AttnDims, window, gpu, prec, tp, batch, tokens, context) -> float:
    """Dense GQA with this layer's own sizes: the tile rule of ``costmodel.attention_time``."""
    bw, peak = _peaks(gpu, prec)
    length = context + tokens
    if window:
        length = min(length, window)
    kv_local = max(1, dims.kv_heads // tp)
    group = max(1, dims.heads // tp // kv_local)
    passes = math.ceil(group * tokens / gpu.attention_tile_rows)
    d = dims.head_dim + dims.v_head_dim
    bytes_pass = batch * kv_local * length * d * prec.kv_bytes
    flops_pass = batch * kv_local * 2.0 * gpu.attention_tile_rows * length * d
    return max(passes * max(bytes_pass / bw, flops_pass / peak), gpu.kernel_floor)


def _sparse_time(arch, sparse: SparseAttention, dims: AttnDims, gpu, prec, tp, batch, tokens, context) -> float:
    bw, peak = _peaks(gpu, prec)
    length = context + tokens
    n = sparse.entries(length)
    if _mla_based(sparse):
        nope, rope, d_k, d_v = _latent(arch)
        if sparse.kind != "dsa":  # DeepSeek-V4: the whole latent is read as key and as value
            d_v = d_k
        kv_local, group, entry = 1, max(1, dims.heads // tp), latent_entry_bytes(nope, rope, prec.kv_bytes)
    else:
        kv_local = max(1, dims.kv_heads // tp)
        group = max(1, dims.heads // tp // kv_local)
        d_k, d_v = dims.head_dim, dims.v_head_dim
        entry = (d_k + d_v) * prec.kv_bytes
    rows = math.ceil(group / SPARSE_ROWS) * SPARSE_ROWS
    qt = batch * tokens
    t_main = max(qt * kv_local * n * entry / bw, qt * kv_local * 2.0 * rows * n * (d_k + d_v) / peak)
    t = max(t_main, gpu.kernel_floor)
    keys = sparse.indexed_keys(length)
    if keys:
        ix = sparse.indexer
        heads = max(1, ix.heads // tp) if ix.sharded else ix.heads
        passes = math.ceil(heads * tokens / gpu.attention_tile_rows)
        idx_peak = gpu.peak_flops(ix.compute if ix.compute in gpu.flops else "bf16") * gpu.eff_compute
        idx_bytes = batch * passes * keys * ix.key_bytes + qt * keys * LOGIT_BYTES
        idx_flops = qt * heads * 2.0 * ix.head_dim * keys
        t += max(idx_bytes / bw, idx_flops / idx_peak, gpu.kernel_floor) + gpu.kernel_floor  # logits + top-k
    return t


def attention_time(arch, block, gpu, prec, tp: int, batch: int, tokens: int, context: int) -> float:
    """Seconds of one layer's attention for a block with ``sparse`` and/or ``dims`` (see module docstring)."""
    dims = arch.attn_dims(block)
    if block.sparse is None:
        return _dense_time(dims, block.window, gpu, prec, tp, batch, tokens, context)
    return _sparse_time(arch, block.sparse, dims, gpu, prec, tp, batch, tokens, context)


def cache_bytes(arch, block, prec, tp: int, context: int) -> float:
    """KV-cache bytes one request keeps for this layer on one GPU (``dims`` / ``sparse`` blocks)."""
    dims, sparse = arch.attn_dims(block), block.sparse
    if sparse is None:
        length = min(context, block.window) if block.window else context
        kv_local = dims.kv_heads / min(tp, dims.kv_heads)
        return length * kv_local * (dims.head_dim + dims.v_head_dim) * prec.kv_bytes
    ix = sparse.indexer
    keys = 0 if ix is None or ix.shared else (context // sparse.compress) * ix.key_bytes
    if _mla_based(sparse):
        nope, rope, _, _ = _latent(arch)
        main = sparse.cached_entries(context) * latent_entry_bytes(nope, rope, prec.kv_bytes)
    else:
        main = context * dims.kv_heads / min(tp, dims.kv_heads) * (dims.head_dim + dims.v_head_dim) * prec.kv_bytes
    return main + keys + sparse.state_bytes


# ---- reading the variant fields of a HF config.json ------------------------------------------------------------
def _int(cfg: dict, key: str, name: str, default=None, zero=False) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not zero):
        raise ConfigError(f"{name}: '{key}' must be a {'non-negative' if zero else 'positive'} integer, got {value!r}")
    return value


def _per_layer(cfg: dict, key: str, name: str, n_layers: int, allowed) -> list:
    """A per-layer list field, trimmed of trailing MTP entries (configs list ``n_layers + mtp`` values)."""
    values = cfg[key]
    if not isinstance(values, list) or len(values) < n_layers:
        raise ConfigError(f"{name}: '{key}' must list at least num_hidden_layers ({n_layers}) values, got "
                          f"{len(values) if isinstance(values, list) else type(values).__name__}")
    for i, v in enumerate(values[:n_layers]):
        if not isinstance(v, (str, int)) or v not in allowed:
            supported = sorted(allowed, key=lambda x: (isinstance(x, str), x))
            raise ConfigError(f"{name}: unsupported value {v!r} at {key}[{i}]; supported: {supported}")
    return values[:n_layers]


def dsa_indexer_types(cfg: dict, name: str, n_layers: int) -> list:
    """Per layer ``full`` (own indexer) or ``shared`` (reuses the previous selection), as transformers'
    ``GlmMoeDsaConfig`` derives it: ``indexer_types``, else ``index_topk_pattern`` (F/S), else
    ``index_topk_freq`` / ``index_skip_topk_offset`` (default 2): full iff ``max(i - offset + 1, 0) % freq == 0``."""
    if cfg.get("indexer_types") is not None:
        return _per_layer(cfg, "indexer_types", name, n_layers, ("full", "shared"))
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        types = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
        return _per_layer({"index_topk_pattern": types}, "index_topk_pattern", name, n_layers, ("full", "shared"))
    freq = _int(cfg, "index_topk_freq", name, default=1)
    offset = _int(cfg, "index_skip_topk_offset", name, default=2, zero=True)
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n_layers)]


def dsa_layers(cfg: dict, name: str, n_layers: int, hidden: int) -> list:
    """DeepSeek-V3.2 / GLM-5.x: one ``dsa`` spec per layer (indexer weights: wq_b from the q latent, wk, its
    LayerNorm, weights_proj -- transformers ``DeepseekV32Indexer``)."""
    heads, dim = _int(cfg, "index_n_heads", name), _int(cfg, "index_head_dim", name)
    topk, q_lora = _int(cfg, "index_topk", name), _int(cfg, "q_lora_rank", name)
    params = q_lora * heads * dim + hidden * dim + 2 * dim + hidden * heads
    out = []
    for kind in dsa_indexer_types(cfg, name, n_layers):
        shared = kind == "shared"
        ix = Indexer(heads, dim, fp8_key_bytes(dim), shared=shared, params=0 if shared else params)
        out.append(SparseAttention("dsa", topk=topk, indexer=ix, params=ix.params))
    return out


def msa_layers(cfg: dict, name: str, n_layers: int, hidden: int) -> list:
    """MiniMax-M3 ``sparse_attention_config``: per layer an ``msa`` spec or None (dense GQA)."""
    sc = cfg.get("sparse_attention_config")
    if not isinstance(sc, dict):
        raise ConfigError(f"{name}: 'sparse_attention_config' must be a mapping, got {type(sc).__name__}")
    where = "sparse_attention_config"
    heads, dim = _int(sc, "sparse_num_index_heads", where), _int(sc, "sparse_index_dim", where)
    block, blocks = _int(sc, "sparse_block_size", where), _int(sc, "sparse_topk_blocks", where)
    if _int(sc, "sparse_local_block", where, default=1, zero=True) + _int(sc, "sparse_init_block", where, default=0,
                                                                          zero=True) > blocks:
        raise ConfigError(f"{name}: sparse_local_block + sparse_init_block exceed sparse_topk_blocks ({blocks})")
    freq = sc.get("sparse_attention_freq", [1] * n_layers)
    flags = _per_layer({"sparse_attention_config.sparse_attention_freq": freq},
                       "sparse_attention_config.sparse_attention_freq", name, n_layers, (0, 1))
    params = hidden * heads * dim + hidden * dim + 2 * dim
    spec = SparseAttention("msa", topk=blocks * block, params=params,
                           indexer=Indexer(heads, dim, 2.0 * dim, compute="bf16", sharded=True, params=params))
    return [spec if f else None for f in flags]


def dsv4_layers(cfg: dict, name: str, n_layers: int, hidden: int, heads: int) -> list:
    """DeepSeek-V4 ``compress_ratios`` (0 / 4 / 128 per layer) -> ``swa`` / ``csa`` / ``hca`` specs with the full
    mixer's weights (transformers ``DeepseekV4Attention``: q_a/q_b, kv, grouped o_a + o_b, sinks, the compressor,
    CSA's indexer, and the layer's two hyper-connections)."""
    ratios = _per_layer(cfg, "compress_ratios", name, n_layers, tuple(DSV4_RATIOS))
    g = {k: _int(cfg, k, name) for k in ("head_dim", "q_lora_rank", "o_lora_rank", "o_groups", "sliding_window",
                                          "index_n_heads", "index_head_dim", "index_topk")}
    hd, q_lora, hc = g["head_dim"], g["q_lora_rank"], _int(cfg, "hc_mult", name, default=1)
    if heads % g["o_groups"]:
        raise ConfigError(f"{name}: num_attention_heads {heads} is not a multiple of o_groups {g['o_groups']}")
    base = (hidden * q_lora + q_lora + q_lora * heads * hd + hidden * hd + hd + heads * hd * g["o_lora_rank"]
            + g["o_groups"] * g["o_lora_rank"] * hidden + heads)
    base += 2 * ((2 + hc) * hc * hc * hidden + (2 + hc) * hc + 3) if hc > 1 else 0
    ih, idim = g["index_n_heads"], g["index_head_dim"]
    out = []
    for r in ratios:
        kind, coff = DSV4_RATIOS[r], 2 if r == 4 else 1
        params, state, ix = base, 0.0, None
        if r:
            params += 2 * hidden * coff * hd + r * coff * hd + hd
            state = 2 * r * coff * hd * STATE_BYTES
        if kind == "csa":
            ix_params = 2 * hidden * 2 * idim + r * 2 * idim + idim + q_lora * ih * idim + hidden * ih
            ix = Indexer(ih, idim, fp4_key_bytes(idim), params=ix_params)
            params += ix_params
            state += 2 * r * 2 * idim * STATE_BYTES
        out.append(SparseAttention(kind, topk=g["index_topk"] if kind == "csa" else 0, window=g["sliding_window"],
                                   compress=max(r, 1), indexer=ix, params=params, full_mixer=True, state_bytes=state))
    return out
