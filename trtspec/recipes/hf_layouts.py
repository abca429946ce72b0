"""Which decoder layer is what: the per-layer layouts of real Hugging Face ``config.json`` files.

``layer_plan(cfg, name, n_layers, geometry)`` returns one ``Layer`` per decoder layer: its token mixer (``attention``
full GQA, ``sliding`` windowed GQA, ``mla``, ``linear`` DeltaNet-style state, ``mamba2``; None for a layer without
one), its window, its own attention geometry where it differs from the model's (``variants.AttnDims``), its sparse /
compressed attention (``variants.SparseAttention``), and its feed-forward (``dense``, ``moe`` or None) with its own
width where that differs. Layouts read, with the field that decides each (semantics as in transformers 5.24's
configuration classes unless stated):

* Nemotron-H / Nemotron 3: ``hybrid_override_pattern`` (M mamba, * attention, - MLP, E MoE) or ``layers_block_type``;
* Nemotron-NAS (DeciLM): ``block_configs`` -- per layer ``attention.n_heads_in_group`` or ``no_op``, and
  ``ffn.ffn_mult`` (width ``round_up(int(2 * ffn_mult * hidden / 3), 256)``) or ``no_op``;
* DeepSeek-V4: ``compress_ratios`` (see ``variants``);
* MiMo-V2-Flash: ``hybrid_layer_pattern`` (1 sliding with the ``swa_*`` sizes, 0 full) and ``moe_layer_freq``;
* Kimi-K3: ``linear_attn_config.kda_layers`` / ``full_attn_layers`` (1-based);
* ``layer_types`` (Qwen3.5/3.6, gpt-oss, Gemma 3/4, Step-3.7, GLM-5.2, Llama 4): full / sliding / chunked /
  linear / DSA layers; Gemma 4 full layers take ``num_global_key_value_heads`` / ``global_head_dim`` /
  ``attention_k_eq_v``, Step-3.7 sliding layers ``num_sliding_attention_heads`` (or ``attention_other_setting``);
  lists padded with ``num_nextn_predict_layers`` MTP entries are trimmed;
* otherwise ``full_attention_interval`` (Qwen3-Next), Llama 4's ``attention_chunk_size`` on all but every 4th
  layer (``no_rope_layers``), ``sliding_window_pattern`` (Gemma 3), a uniform ``sliding_window``, or full attention.

MLA (``kv_lora_rank``) replaces full attention; DeepSeek-V3.2 / GLM-5 (``index_topk``) add DSA and MiniMax-M3
(``sparse_attention_config``) MSA. Feed-forwards: ``mlp_layer_types``, ``moe_layer_freq`` lists, ``moe_layers_enum``
(Step), ``moe_layers`` / ``interleave_moe_layer_step`` (Llama 4), else ``first_k_dense_replace``,
``decoder_sparse_step`` / ``moe_layer_freq`` and ``mlp_only_layers``.
"""
from __future__ import annotations

from dataclasses import dataclass

from trtspec.recipes import variants
from trtspec.recipes.errors import ConfigError
from trtspec.recipes.variants import AttnDims, SparseAttention

LAYER_TYPE_NAMES = {
    "full_attention": "attention", "attention": "attention", "global_attention": "attention",
    "sliding_attention": "sliding", "sliding_window_attention": "sliding", "local_attention": "sliding",
    "chunked_attention": "sliding", "linear_attention": "linear", "mamba": "mamba2", "mamba2": "mamba2",
    "deepseek_sparse_attention": "attention", "minimax_m3_sparse": "attention",
}
PATTERN_CHARS = {"M": ("mamba2", None), "*": ("attention", None), "-": (None, "dense"), "E": (None, "moe")}
BLOCK_TYPES = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
               "moe": "E"}
MLP_TYPES = {"dense": "dense", "mlp": "dense", "sparse": "moe", "moe": "moe", "hash_moe": "moe"}


@dataclass(frozen=True)
class Geometry:
    """The model-level sizes the per-layer readers need."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    window: int | None
    has_moe: bool


@dataclass
class Layer:
    mixer: str | None
    ffn: str | None = None
    window: int | None = None
    dims: AttnDims | None = None
    sparse: SparseAttention | None = None
    ffn_width: int | None = None


def _one_of(value, allowed) -> bool:
    """``value in allowed`` for any JSON value (lists and mappings are never members)."""
    return isinstance(value, (str, int, float)) and value in allowed


def _pos(cfg: dict, key: str, name: str, default=None) -> int:
    return variants._int(cfg, key, name, default=default)


def _check_len(values, key: str, name: str, n_layers: int) -> list:
    if not isinstance(values, (list, str)) or len(values) != n_layers:
        got = len(values) if isinstance(values, (list, str)) else type(values).__name__
        raise ConfigError(f"{name}: '{key}' has {got} entries but num_hidden_layers is {n_layers}")
    return list(values)


def num_layers(cfg: dict, name: str) -> int:
    """``num_hidden_layers``, else the length of ``layers_block_type`` / ``hybrid_override_pattern``."""
    if cfg.get("num_hidden_layers") is not None:
        return _pos(cfg, "num_hidden_layers", name)
    for key in ("layers_block_type", "hybrid_override_pattern"):
        if isinstance(cfg.get(key), (list, str)) and cfg[key]:
            return len(cfg[key])
    raise ConfigError(f"{name}: config lacks 'num_hidden_layers' (or a 'layers_block_type' / "
                      "'hybrid_override_pattern' layer list)")


# ---- layouts that fix mixer and feed-forward together ----------------------------------------------------------
def _pattern_layers(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    if cfg.get("hybrid_override_pattern") is not None:
        key, pattern = "hybrid_override_pattern", _check_len(cfg["hybrid_override_pattern"], "hybrid_override_pattern",
                                                             name, n_layers)
    else:
        key, types = "layers_block_type", _check_len(cfg["layers_block_type"], "layers_block_type", name, n_layers)
        for i, t in enumerate(types):
            if not _one_of(t, BLOCK_TYPES):
                raise ConfigError(f"{name}: unknown layer type {t!r} at layers_block_type[{i}]; expected one of "
                                  f"{sorted(BLOCK_TYPES)}")
        pattern = [BLOCK_TYPES[t] for t in types]
    out = []
    for i, ch in enumerate(pattern):
        if not _one_of(ch, PATTERN_CHARS):
            raise ConfigError(f"{name}: unknown layer type {ch!r} at {key}[{i}]; expected one of "
                              f"{sorted(PATTERN_CHARS)} (M mamba, * attention, - MLP, E MoE)")
        mixer, ffn = PATTERN_CHARS[ch]
        if ffn == "moe" and not geo.has_moe:
            raise ConfigError(f"{name}: MoE layers in {key} but no n_routed_experts")
        out.append(Layer(mixer, ffn))
    return out


def _nas_width(ffn_mult, hidden: int, where: str) -> int:
    if isinstance(ffn_mult, bool) or not isinstance(ffn_mult, (int, float)) or ffn_mult <= 0:
        raise ConfigError(f"{where}.ffn_mult must be a positive number, got {ffn_mult!r}")
    width = int(2 * ffn_mult * hidden / 3)
    return width + (-width) % 256


def _nas_layers(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    blocks = _check_len(cfg["block_configs"], "block_configs", name, n_layers)
    out = []
    for i, blk in enumerate(blocks):
        where = f"{name}: block_configs[{i}]"
        attn, ffn = blk.get("attention") or {}, blk.get("ffn") or {}
        for part, conf in (("attention", attn), ("ffn", ffn)):
            for key in ("replace_with_linear", "sparsify"):
                if conf.get(key):
                    raise ConfigError(f"{where}.{part}.{key} is not supported (only no_op or a "
                                      f"{'GQA' if part == 'attention' else 'MLP'} block)")
        dims = None
        if not attn.get("no_op"):
            group = attn.get("n_heads_in_group")
            if isinstance(group, bool) or not isinstance(group, int) or group <= 0 or geo.heads % group:
                raise ConfigError(f"{where}.attention.n_heads_in_group must divide num_attention_heads "
                                  f"{geo.heads}, got {group!r}")
            if attn.get("window_length"):
                raise ConfigError(f"{where}.attention.window_length is not supported (full attention only)")
            dims = AttnDims(geo.heads, geo.heads // group, geo.head_dim, geo.head_dim)
        width = None if ffn.get("no_op") else _nas_width(ffn.get("ffn_mult"), geo.hidden, f"{where}.ffn")
        out.append(Layer("attention" if dims else None, "dense" if width else None, dims=dims, ffn_width=width))
    return out


# ---- per-layer token mixers -------------------------------------------------------------------------------------
def _mimo_mixers(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    pattern = _check_len(cfg["hybrid_layer_pattern"], "hybrid_layer_pattern", name, n_layers)
    window = _pos(cfg, "sliding_window", name, default=cfg.get("sliding_window_size"))
    swa = AttnDims(_pos(cfg, "swa_num_attention_heads", name, default=geo.heads),
                   _pos(cfg, "swa_num_key_value_heads", name, default=geo.kv_heads),
                   _pos(cfg, "swa_head_dim", name, default=geo.head_dim),
                   _pos(cfg, "swa_v_head_dim", name, default=geo.v_head_dim))
    full = AttnDims(geo.heads, geo.kv_heads, geo.head_dim, geo.v_head_dim)
    out = []
    for i, p in enumerate(pattern):
        if p not in (0, 1):
            raise ConfigError(f"{name}: hybrid_layer_pattern[{i}] must be 0 (full) or 1 (sliding), got {p!r}")
        out.append(Layer("sliding", window=window, dims=swa) if p else Layer("attention", dims=full))
    return out


def _kimi_linear_mixers(cfg: dict, name: str, n_layers: int) -> list:
    lac = cfg["linear_attn_config"]
    kda = lac.get("kda_layers") if isinstance(lac, dict) else None
    if not isinstance(kda, list) or not kda:
        raise ConfigError(f"{name}: 'linear_attn_config.kda_layers' must list the linear-attention layers (1-based)")
    bad = [i for i in kda if not isinstance(i, int) or not 1 <= i <= n_layers]
    if bad:
        raise ConfigError(f"{name}: linear_attn_config.kda_layers has ids {bad} outside 1..{n_layers}")
    return [Layer("linear" if i + 1 in set(kda) else "attention") for i in range(n_layers)]


def _typed_mixers(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    types = cfg["layer_types"]
    mtp = cfg.get("num_nextn_predict_layers") or 0
    if isinstance(types, list) and mtp and len(types) == n_layers + mtp:
        types = types[:n_layers]
    types = _check_len(types, "layer_types", name, n_layers)
    full_dims = sliding_dims = None
    if cfg.get("global_head_dim") or cfg.get("num_global_key_value_heads") or cfg.get("attention_k_eq_v"):  # Gemma 4
        hd = cfg.get("global_head_dim") or geo.head_dim
        full_dims = AttnDims(geo.heads, cfg.get("num_global_key_value_heads") or geo.kv_heads, hd, hd,
                             shared_kv=bool(cfg.get("attention_k_eq_v")))
    other = cfg.get("num_sliding_attention_heads") or (cfg.get("attention_other_setting") or {}).get(
        "num_attention_heads")
    if other and other != geo.heads:  # Step-3.7
        sliding_dims = AttnDims(other, geo.kv_heads, geo.head_dim, geo.v_head_dim)
    out = []
    for i, t in enumerate(types):
        if not _one_of(t, LAYER_TYPE_NAMES):
            raise ConfigError(f"{name}: unknown attention type {t!r} at layer_types[{i}]; expected one of "
                              f"{sorted(LAYER_TYPE_NAMES)}")
        mixer = LAYER_TYPE_NAMES[t]
        if t == "chunked_attention":
            out.append(Layer("sliding", window=_pos(cfg, "attention_chunk_size", name)))
        elif mixer == "sliding":
            out.append(Layer("sliding", window=_pos(cfg, "sliding_window", name), dims=sliding_dims))
        else:
            out.append(Layer(mixer, dims=full_dims if mixer == "attention" else None))
    return out


def _default_mixers(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    window = _pos(cfg, "sliding_window", name) if geo.window is not None else None
    if cfg.get("full_attention_interval"):
        every = _pos(cfg, "full_attention_interval", name)
        return [Layer("attention" if (i + 1) % every == 0 else "linear") for i in range(n_layers)]
    if cfg.get("attention_chunk_size") and str(cfg.get("model_type", "")).startswith("llama4"):
        chunk = _pos(cfg, "attention_chunk_size", name)
        rope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n_layers)]
        rope = _check_len(rope, "no_rope_layers", name, n_layers)
        return [Layer("sliding", window=chunk) if r else Layer("attention") for r in rope]
    if cfg.get("sliding_window_pattern") and window:
        every = _pos(cfg, "sliding_window_pattern", name)
        return [Layer("attention") if (i + 1) % every == 0 else Layer("sliding", window=window)
                for i in range(n_layers)]
    if window and cfg.get("use_sliding_window", True) and cfg.get("attention_type") != "full":
        return [Layer("sliding", window=window) for _ in range(n_layers)]
    return [Layer("attention") for _ in range(n_layers)]


def _dsv4_ratios(cfg: dict, name: str, n_layers: int) -> list:
    """DeepSeek-V4 as transformers saves it: ``layer_types`` names and ``compress_rates`` instead of
    ``compress_ratios``."""
    custom = cfg.get("compress_rates") or {}
    if not isinstance(custom, dict):
        raise ConfigError(f"{name}: 'compress_rates' must map attention types to ratios, got {custom!r}")
    rates = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128, **custom}
    types = cfg["layer_types"]
    types = _check_len(types[:n_layers] if isinstance(types, list) else types, "layer_types", name, n_layers)
    for i, t in enumerate(types):
        if not _one_of(t, rates):
            raise ConfigError(f"{name}: unknown DeepSeek-V4 attention type {t!r} at layer_types[{i}]; expected one "
                              f"of {sorted(rates)}")
    return [rates[t] for t in types]


def is_deepseek_v4(cfg: dict) -> bool:
    """DeepSeek-V4's compressed attention: ``compress_ratios``, or ``model_type: deepseek_v4``."""
    return cfg.get("compress_ratios") is not None or str(cfg.get("model_type")) == "deepseek_v4"


def _mixers(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    if cfg.get("compress_ratios") is None and is_deepseek_v4(cfg) and cfg.get("layer_types"):
        cfg = {**cfg, "compress_ratios": _dsv4_ratios(cfg, name, n_layers)}
    if cfg.get("compress_ratios") is not None:
        specs = variants.dsv4_layers(cfg, name, n_layers, geo.hidden, geo.heads)
        return [Layer("mla", sparse=s) for s in specs]
    if cfg.get("hybrid_layer_pattern") is not None:
        return _mimo_mixers(cfg, name, n_layers, geo)
    if cfg.get("linear_attn_config") is not None:
        layers = _kimi_linear_mixers(cfg, name, n_layers)
    elif cfg.get("layer_types") is not None:
        layers = _typed_mixers(cfg, name, n_layers, geo)
    else:
        layers = _default_mixers(cfg, name, n_layers, geo)
    if cfg.get("kv_lora_rank") is not None or cfg.get("attention_type") == "mla":
        for layer in layers:
            layer.mixer = "mla" if layer.mixer == "attention" else layer.mixer
    if cfg.get("index_topk") is not None:
        if any(layer.mixer not in ("mla", "linear", None) for layer in layers):
            raise ConfigError(f"{name}: 'index_topk' (DeepSeek sparse attention) needs MLA layers (kv_lora_rank)")
        for layer, spec in zip(layers, variants.dsa_layers(cfg, name, n_layers, geo.hidden)):
            layer.sparse = spec if layer.mixer == "mla" else None
    sc = cfg.get("sparse_attention_config")
    types = set(cfg.get("layer_types") or []) if isinstance(cfg.get("layer_types"), list) else set()
    for kind, field in (("deepseek_sparse_attention", "index_topk"), ("minimax_m3_sparse", "sparse_attention_config")):
        if kind in types and cfg.get(field) is None:
            raise ConfigError(f"{name}: layer_types has {kind!r} layers but the config lacks {field!r}")
    if isinstance(sc, dict) and sc.get("use_sparse_attention"):
        for layer, spec in zip(layers, variants.msa_layers(cfg, name, n_layers, geo.hidden)):
            if spec is not None and layer.mixer != "attention":
                raise ConfigError(f"{name}: sparse_attention_config marks a {layer.mixer} layer sparse; MSA "
                                  "needs full-attention layers")
            layer.sparse = spec
    return layers


# ---- per-layer feed-forwards ------------------------------------------------------------------------------------
def _moe_flags(cfg: dict, name: str, n_layers: int) -> list:
    if cfg.get("mlp_layer_types") is not None:
        types = _check_len(cfg["mlp_layer_types"], "mlp_layer_types", name, n_layers)
        for i, t in enumerate(types):
            if not _one_of(t, MLP_TYPES):
                raise ConfigError(f"{name}: unknown MLP type {t!r} at mlp_layer_types[{i}]; expected one of "
                                  f"{sorted(MLP_TYPES)}")
        return [MLP_TYPES[t] == "moe" for t in types]
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, list):
        mtp = cfg.get("num_nextn_predict_layers") or 0
        freq = freq[:n_layers] if mtp and len(freq) == n_layers + mtp else freq
        flags = _check_len(freq, "moe_layer_freq", name, n_layers)
        if any(f not in (0, 1) for f in flags):
            raise ConfigError(f"{name}: moe_layer_freq entries must be 0 (dense) or 1 (MoE)")
        return [bool(f) for f in flags]
    listed = cfg.get("moe_layers_enum", cfg.get("moe_layers"))
    if listed is not None:
        items = listed.split(",") if isinstance(listed, str) else listed
        try:
            chosen = {int(x) for x in items if str(x).strip()}
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: 'moe_layers_enum' must list layer indices, got {listed!r}") from exc
        return [i in chosen for i in range(n_layers)]
    if cfg.get("interleave_moe_layer_step"):
        step = _pos(cfg, "interleave_moe_layer_step", name)
        return [i % step == step - 1 for i in range(n_layers)]
    dense_first = cfg.get("first_k_dense_replace") or 0
    step = cfg.get("decoder_sparse_step") or 1
    every = freq if isinstance(freq, int) and freq > 0 else 1
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    return [i >= dense_first and i not in mlp_only and (i + 1) % step == 0 and i % every == 0
            for i in range(n_layers)]


def layer_plan(cfg: dict, name: str, n_layers: int, geo: Geometry) -> list:
    """One ``Layer`` per decoder layer (see module docstring); raises ``ConfigError`` naming the field."""
    if cfg.get("hybrid_override_pattern") is not None or cfg.get("layers_block_type") is not None:
        return _pattern_layers(cfg, name, n_layers, geo)
    if cfg.get("block_configs") is not None:
        return _nas_layers(cfg, name, n_layers, geo)
    layers = _mixers(cfg, name, n_layers, geo)
    flags = _moe_flags(cfg, name, n_layers) if geo.has_moe else [False] * n_layers
    for layer, is_moe in zip(layers, flags):
        layer.ffn = "moe" if is_moe else "dense"
    return layers
