"""Typed model configs read from a Hugging Face ``config.json`` (offline; no transformers import).

Supported decoders share one shape (pre-norm RMSNorm, RoPE, GQA attention, SwiGLU MLP); they
differ only in the switches below, which :func:`read_model_config` sets per architecture.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

# architecture name in config.json -> switches that differ from plain Llama
SUPPORTED_ARCHITECTURES: dict[str, dict] = {
    "LlamaForCausalLM": {},          # Llama 2/3/3.x, SmolLM, TinyLlama, ...
    "MistralForCausalLM": {},
    "Qwen2ForCausalLM": {"qkv_bias": True},
    "Qwen3ForCausalLM": {"qk_norm": True},
}
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3",)
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class ModelFormatError(ValueError):
    """A model directory that cannot be loaded: missing/corrupt files or an unsupported config."""


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ModelFormatError(f"{path.parent}: missing {path.name} (expected a Hugging Face model directory)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelFormatError(f"{path}: not valid JSON ({e})") from e


@dataclass(frozen=True)
class RopeConfig:
    """Rotary position embedding. ``theta``: base; ``kind``: default | linear | llama3;
    ``factor`` etc. follow the Hugging Face ``rope_scaling`` fields."""

    theta: float = 10000.0
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def __post_init__(self):
        if self.kind not in SUPPORTED_ROPE_TYPES:
            raise ModelFormatError(f"rope_scaling type {self.kind!r} is not supported; supported: {SUPPORTED_ROPE_TYPES}")
        if self.theta <= 0 or self.factor <= 0:
            raise ModelFormatError(f"rope theta and factor must be > 0, got {self.theta}, {self.factor}")

    def inv_freq(self, head_dim: int) -> "torch.Tensor":  # noqa: F821
        """float32 ``[head_dim/2]``: ``1 / theta^(2i/d)``, rescaled as the rope type says."""
        import torch

        inv = 1.0 / (self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        if self.kind == "linear":
            return inv / self.factor
        if self.kind == "llama3":
            # Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth ramp between.
            old = self.original_max_position_embeddings
            low_wavelen, high_wavelen = old / self.low_freq_factor, old / self.high_freq_factor
            wavelen = 2 * math.pi / inv
            scaled = torch.where(wavelen > low_wavelen, inv / self.factor, inv)
            smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
            smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
            medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
            return torch.where(medium, smoothed, scaled)
        if self.kind == "yarn":
            # YaRN (Peng et al. 2023): interpolate (divide by factor) the low frequencies, keep the high
            # ones, linear ramp between the dims that rotate beta_slow..beta_fast times over the original context
            def dim_of(rotations):
                return head_dim * math.log(self.original_max_position_embeddings / (rotations * 2 * math.pi)) / (
                    2 * math.log(self.theta))

            low, high = dim_of(self.beta_fast), dim_of(self.beta_slow)
            if self.truncate:
                low, high = math.floor(low), math.ceil(high)
            low, high = max(low, 0), min(high, head_dim - 1)
            ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / ((high - low) or 0.001)).clamp(0, 1)
            keep = 1 - ramp                                   # 1: extrapolate (unchanged), 0: interpolate
            return inv / self.factor * (1 - keep) + inv * keep
        return inv

    def attention_scale(self) -> float:
        """Factor on cos/sin (YaRN's ``0.1 ln(factor) + 1``; 1 for the other types)."""
        if self.kind != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)

        def mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if self.mscale and self.mscale_all_dim:
            return mscale(self.factor, self.mscale) / mscale(self.factor, self.mscale_all_dim)
        return mscale(self.factor)


def _rope_from(cfg: dict) -> RopeConfig:
    params = dict(cfg.get("rope_scaling") or {})
    params.update(cfg.get("rope_parameters") or {})   # transformers 5 spelling
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default")) or "default"

    def opt(key):
        return None if params.get(key) is None else float(params[key])

    return RopeConfig(
        theta=float(theta), kind=kind, factor=float(params.get("factor") or 1.0),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings")
                                             or cfg.get("max_position_embeddings", 8192)),
        beta_fast=float(params.get("beta_fast") or 32), beta_slow=float(params.get("beta_slow") or 1),
        attention_factor=opt("attention_factor"), mscale=opt("mscale"), mscale_all_dim=opt("mscale_all_dim"),
        truncate=bool(params.get("truncate", True)),
    )


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only LM. Sizes in elements; ``max_position_embeddings`` is the context in tokens."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = field(default_factory=RopeConfig)
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ModelFormatError(f"config.{name} must be > 0, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelFormatError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                                   f"num_key_value_heads={self.num_key_value_heads}")


def _eos(cfg: dict) -> tuple[int, ...]:
    eos = cfg.get("eos_token_id")
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list) else (int(eos),)


def _common_fields(cfg: dict) -> dict:
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    return dict(
        vocab_size=int(cfg["vocab_size"]), hidden_size=hidden, intermediate_size=int(cfg["intermediate_size"]),
        num_hidden_layers=int(cfg.get("num_hidden_layers", 1)), num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads), rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope=_rope_from(cfg), max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        eos_token_ids=_eos(cfg),
    )


def read_model_config(model_dir: str | Path) -> ModelConfig:
    """Parse ``model_dir/config.json`` of a supported decoder; a clear error otherwise. A DeepSeek-V3-layout
    model gives a :class:`trtspec.runtime.deepseek_config.DeepseekConfig` (same basic fields)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelFormatError(f"model directory {model_dir} does not exist")
    cfg = _read_json(model_dir / "config.json")
    archs = cfg.get("architectures") or []
    if "DeepseekV3ForCausalLM" in archs:   # MLA + MoE + MTP layers: trtspec.runtime.deepseek
        from trtspec.runtime.deepseek_config import read_deepseek_config

        return read_deepseek_config(model_dir, cfg)
    arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
    if arch is None:
        raise ModelFormatError(
            f"{model_dir}: unsupported architecture {archs or cfg.get('model_type')!r}; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}, DeepseekV3ForCausalLM (and {', '.join(EAGLE3_ARCHITECTURES)} "
            "as an eagle3 draft)")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ModelFormatError(f"{model_dir}: hidden_act {cfg['hidden_act']!r} is not supported (expected 'silu')")
    switches = dict(SUPPORTED_ARCHITECTURES[arch])
    if cfg.get("attention_bias"):
        switches["qkv_bias"] = True
    fields = _common_fields(cfg)
    window = cfg.get("sliding_window")
    if window and cfg.get("use_sliding_window", arch == "MistralForCausalLM"):
        # full attention equals sliding-window attention while the sequence fits the window
        fields["max_position_embeddings"] = min(fields["max_position_embeddings"], int(window))
    return ModelConfig(architecture=arch, tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                       **switches, **fields)


@dataclass(frozen=True)
class Eagle3Config:
    """An EAGLE-3 head as exported by NVIDIA Model-Optimizer (``LlamaForCausalLMEagle3``).

    ``layer``: the head's one decoder layer (its q/k/v take ``2*hidden_size`` inputs);
    ``aux_layer_ids``: target layers whose *outputs* are captured and fused by ``fc``
    (``[len(ids) * hidden] -> [hidden]``); ``draft_vocab_size``: rows of the head's lm_head;
    when smaller than ``vocab_size`` the ``d2t`` map gives target id = draft id + d2t[draft id].
    """

    layer: ModelConfig
    aux_layer_ids: tuple[int, ...]
    draft_vocab_size: int

    def __post_init__(self):
        if not self.aux_layer_ids:
            raise ModelFormatError("eagle_config.eagle_aux_hidden_state_layer_ids is empty (EAGLE-3 needs >= 1)")
        if not 0 < self.draft_vocab_size <= self.layer.vocab_size:
            raise ModelFormatError(f"draft_vocab_size={self.draft_vocab_size} must be in 1..vocab_size="
                                   f"{self.layer.vocab_size}")


def read_eagle3_config(model_dir: str | Path) -> Eagle3Config:
    """Parse the ``config.json`` Model-Optimizer writes for an EAGLE-3 head."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelFormatError(f"eagle3 draft directory {model_dir} does not exist")
    cfg = _read_json(model_dir / "config.json")
    archs = cfg.get("architectures") or []
    if not any(a in EAGLE3_ARCHITECTURES for a in archs):
        raise ModelFormatError(f"{model_dir}: architectures={archs!r} is not an EAGLE-3 head; expected one of "
                               f"{EAGLE3_ARCHITECTURES} (NVIDIA Model-Optimizer export)")
    eagle = cfg.get("eagle_config") or {}
    if eagle.get("use_aux_hidden_state") is False:
        raise ModelFormatError(f"{model_dir}: eagle_config.use_aux_hidden_state is false (EAGLE-1/2); only EAGLE-3 "
                               "heads are supported")
    layer = ModelConfig(architecture=archs[0], **{**_common_fields(cfg), "num_hidden_layers": 1})
    ids = tuple(int(i) for i in eagle.get("eagle_aux_hidden_state_layer_ids") or ())
    return Eagle3Config(layer=layer, aux_layer_ids=ids,
                        draft_vocab_size=int(cfg.get("draft_vocab_size") or layer.vocab_size))


# -- quantized checkpoints (NVIDIA Model-Optimizer unified Hugging Face export) ---------------------

#: ``quant_algo`` values the runtime dequantizes (see :mod:`trtspec.runtime.quant` for each layout).
SUPPORTED_QUANT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "W4A16_AWQ", "W4A8_AWQ",
                         "W8A8_SQ_PER_CHANNEL", "W8A16", "NVFP4", "W4A16_NVFP4")
SUPPORTED_KV_CACHE_ALGOS = ("FP8",)


@dataclass(frozen=True)
class LayerQuant:
    """The format of one quantized linear layer: ``algo`` (a ``quant_algo`` name) and, for the
    group-wise formats, ``group_size`` (elements of the input dimension sharing one scale)."""

    algo: str | None
    group_size: int | None = None


@dataclass(frozen=True)
class QuantConfig:
    """``quantization`` of a Model-Optimizer export (``hf_quant_config.json``, else ``config.json``'s
    ``quantization_config``).

    ``algo``: the checkpoint's ``quant_algo`` (None when only the KV cache is quantized;
    ``MIXED_PRECISION`` when layers differ, each then in
    ``layers``); ``kv_cache_algo``: ``FP8`` or None; ``exclude``: module-name patterns left
    unquantized; ``producer``: e.g. ``modelopt 0.47.0``; ``source``: the file read.
    """

    algo: str | None
    kv_cache_algo: str | None = None
    group_size: int | None = None
    exclude: tuple[str, ...] = ()
    layers: tuple[tuple[str, LayerQuant], ...] = ()
    producer: str = "modelopt"
    source: str = ""

    def __post_init__(self):
        algos = [q.algo for _, q in self.layers] if self.algo == "MIXED_PRECISION" else [self.algo]
        bad = sorted({a for a in algos if a is not None and a not in SUPPORTED_QUANT_ALGOS})
        if bad:
            raise ModelFormatError(f"{self.source}: quant_algo {', '.join(bad)} is not supported by the trtspec "
                                   f"runtime; supported: {', '.join(SUPPORTED_QUANT_ALGOS)}")
        if self.kv_cache_algo is not None and self.kv_cache_algo not in SUPPORTED_KV_CACHE_ALGOS:
            raise ModelFormatError(f"{self.source}: kv_cache_quant_algo {self.kv_cache_algo!r} is not supported; "
                                   f"supported: {', '.join(SUPPORTED_KV_CACHE_ALGOS)} (or none)")

    def layer(self, prefix: str) -> LayerQuant | None:
        """The format of linear ``prefix`` (e.g. ``model.layers.0.mlp.down_proj``); None when excluded."""
        import fnmatch

        if self.algo is None:
            return None
        if self.algo == "MIXED_PRECISION":
            return dict(self.layers).get(prefix)
        if any(fnmatch.fnmatchcase(prefix, pat) for pat in self.exclude):
            return None
        return LayerQuant(self.algo, self.group_size)


def _layer_quant(raw: dict, where: str, *, optional: bool = False) -> LayerQuant:
    algo = raw.get("quant_algo")
    if not isinstance(algo, str) and not (optional and algo is None):
        raise ModelFormatError(f"{where}: quant_algo missing or not a string ({algo!r})")
    group = raw.get("group_size")
    if isinstance(algo, str) and algo.lower() == "fp8_pb_wo":   # Model-Optimizer writes this one in lower case
        algo = "FP8_PB_WO"
    return LayerQuant(algo, int(group) if group else None)


def read_quant_config(model_dir: str | Path) -> QuantConfig | None:
    """The quantization of ``model_dir`` (None for an unquantized checkpoint).

    Model-Optimizer writes ``hf_quant_config.json`` (``{"producer", "quantization": {quant_algo,
    kv_cache_quant_algo, group_size, exclude_modules | quantized_layers}}``) and the same facts as
    ``config.json``'s ``quantization_config`` with ``quant_method: modelopt``; any other
    ``quant_method`` (GPTQ, AWQ, compressed-tensors, bitsandbytes, ...) is refused by name.
    """
    model_dir = Path(model_dir)
    cfg = _read_json(model_dir / "config.json").get("quantization_config")
    hf_path = model_dir / "hf_quant_config.json"
    if cfg is None and not hf_path.is_file():
        return None
    if cfg is not None:
        method = cfg.get("quant_method")
        if method != "modelopt":
            raise ModelFormatError(f"{model_dir}/config.json: quantization_config.quant_method {method!r} is not "
                                   "supported; the trtspec runtime loads NVIDIA Model-Optimizer exports "
                                   "(quant_method 'modelopt') only")
    if hf_path.is_file():
        top = _read_json(hf_path)
        raw, where = top.get("quantization"), str(hf_path)
        if not isinstance(raw, dict):
            raise ModelFormatError(f"{hf_path}: no 'quantization' object")
        prod = top.get("producer") or {}
    else:
        raw, where, prod = cfg, f"{model_dir}/config.json quantization_config", cfg.get("producer") or {}
        scheme = cfg.get("kv_cache_scheme")
        if scheme and "kv_cache_quant_algo" not in raw:   # {"num_bits": 8, "type": "float"} = FP8
            raw = {**raw, "kv_cache_quant_algo": "FP8" if (scheme.get("num_bits"), scheme.get("type")) == (8, "float")
                   else str(scheme)}
    top_layer = _layer_quant(raw, where, optional=bool(raw.get("kv_cache_quant_algo")))
    layers = tuple(sorted((name, _layer_quant(q, f"{where} quantized_layers.{name}"))
                          for name, q in (raw.get("quantized_layers") or {}).items()))
    return QuantConfig(algo=top_layer.algo, kv_cache_algo=raw.get("kv_cache_quant_algo"),
                       group_size=top_layer.group_size,
                       exclude=tuple(raw.get("exclude_modules") or raw.get("ignore") or ()), layers=layers,
                       producer=" ".join(str(p) for p in (prod.get("name", "modelopt"), prod.get("version")) if p),
                       source=where)
