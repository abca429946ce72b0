"""Architecture descriptor: what the cost model needs to know about a model, read from a HF ``config.json``.

A model is a list of decoder blocks. Each block has a token *mixer* and/or a *feed-forward*:

* mixers: ``attention`` (full GQA/MHA, group size G = heads / kv_heads), ``sliding`` (GQA over a window of
  ``window`` tokens; also Llama 4's chunked attention, priced at its chunk size, the upper bound), ``mla`` (DeepSeek
  multi-head latent attention, absorbed decode: every head reads the shared latent of ``kv_lora_rank +
  qk_rope_head_dim`` values per token), ``linear`` (a fixed-size state per request: gated DeltaNet of
  Qwen3-Next/3.5, Kimi Delta Attention of Kimi-K3) and ``mamba2`` (Mamba-2 SSM of Nemotron-H / Nemotron 3);
* feed-forwards: ``dense`` (gated SwiGLU with 3 matrices, or 2 when the config's activation is not gated) and ``moe``
  (routed experts, ``experts_per_token`` active, plus optional shared experts -- an always-on dense MLP beside the
  experts, as Gemma 4 has, is a shared expert; routed experts may work in a ``latent`` width with hidden<->latent
  projections, as Nemotron 3 Super/Ultra and Kimi-K3 do).

A block may carry its own attention geometry (``dims``: Gemma 4, MiMo-V2-Flash, Step-3.7, Nemotron-NAS), sparse or
compressed attention (``sparse``: DeepSeek-V3.2 / GLM-5 DSA, MiniMax-M3 MSA, DeepSeek-V4 CSA / HCA / sliding) and
its own dense-MLP width (``ffn_width``: Nemotron-NAS); ``trtspec.recipes.variants`` holds and prices those, and
``trtspec.recipes.hf_layouts`` reads which layer is what from each config layout. Element counts are parameters
(not bytes).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes import hf_layouts
from trtspec.recipes.errors import ConfigError
from trtspec.recipes.variants import AttnDims, SparseAttention

MIXERS = ("attention", "sliding", "mla", "linear", "mamba2")
MULTIMODAL_TEXT_KEYS = ("text_config", "llm_config", "language_config")


@dataclass(frozen=True)
class Block:
    """One decoder layer. ``window`` (tokens) only for ``sliding`` mixers; ``dims``: this layer's attention geometry
    where it differs from the model's; ``sparse``: its sparse / compressed attention; ``ffn_width``: its dense-MLP
    width where it differs from ``Architecture.intermediate``."""

    mixer: str | None
    ffn: str | None
    window: int | None = None
    dims: AttnDims | None = None
    sparse: SparseAttention | None = None
    ffn_width: int | None = None

    def __post_init__(self):
        if self.mixer is not None and self.mixer not in MIXERS:
            raise ConfigError(f"unknown attention type {self.mixer!r}; expected one of {MIXERS}")
        if self.ffn not in (None, "dense", "moe"):
            raise ConfigError(f"unknown feed-forward type {self.ffn!r}; expected dense or moe")
        if self.mixer == "sliding" and not (self.window and self.window > 0):
            raise ConfigError("a sliding-window layer needs window > 0 (config 'sliding_window')")
        if self.dims is not None and self.mixer not in ("attention", "sliding"):
            raise ConfigError(f"per-layer attention sizes need a GQA layer, not {self.mixer!r}")
        if self.sparse is not None and self.mixer not in ("attention", "mla"):
            raise ConfigError(f"sparse attention ({self.sparse.kind}) needs a full-attention or MLA layer, "
                              f"not {self.mixer!r}")
        if self.ffn_width is not None and (self.ffn != "dense" or self.ffn_width <= 0):
            raise ConfigError(f"a per-layer MLP width needs a dense feed-forward and a width > 0, got {self.ffn_width}")

    @property
    def is_variant(self) -> bool:
        """Priced by ``trtspec.recipes.variants`` (own geometry or sparse attention) rather than the uniform rule."""
        return self.dims is not None or self.sparse is not None


@dataclass(frozen=True)
class MoESpec:
    """Routed experts: ``num_experts`` E, ``experts_per_token`` k, expert FFN width ``intermediate``; shared experts
    as one FFN of total width ``shared_intermediate`` (0 if none); ``latent``: width the routed experts work in
    (0: the hidden size), reached through hidden->latent and latent->hidden projections."""

    num_experts: int
    experts_per_token: int
    intermediate: int
    shared_intermediate: int = 0
    latent: int = 0

    def __post_init__(self):
        if not (0 < self.experts_per_token <= self.num_experts) or self.intermediate <= 0 \
                or self.shared_intermediate < 0 or self.latent < 0:
            raise ConfigError(f"bad MoE sizes: {self}; need 0 < experts_per_token <= num_experts and intermediate > 0")

    @property
    def sparsity(self) -> float:
        """Fraction of routed experts active per token, k/E."""
        return self.experts_per_token / self.num_experts


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention sizes; ``output_gate``: a hidden -> heads*v_head_dim gate on the output (Kimi-K3)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0
    output_gate: bool = False


@dataclass(frozen=True)
class StateSpec:
    """Fixed-size per-request recurrent state (linear attention / Mamba-2), in elements, plus in/out projection sizes.

    ``state`` = recurrent state elements, ``conv`` = causal-conv state elements, ``proj_params`` = weight elements
    of the mixer, ``flops_per_token`` = state-update FLOPs per token."""

    state: int
    conv: int
    proj_params: int
    flops_per_token: int


@dataclass(frozen=True)
class Architecture:
    """Model dims (see module docstring). ``blocks`` has one entry per decoder layer. ``attn_output_gate``: full
    attention layers gate their output elementwise from a second q projection (Qwen3-Next / 3.5)."""

    name: str
    hidden: int
    vocab: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    blocks: tuple
    mlp_gated: bool = True
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    linear: StateSpec | None = None
    mamba: StateSpec | None = None
    mtp_layers: int = 0
    tie_embeddings: bool = False
    attn_output_gate: bool = False
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for attr in ("hidden", "vocab", "num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, attr)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{self.name}: '{attr}' must be a positive integer, got {value!r}")
        if self.intermediate < 0 or self.mtp_layers < 0:
            raise ConfigError(f"{self.name}: sizes must be >= 0 (intermediate={self.intermediate}, mtp={self.mtp_layers})")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{self.name}: num_attention_heads {self.num_heads} is not a multiple of "
                              f"num_key_value_heads {self.num_kv_heads}")
        if not self.blocks:
            raise ConfigError(f"{self.name}: no decoder layers")
        kinds = {b.mixer for b in self.blocks} | {b.ffn for b in self.blocks}
        if "moe" in kinds and self.moe is None:
            raise ConfigError(f"{self.name}: MoE layers but no expert counts")
        if "mla" in kinds and self.mla is None:
            raise ConfigError(f"{self.name}: MLA layers but no kv_lora_rank")
        if "linear" in kinds and self.linear is None:
            raise ConfigError(f"{self.name}: linear-attention layers but no linear_* sizes")
        if "mamba2" in kinds and self.mamba is None:
            raise ConfigError(f"{self.name}: Mamba layers but no mamba_* sizes")
        if any(b.ffn == "dense" and not b.ffn_width for b in self.blocks) and self.intermediate <= 0:
            raise ConfigError(f"{self.name}: dense MLP layers need intermediate_size > 0")

    # ---- derived quantities -------------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def group_size(self) -> int:
        """GQA group G = query heads per KV head of the most common attention layer (MLA: all heads share one
        latent, so G = heads)."""
        if self.mla:
            return self.num_heads
        dims = Counter(self.attn_dims(b) for b in self.blocks if b.mixer in ("attention", "sliding"))
        if not dims:
            return self.num_heads // self.num_kv_heads
        d = dims.most_common(1)[0][0]
        return d.heads // d.kv_heads

    def block_counts(self) -> Counter:
        """How many blocks of each (mixer, ffn, window) kind; the cost model sums per kind."""
        return Counter(self.blocks)

    def attn_dims(self, block: Block) -> AttnDims:
        """This layer's attention geometry: its own ``dims``, else the model's."""
        return block.dims or AttnDims(self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim)

    def mixer_params(self, mixer) -> int:
        """Weights of one token mixer: ``mixer`` a mixer name (the model's uniform geometry) or a ``Block`` (its own
        geometry and sparse-attention weights, e.g. a DSA indexer)."""
        block = mixer if isinstance(mixer, Block) else None
        kind = block.mixer if block is not None else mixer
        sparse = block.sparse if block is not None else None
        if sparse is not None and sparse.full_mixer:
            return sparse.params
        extra = sparse.params if sparse is not None else 0
        h, nh, nkv, hd = self.hidden, self.num_heads, self.num_kv_heads, self.head_dim
        if kind in ("attention", "sliding"):
            d = block.dims if block is not None and block.dims is not None else None
            gate = h * (d.heads * d.head_dim if d else nh * hd) if self.attn_output_gate else 0
            return (d.params(h) if d else 2 * h * nh * hd + 2 * h * nkv * hd) + gate + extra
        if kind == "mla":
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = h * m.q_lora_rank + m.q_lora_rank * nh * qk if m.q_lora_rank else h * nh * qk
            gate = h * nh * m.v_head_dim if m.output_gate else 0
            return q + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim) \
                + nh * m.v_head_dim * h + gate + extra
        if kind == "linear":
            return self.linear.proj_params
        if kind == "mamba2":
            return self.mamba.proj_params
        return 0

    def ffn_params(self, ffn) -> int:
        """Dense: all weights (a ``Block`` may carry its own width). MoE: shared experts + router + latent
        projections only (routed experts: ``expert_params``)."""
        block = ffn if isinstance(ffn, Block) else None
        kind = block.ffn if block is not None else ffn
        mats = 3 if self.mlp_gated else 2
        if kind == "dense":
            width = block.ffn_width if block is not None and block.ffn_width else self.intermediate
            return mats * self.hidden * width
        if kind == "moe":
            m = self.moe
            return mats * self.hidden * m.shared_intermediate + self.hidden * m.num_experts + 2 * self.hidden * m.latent
        return 0

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert (in the latent width where the experts have one)."""
        if not self.moe:
            return 0
        return (3 if self.mlp_gated else 2) * (self.moe.latent or self.hidden) * self.moe.intermediate

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def _layer_params(self, experts: int) -> int:
        return sum(cnt * (self.mixer_params(b) + self.ffn_params(b) + (experts * self.expert_params if b.ffn == "moe"
                                                                         else 0))
                   for b, cnt in self.block_counts().items())

    def total_params(self) -> int:
        """All weights incl. every routed expert and the embedding (and the LM head when untied); MTP layers excluded."""
        return self._layer_params(self.moe.num_experts if self.moe else 0) \
            + self.lm_head_params * (1 if self.tie_embeddings else 2)

    def active_params(self) -> int:
        """Weights read per token at batch 1 (k routed experts per MoE layer), incl. the LM head, excl. embedding."""
        return self._layer_params(self.moe.experts_per_token if self.moe else 0) + self.lm_head_params

    def kv_elems_per_token(self, block: Block) -> int:
        """KV-cache elements stored per token for one layer of this kind (0 for state mixers; sparse layers: the
        main cache only -- ``variants.cache_bytes`` adds index keys and compression)."""
        if block.mixer in ("attention", "sliding"):
            d = self.attn_dims(block)
            return d.kv_heads * (d.head_dim + d.v_head_dim)
        if block.mixer == "mla":
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 0

    def sparse_kinds(self) -> Counter:
        """Layers per sparse / compressed attention kind (``variants.SPARSE_KINDS``)."""
        return Counter(b.sparse.kind for b in self.blocks if b.sparse is not None)

    def attention_kind(self) -> str:
        """Short label of the dominant attention variant (for recipe signatures)."""
        mixers = Counter(b.mixer for b in self.blocks if b.mixer)
        sparse = self.sparse_kinds()
        if sparse.get("csa") or sparse.get("hca"):
            return "csa+hca"
        if sparse.get("dsa"):
            return "mla+dsa"
        if sparse.get("msa"):
            return "gqa+msa"
        if "mla" in mixers:
            return "mla+linear" if mixers.get("linear") else "mla"
        if mixers.get("linear") or mixers.get("mamba2"):
            return "hybrid"
        if mixers.get("sliding"):
            return "sliding+full" if mixers.get("attention") else "sliding"
        return "mha" if self.group_size == 1 else "gqa"

    def summary(self) -> dict:
        mixers = Counter(b.mixer for b in self.blocks if b.mixer)
        return {
            "name": self.name, "layers": self.num_layers, "hidden": self.hidden, "heads": self.num_heads,
            "kv_heads": self.num_kv_heads, "head_dim": self.head_dim, "group_size": self.group_size,
            "attention": self.attention_kind(), "mixers": dict(mixers), "sparse": dict(self.sparse_kinds()),
            "params_b": round(self.total_params() / 1e9, 2), "active_params_b": round(self.active_params() / 1e9, 2),
            "moe": None if not self.moe else {"experts": self.moe.num_experts, "active": self.moe.experts_per_token,
                                               "sparsity": round(self.moe.sparsity, 4)},
            "mtp_layers": self.mtp_layers,
        }


# ---- parsing ------------------------------------------------------------------------------------------------------
def _get(cfg: dict, *keys, required: str | None = None, default=None):
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    if required:
        raise ConfigError(f"{required}: config lacks {' / '.join(repr(k) for k in keys)} (expected a positive integer)")
    return default


def _pos_int(value, what: str, name: str, allow_zero=False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name}: '{what}' must be a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")
    return value


def _flatten(cfg: dict) -> dict:
    """A multimodal config's text model (``text_config`` ...) with the top-level ``architectures`` kept."""
    for key in MULTIMODAL_TEXT_KEYS:
        text = cfg.get(key)
        if isinstance(text, dict) and ("hidden_size" not in cfg or "num_hidden_layers" not in cfg):
            top = {k: cfg[k] for k in ("tie_word_embeddings",) if k in cfg}
            return {**top, **text, "architectures": cfg.get("architectures") or text.get("architectures")}
    return cfg


def _unsupported(cfg: dict, name: str) -> None:
    """Refuse features the cost model has no price for, naming the field."""
    if cfg.get("num_kv_shared_layers"):
        raise ConfigError(f"{name}: 'num_kv_shared_layers' = {cfg['num_kv_shared_layers']} (layers reusing another "
                          "layer's KV cache) is not supported; supported: 0")
    if cfg.get("hidden_size_per_layer_input"):
        raise ConfigError(f"{name}: 'hidden_size_per_layer_input' (per-layer input embeddings) is not supported; "
                          "supported: 0")


def _moe_spec(cfg: dict, name: str, hidden: int, dense_width: int) -> MoESpec | None:
    n_exp = _get(cfg, "n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
    if not n_exp or cfg.get("enable_moe_block") is False:
        return None
    k = _pos_int(_get(cfg, "num_experts_per_tok", "top_k_experts", "num_experts_per_token", "moe_top_k",
                      "experts_per_token", required=name), "num_experts_per_tok", name)
    e_int = _pos_int(_get(cfg, "moe_intermediate_size", "expert_intermediate_size", "intermediate_size", required=name),
                     "moe_intermediate_size", name)
    count = _get(cfg, "n_shared_experts", "num_shared_experts", default=0)
    if count:
        width = _get(cfg, "moe_shared_expert_intermediate_size", "shared_intermediate_size", "share_expert_dim",
                     default=e_int)
        shared = _pos_int(count, "n_shared_experts", name) * _pos_int(width, "shared expert width", name)
    elif cfg.get("shared_expert_intermediate_size"):
        shared = cfg["shared_expert_intermediate_size"]
    elif str(cfg.get("model_type", "")).startswith("llama4"):  # one shared expert of the expert width
        shared = e_int
    elif cfg.get("enable_moe_block"):  # Gemma 4: a dense MLP beside the experts on every layer
        shared = dense_width
    else:
        shared = 0
    latent = _pos_int(_get(cfg, "moe_latent_size", "routed_expert_hidden_size", default=0), "moe_latent_size", name,
                      allow_zero=True)
    return MoESpec(_pos_int(n_exp, "num_experts", name), k, e_int, _pos_int(shared, "shared_intermediate", name, True),
                   latent=0 if latent == hidden else latent)


def _mla_spec(cfg: dict, name: str) -> MLASpec | None:
    if hf_layouts.is_deepseek_v4(cfg):  # DeepSeek-V4: one shared-KV head of head_dim (nope + rope)
        hd, rope = _pos_int(cfg.get("head_dim"), "head_dim", name), _pos_int(cfg.get("qk_rope_head_dim"),
                                                                              "qk_rope_head_dim", name)
        return MLASpec(kv_lora_rank=hd - rope, qk_rope_head_dim=rope, qk_nope_head_dim=hd - rope, v_head_dim=hd,
                       q_lora_rank=_pos_int(cfg.get("q_lora_rank"), "q_lora_rank", name))
    if cfg.get("kv_lora_rank") is None and cfg.get("attention_type") != "mla":
        return None
    req = lambda key: _pos_int(_get(cfg, key, required=name), key, name)  # noqa: E731
    return MLASpec(kv_lora_rank=req("kv_lora_rank"), qk_rope_head_dim=req("qk_rope_head_dim"),
                   qk_nope_head_dim=req("qk_nope_head_dim"), v_head_dim=req("v_head_dim"),
                   q_lora_rank=_pos_int(_get(cfg, "q_lora_rank", default=0), "q_lora_rank", name, allow_zero=True),
                   output_gate=bool(cfg.get("mla_use_output_gate")))


def _linear_spec(cfg: dict, name: str, hidden: int) -> StateSpec:
    """Gated DeltaNet (Qwen3-Next / 3.5 ``linear_*``) or Kimi Delta Attention (Kimi-K3 ``linear_attn_config``)."""
    lac = cfg.get("linear_attn_config")
    if isinstance(lac, dict):  # KDA: q, k, v, full-rank output gate; beta, low-rank forget gate; o; conv on q/k/v
        nh = _pos_int(lac.get("num_heads"), "linear_attn_config.num_heads", name)
        hd = _pos_int(lac.get("head_dim"), "linear_attn_config.head_dim", name)
        kc = _pos_int(lac.get("short_conv_kernel_size", 4), "linear_attn_config.short_conv_kernel_size", name)
        p = nh * hd
        gate = hidden * p if lac.get("use_full_rank_gate") else hidden * hd + hd * p
        return StateSpec(state=nh * hd * hd, conv=(kc - 1) * 3 * p,
                         proj_params=3 * hidden * p + gate + hidden * (nh + hd) + hd * p + p * hidden + kc * 3 * p,
                         flops_per_token=4 * nh * hd * hd)
    nk = _pos_int(_get(cfg, "linear_num_key_heads", required=name), "linear_num_key_heads", name)
    nv = _pos_int(_get(cfg, "linear_num_value_heads", required=name), "linear_num_value_heads", name)
    dk = _pos_int(_get(cfg, "linear_key_head_dim", required=name), "linear_key_head_dim", name)
    dv = _pos_int(_get(cfg, "linear_value_head_dim", required=name), "linear_value_head_dim", name)
    kc = _pos_int(_get(cfg, "linear_conv_kernel_dim", default=4), "linear_conv_kernel_dim", name)
    conv_dim = 2 * nk * dk + nv * dv
    return StateSpec(state=nv * dk * dv, conv=(kc - 1) * conv_dim,
                     proj_params=hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden,
                     flops_per_token=4 * nv * dk * dv)


def _mamba_spec(cfg: dict, name: str, hidden: int) -> StateSpec:
    mh = _pos_int(_get(cfg, "mamba_num_heads", required=name), "mamba_num_heads", name)
    md = _pos_int(_get(cfg, "mamba_head_dim", required=name), "mamba_head_dim", name)
    ds = _pos_int(_get(cfg, "ssm_state_size", required=name), "ssm_state_size", name)
    ng = _pos_int(_get(cfg, "n_groups", "mamba_n_groups", "mamba_num_groups", default=1), "n_groups", name)
    kc = _pos_int(_get(cfg, "conv_kernel", "mamba_d_conv", default=4), "conv_kernel", name)
    d_inner = mh * md
    conv_dim = d_inner + 2 * ng * ds
    return StateSpec(state=mh * md * ds, conv=(kc - 1) * conv_dim,
                     proj_params=hidden * (2 * d_inner + 2 * ng * ds + mh) + d_inner * hidden,
                     flops_per_token=6 * mh * md * ds)


def _output_gate(cfg: dict) -> bool:
    """Qwen3-Next / Qwen3.5 always gate full attention (transformers builds q_proj with 2 x heads x head_dim
    outputs); others say so with ``attn_output_gate`` / ``attention_output_gate``."""
    if str(cfg.get("model_type", "")).startswith(("qwen3_next", "qwen3_5")):
        return True
    return bool(cfg.get("attn_output_gate") or cfg.get("attention_output_gate"))


def from_hf_config(cfg: dict, name: str | None = None, source: str = "") -> Architecture:
    """Build an ``Architecture`` from a HF ``config.json`` dict; raises ``ConfigError`` naming the bad field."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"config must be a JSON object, got {type(cfg).__name__}")
    cfg = _flatten(cfg)
    name = name or str(cfg.get("_name_or_path") or cfg.get("model_type") or "model")
    _unsupported(cfg, name)
    req = lambda *keys: _pos_int(_get(cfg, *keys, required=name), keys[0], name)  # noqa: E731
    hidden = req("hidden_size")
    n_layers = hf_layouts.num_layers(cfg, name)
    vocab = req("vocab_size")
    n_heads = req("num_attention_heads")
    n_kv = _pos_int(_get(cfg, "num_key_value_heads", default=n_heads), "num_key_value_heads", name)
    head_dim = _get(cfg, "head_dim", "attention_head_dim")
    head_dim = _pos_int(head_dim, "head_dim", name) if head_dim is not None else hidden // n_heads
    intermediate = _pos_int(_get(cfg, "dense_intermediate_size", "intermediate_size_mlp", "intermediate_size",
                                 default=0), "intermediate_size", name, allow_zero=True)
    act = str(_get(cfg, "hidden_act", "mlp_hidden_act", "hidden_activation", default="silu")).lower()
    explicit = cfg.get("attention_type")
    if explicit is not None and explicit not in ("gqa", "mha", "mla", "full", "sliding"):
        raise ConfigError(f"{name}: unknown attention type {explicit!r} in 'attention_type'; "
                          "expected one of gqa, mha, mla, full, sliding")
    moe = _moe_spec(cfg, name, hidden, intermediate)
    v_head = cfg.get("v_head_dim") if cfg.get("kv_lora_rank") is None and cfg.get("v_head_dim") else head_dim
    geo = hf_layouts.Geometry(hidden=hidden, heads=n_heads, kv_heads=n_kv, head_dim=head_dim,
                              v_head_dim=_pos_int(v_head, "v_head_dim", name), window=cfg.get("sliding_window"),
                              has_moe=moe is not None)
    layers = hf_layouts.layer_plan(cfg, name, n_layers, geo)
    blocks = tuple(Block(lay.mixer, lay.ffn, lay.window, lay.dims, lay.sparse, lay.ffn_width) for lay in layers)
    mixers = {b.mixer for b in blocks}
    mtp = int(_get(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", default=0) or 0)
    return Architecture(
        name=name, hidden=hidden, vocab=vocab, num_heads=n_heads, num_kv_heads=n_kv, head_dim=head_dim,
        intermediate=intermediate, blocks=blocks, mlp_gated=act not in ("relu2", "squared_relu", "relu"), moe=moe,
        mla=_mla_spec(cfg, name) if "mla" in mixers else None,
        linear=_linear_spec(cfg, name, hidden) if "linear" in mixers else None,
        mamba=_mamba_spec(cfg, name, hidden) if "mamba2" in mixers else None,
        mtp_layers=mtp, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attn_output_gate=_output_gate(cfg), source=source, extra={"model_type": str(cfg.get("model_type") or "")},
    )


def builtin_names() -> list[str]:
    from trtspec.recipes.paths import models_dir

    return sorted(p.stem for p in models_dir().glob("*.yaml"))


def load_architecture(model) -> Architecture:
    """``model``: an ``Architecture``, a built-in name (``trtspec recipes`` lists them; e.g. ``llama-3.1-70b``), a
    HF model directory holding ``config.json``, or a ``.json``/``.yaml`` config file."""
    from trtspec.recipes.paths import models_dir

    if isinstance(model, Architecture):
        return model
    if isinstance(model, dict):
        return from_hf_config(model)
    text = str(model)
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"--model {text}: directory has no config.json")
    builtin = models_dir() / f"{text.lower()}.yaml"
    if not path.is_file() and builtin.is_file():
        path = builtin
    if not path.is_file():
        raise ConfigError(f"--model {text!r}: not a directory, config file or built-in model; "
                          f"built-in models: {', '.join(builtin_names())}")
    try:
        raw = path.read_text(encoding="utf-8")
        cfg = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read model config {path}: {exc}") from exc
    if isinstance(cfg, dict) and "config" in cfg and path.parent == models_dir():
        return from_hf_config(cfg["config"], name=cfg.get("name", path.stem), source=str(cfg.get("source", "")))
    return from_hf_config(cfg, name=path.parent.name if path.name == "config.json" else path.stem, source=str(path))
