"""Architecture descriptor: what the cost model needs to know about a model, read from a HF ``config.json``.

A model is a list of decoder blocks. Each block has a token *mixer* and/or a *feed-forward*:

* mixers: ``attention`` (full GQA/MHA, group size G = heads / kv_heads), ``sliding`` (GQA over a window of
  ``window`` tokens), ``mla`` (DeepSeek multi-head latent attention, absorbed decode: every head reads the shared
  latent of ``kv_lora_rank + qk_rope_head_dim`` values per token), ``linear`` (gated DeltaNet of Qwen3-Next/3.5: a
  fixed-size state per request) and ``mamba2`` (Mamba-2 SSM of Nemotron-H: a fixed-size state per request);
* feed-forwards: ``dense`` (gated SwiGLU with 3 matrices, or 2 when the config's activation is not gated) and ``moe``
  (routed experts, ``experts_per_token`` active, plus optional shared experts).

Config layouts understood: Llama 3.x, Qwen3 dense and MoE, Qwen3-Next / Qwen3.5 (``layer_types`` or
``full_attention_interval``; nested ``text_config``), DeepSeek-V3/R1 (MLA, ``first_k_dense_replace``, MTP layers),
gpt-oss (``layer_types`` sliding/full), Nemotron-H / Nemotron 3 (``hybrid_override_pattern``), Mixtral, Gemma 3
(``sliding_window_pattern`` or ``layer_types``). Element counts are parameters (not bytes).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes.errors import ConfigError

MIXERS = ("attention", "sliding", "mla", "linear", "mamba2")
LAYER_TYPE_NAMES = {
    "full_attention": "attention", "attention": "attention", "global_attention": "attention",
    "sliding_attention": "sliding", "sliding_window_attention": "sliding", "local_attention": "sliding",
    "linear_attention": "linear", "mamba": "mamba2", "mamba2": "mamba2",
}
PATTERN_CHARS = {"M": ("mamba2", None), "*": ("attention", None), "-": (None, "dense"), "E": (None, "moe")}


@dataclass(frozen=True)
class Block:
    """One decoder layer. ``window`` (tokens) only for ``sliding`` mixers."""

    mixer: str | None
    ffn: str | None
    window: int | None = None

    def __post_init__(self):
        if self.mixer is not None and self.mixer not in MIXERS:
            raise ConfigError(f"unknown attention type {self.mixer!r}; expected one of {MIXERS}")
        if self.ffn not in (None, "dense", "moe"):
            raise ConfigError(f"unknown feed-forward type {self.ffn!r}; expected dense or moe")
        if self.mixer == "sliding" and not (self.window and self.window > 0):
            raise ConfigError("a sliding-window layer needs window > 0 (config 'sliding_window')")


@dataclass(frozen=True)
class MoESpec:
    """Routed experts: ``num_experts`` E, ``experts_per_token`` k, expert FFN width ``intermediate``; shared experts
    as one FFN of total width ``shared_intermediate`` (0 if none)."""

    num_experts: int
    experts_per_token: int
    intermediate: int
    shared_intermediate: int = 0

    def __post_init__(self):
        if not (0 < self.experts_per_token <= self.num_experts) or self.intermediate <= 0 or self.shared_intermediate < 0:
            raise ConfigError(f"bad MoE sizes: {self}; need 0 < experts_per_token <= num_experts and intermediate > 0")

    @property
    def sparsity(self) -> float:
        """Fraction of routed experts active per token, k/E."""
        return self.experts_per_token / self.num_experts


@dataclass(frozen=True)
class MLASpec:
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0


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
    """Model dims (see module docstring). ``blocks`` has one entry per decoder layer."""

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
        if "dense" in kinds and self.intermediate <= 0:
            raise ConfigError(f"{self.name}: dense MLP layers need intermediate_size > 0")

    # ---- derived quantities -------------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def group_size(self) -> int:
        """GQA group G = query heads per KV head (MLA: all heads share one latent, so G = heads)."""
        return self.num_heads if self.mla else self.num_heads // self.num_kv_heads

    def block_counts(self) -> Counter:
        """How many blocks of each (mixer, ffn, window) kind; the cost model sums per kind."""
        return Counter(self.blocks)

    def mixer_params(self, mixer: str) -> int:
        h, nh, nkv, hd = self.hidden, self.num_heads, self.num_kv_heads, self.head_dim
        if mixer in ("attention", "sliding"):
            return 2 * h * nh * hd + 2 * h * nkv * hd
        if mixer == "mla":
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = h * m.q_lora_rank + m.q_lora_rank * nh * qk if m.q_lora_rank else h * nh * qk
            return q + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim) \
                + nh * m.v_head_dim * h
        if mixer == "linear":
            return self.linear.proj_params
        if mixer == "mamba2":
            return self.mamba.proj_params
        return 0

    def ffn_params(self, ffn: str | None) -> int:
        """Dense: all weights. MoE: shared experts + router only (routed experts: ``expert_params``)."""
        mats = 3 if self.mlp_gated else 2
        if ffn == "dense":
            return mats * self.hidden * self.intermediate
        if ffn == "moe":
            return mats * self.hidden * self.moe.shared_intermediate + self.hidden * self.moe.num_experts
        return 0

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert."""
        return (3 if self.mlp_gated else 2) * self.hidden * self.moe.intermediate if self.moe else 0

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def total_params(self) -> int:
        """All weights incl. every routed expert and the embedding (and the LM head when untied); MTP layers excluded."""
        n = sum(cnt * (self.mixer_params(b.mixer) + self.ffn_params(b.ffn) + (self.moe.num_experts * self.expert_params
                                                                                if b.ffn == "moe" else 0))
                for b, cnt in self.block_counts().items())
        return n + self.lm_head_params * (1 if self.tie_embeddings else 2)

    def active_params(self) -> int:
        """Weights read per token at batch 1 (k routed experts per MoE layer), incl. the LM head, excl. embedding."""
        n = sum(cnt * (self.mixer_params(b.mixer) + self.ffn_params(b.ffn) + (self.moe.experts_per_token * self.expert_params
                                                                                if b.ffn == "moe" else 0))
                for b, cnt in self.block_counts().items())
        return n + self.lm_head_params

    def kv_elems_per_token(self, block: Block) -> int:
        """KV-cache elements stored per token for one layer of this kind (0 for state mixers)."""
        if block.mixer in ("attention", "sliding"):
            return 2 * self.num_kv_heads * self.head_dim
        if block.mixer == "mla":
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 0

    def attention_kind(self) -> str:
        """Short label of the dominant attention variant (for recipe signatures)."""
        mixers = Counter(b.mixer for b in self.blocks if b.mixer)
        if "mla" in mixers:
            return "mla"
        if mixers.get("linear") or mixers.get("mamba2"):
            return "hybrid"
        if mixers.get("sliding"):
            return "sliding+full" if mixers.get("attention") else "sliding"
        return "mha" if self.num_heads == self.num_kv_heads else "gqa"

    def summary(self) -> dict:
        mixers = Counter(b.mixer for b in self.blocks if b.mixer)
        return {
            "name": self.name, "layers": self.num_layers, "hidden": self.hidden, "heads": self.num_heads,
            "kv_heads": self.num_kv_heads, "head_dim": self.head_dim, "group_size": self.group_size,
            "attention": self.attention_kind(), "mixers": dict(mixers),
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


def from_hf_config(cfg: dict, name: str | None = None, source: str = "") -> Architecture:
    """Build an ``Architecture`` from a HF ``config.json`` dict; raises ``ConfigError`` naming the bad field."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"config must be a JSON object, got {type(cfg).__name__}")
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    name = name or str(cfg.get("_name_or_path") or cfg.get("model_type") or "model")
    req = lambda *keys: _pos_int(_get(cfg, *keys, required=name), keys[0], name)  # noqa: E731
    hidden = req("hidden_size")
    n_layers = req("num_hidden_layers")
    vocab = req("vocab_size")
    n_heads = req("num_attention_heads")
    n_kv = _pos_int(_get(cfg, "num_key_value_heads", default=n_heads), "num_key_value_heads", name)
    head_dim = _get(cfg, "head_dim", "attention_head_dim")
    head_dim = _pos_int(head_dim, "head_dim", name) if head_dim is not None else hidden // n_heads
    intermediate = _pos_int(_get(cfg, "intermediate_size", default=0), "intermediate_size", name, allow_zero=True)
    act = str(_get(cfg, "hidden_act", "mlp_hidden_act", "hidden_activation", default="silu")).lower()
    mlp_gated = act not in ("relu2", "squared_relu", "relu")
    explicit = cfg.get("attention_type")
    if explicit is not None and explicit not in ("gqa", "mha", "mla", "full", "sliding"):
        raise ConfigError(f"{name}: unknown attention type {explicit!r} in 'attention_type'; "
                          "expected one of gqa, mha, mla, full, sliding")
    is_mla = cfg.get("kv_lora_rank") is not None or explicit == "mla"

    # MoE
    n_exp = _get(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    moe = None
    if n_exp:
        k = _pos_int(_get(cfg, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", required=name),
                     "num_experts_per_tok", name)
        e_int = _pos_int(_get(cfg, "moe_intermediate_size", "intermediate_size", required=name), "moe_intermediate_size", name)
        shared = 0
        if cfg.get("n_shared_experts"):
            shared = int(cfg["n_shared_experts"]) * int(_get(cfg, "moe_shared_expert_intermediate_size", default=e_int))
        elif cfg.get("shared_expert_intermediate_size"):
            shared = int(cfg["shared_expert_intermediate_size"])
        moe = MoESpec(_pos_int(n_exp, "num_experts", name), k, e_int, _pos_int(shared, "shared_intermediate", name, True))

    # per-layer mixer kinds
    window = cfg.get("sliding_window")
    pattern = cfg.get("hybrid_override_pattern")
    layer_types = cfg.get("layer_types")
    blocks: list[Block] = []
    if pattern is not None:
        if len(pattern) != n_layers:
            raise ConfigError(f"{name}: hybrid_override_pattern has {len(pattern)} characters but num_hidden_layers is {n_layers}")
        for i, ch in enumerate(pattern):
            if ch not in PATTERN_CHARS:
                raise ConfigError(f"{name}: unknown layer type {ch!r} at hybrid_override_pattern[{i}]; "
                                  f"expected one of {sorted(PATTERN_CHARS)} (M mamba, * attention, - MLP, E MoE)")
            mixer, ffn = PATTERN_CHARS[ch]
            if ffn == "moe" and moe is None:
                raise ConfigError(f"{name}: 'E' (MoE) layers in hybrid_override_pattern but no n_routed_experts")
            blocks.append(Block(mixer, ffn))
    else:
        if layer_types is not None:
            if len(layer_types) != n_layers:
                raise ConfigError(f"{name}: layer_types has {len(layer_types)} entries but num_hidden_layers is {n_layers}")
            mixers = []
            for i, t in enumerate(layer_types):
                if t not in LAYER_TYPE_NAMES:
                    raise ConfigError(f"{name}: unknown attention type {t!r} at layer_types[{i}]; "
                                      f"expected one of {sorted(LAYER_TYPE_NAMES)}")
                mixers.append(LAYER_TYPE_NAMES[t])
        elif cfg.get("full_attention_interval"):
            every = _pos_int(cfg["full_attention_interval"], "full_attention_interval", name)
            mixers = ["attention" if (i + 1) % every == 0 else "linear" for i in range(n_layers)]
        elif cfg.get("sliding_window_pattern") and window:
            every = _pos_int(cfg["sliding_window_pattern"], "sliding_window_pattern", name)
            mixers = ["attention" if (i + 1) % every == 0 else "sliding" for i in range(n_layers)]
        elif window and cfg.get("use_sliding_window", True) and explicit != "full":
            mixers = ["sliding"] * n_layers
        else:
            mixers = ["attention"] * n_layers
        if is_mla:
            mixers = ["mla" if m == "attention" else m for m in mixers]
        if "sliding" in mixers:
            window = _pos_int(window, "sliding_window", name)
        dense_first = int(_get(cfg, "first_k_dense_replace", default=0))
        step = int(_get(cfg, "decoder_sparse_step", "moe_layer_freq", default=1) or 1)
        mlp_only = set(cfg.get("mlp_only_layers") or [])
        for i, mixer in enumerate(mixers):
            use_moe = moe is not None and i >= dense_first and i not in mlp_only and (i + 1) % step == 0
            blocks.append(Block(mixer, "moe" if use_moe else "dense", window if mixer == "sliding" else None))

    mla = None
    if is_mla:
        mla = MLASpec(
            kv_lora_rank=_pos_int(_get(cfg, "kv_lora_rank", required=name), "kv_lora_rank", name),
            qk_rope_head_dim=_pos_int(_get(cfg, "qk_rope_head_dim", required=name), "qk_rope_head_dim", name),
            qk_nope_head_dim=_pos_int(_get(cfg, "qk_nope_head_dim", required=name), "qk_nope_head_dim", name),
            v_head_dim=_pos_int(_get(cfg, "v_head_dim", required=name), "v_head_dim", name),
            q_lora_rank=_pos_int(_get(cfg, "q_lora_rank", default=0), "q_lora_rank", name, allow_zero=True),
        )
    linear = None
    if any(b.mixer == "linear" for b in blocks):
        nk = _pos_int(_get(cfg, "linear_num_key_heads", required=name), "linear_num_key_heads", name)
        nv = _pos_int(_get(cfg, "linear_num_value_heads", required=name), "linear_num_value_heads", name)
        dk = _pos_int(_get(cfg, "linear_key_head_dim", required=name), "linear_key_head_dim", name)
        dv = _pos_int(_get(cfg, "linear_value_head_dim", required=name), "linear_value_head_dim", name)
        kc = _pos_int(_get(cfg, "linear_conv_kernel_dim", default=4), "linear_conv_kernel_dim", name)
        conv_dim = 2 * nk * dk + nv * dv
        linear = StateSpec(state=nv * dk * dv, conv=(kc - 1) * conv_dim,
                           proj_params=hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv + nv * dv * hidden,
                           flops_per_token=4 * nv * dk * dv)
    mamba = None
    if any(b.mixer == "mamba2" for b in blocks):
        mh = _pos_int(_get(cfg, "mamba_num_heads", required=name), "mamba_num_heads", name)
        md = _pos_int(_get(cfg, "mamba_head_dim", required=name), "mamba_head_dim", name)
        ds = _pos_int(_get(cfg, "ssm_state_size", required=name), "ssm_state_size", name)
        ng = _pos_int(_get(cfg, "n_groups", "mamba_n_groups", "mamba_num_groups", default=1), "n_groups", name)
        kc = _pos_int(_get(cfg, "conv_kernel", "mamba_d_conv", default=4), "conv_kernel", name)
        d_inner = mh * md
        conv_dim = d_inner + 2 * ng * ds
        mamba = StateSpec(state=mh * md * ds, conv=(kc - 1) * conv_dim,
                          proj_params=hidden * (2 * d_inner + 2 * ng * ds + mh) + d_inner * hidden,
                          flops_per_token=6 * mh * md * ds)
    mtp = int(_get(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", default=0) or 0)
    return Architecture(
        name=name, hidden=hidden, vocab=vocab, num_heads=n_heads, num_kv_heads=n_kv, head_dim=head_dim,
        intermediate=intermediate, blocks=tuple(blocks), mlp_gated=mlp_gated, moe=moe, mla=mla, linear=linear,
        mamba=mamba, mtp_layers=mtp, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), source=source,
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
