"""Quantized checkpoints (NVIDIA Model-Optimizer unified Hugging Face export) in the runtime.

Weights are dequantized once, at load, into float32 (the model is then cast to the runtime dtype);
the activation and KV-cache quantizers the checkpoint specifies are simulated in the forward
("fake quantization", as Model-Optimizer's own fake-quant model and the serving engines' kernels
compute them) unless ``quant_activations=False`` asks for the weights alone.

Layouts, per linear layer ``P`` (``O`` out-features, ``I`` in-features; ``W`` = the float weight
the layer multiplies by)::

    FP8                        P.weight F8_E4M3 [O, I], P.weight_scale F32 []      W = w * s
    FP8_PER_CHANNEL_PER_TOKEN  P.weight_scale [O] (or [O, 1])                     W = w * s[o]
    FP8_PB_WO                  P.weight_scale [ceil(O/128), ceil(I/128)] or []    W = w * s[o // 128, i // 128]
    W8A16, W8A8_SQ_PER_CHANNEL P.weight I8 [O, I], P.weight_scale [O]            W = w * s[o]
    W4A16_AWQ                  P.weight U8 [O/2, I]: byte (r, i) holds rows 2r (low nibble) and 2r+1
                               (high nibble) as two's-complement int4; P.weight_scale [O, I/g], g = 128
                                                                                   W = q * s[o, i // g]
    W4A8_AWQ                   as W4A16_AWQ, plus P.weight_scale_2 F32 []: the int4 weight is cast to
                               FP8 with that per-tensor scale (TensorRT-LLM's W4A8 GEMM runs in FP8)
                                                                                   W = fp8(q * s / s2) * s2
    NVFP4, W4A16_NVFP4         P.weight U8 [O, I/2]: byte (o, j) holds elements 2j (low nibble) and
                               2j+1 (high nibble) as E2M1 codes; P.weight_scale F8_E4M3 [O, I/16];
                               P.weight_scale_2 F32 []                            W = e2m1 * s[o, i // 16] * s2

    P.pre_quant_scale [I] (AWQ, SmoothQuant): the layer computes linear(x * pre_quant_scale); with no
        activation quantizer in between it is folded into the weight, W[:, i] *= pre_quant_scale[i].
    P.input_scale []: static activation scale. FP8, W4A8_AWQ: x -> fp8(x / s) * s; W8A8_SQ: x ->
        clamp(round(x / s), -128, 127) * s; NVFP4: the global scale of 16-element dynamic blocks.
        FP8_PER_CHANNEL_PER_TOKEN has none: each token is scaled by its own amax / 448.
    ...self_attn.k_proj.k_scale, v_proj.v_scale [] (``kv_cache_quant_algo: FP8``): the KV cache stores
        fp8(k / k_scale) and reads it back times k_scale (likewise v); the runtime keeps its cache in
        the runtime dtype and rounds K/V through FP8 with these scales when it writes them.

Sources: Model-Optimizer 0.47 ``modelopt/torch/export/quant_utils.py`` (``to_quantized_weight``,
``pack_int4_in_uint8``), ``qtensor/nvfp4_tensor.py``; TensorRT-LLM
``tensorrt_llm/_torch/modules/linear.py`` (``W4A8_AWQ_LinearMethod``: pre_quant_scale, FP8 input
with input_scale, weights times weight_scale then divided by weight_scale_2 into FP8, output times
input_scale * weight_scale_2).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.runtime.config import LayerQuant, ModelFormatError, QuantConfig

FP8_MAX = 448.0
INT8_RANGE = (-128, 127)
E2M1_MAX = 6.0
#: magnitude of E2M1 code c & 7 (the sign is bit 3)
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NVFP4_BLOCK = 16
FP8_BLOCK = 128
#: tensor-name suffixes that belong to a quantized layer (any left unread is an error)
QUANT_SUFFIXES = (".weight_scale", ".weight_scale_2", ".input_scale", ".pre_quant_scale", ".k_scale", ".v_scale",
                  ".k_bias", ".v_bias", ".weight_zero_point", "_amax")


# -- the formats' arithmetic ---------------------------------------------------------------------

def fp8_roundtrip(x: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """float32 ``fp8_e4m3(clamp(x / scale, +-448)) * scale`` (per-tensor or broadcast ``scale``)."""
    x = x.float()
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * scale


def fake_fp8_per_token(x: torch.Tensor) -> torch.Tensor:
    """Dynamic FP8 over the last dim: each row scaled by its own ``amax / 448`` (zero rows stay zero)."""
    amax = x.float().abs().amax(-1, keepdim=True)
    return fp8_roundtrip(x, torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax)))


def fake_int8(x: torch.Tensor, scale: float) -> torch.Tensor:
    """float32 ``clamp(round(x / scale), -128, 127) * scale`` (static per-tensor INT8)."""
    return (x.float() / scale).round().clamp(*INT8_RANGE) * scale


def round_e2m1(a: torch.Tensor) -> torch.Tensor:
    """Round float32 values to the nearest E2M1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6, signed), ties to
    the even code, magnitudes above 6 to 6."""
    values = a.new_tensor(E2M1_VALUES)
    mids = (values[1:] + values[:-1]) / 2                          # 0.25 0.75 1.25 1.75 2.5 3.5 5
    mag = a.abs()
    code = torch.searchsorted(mids, mag.contiguous())              # values[code] nearest, ties low
    tie_up = (code % 2 == 1) & (code < len(mids)) & (mag == mids[code.clamp(max=len(mids) - 1)])
    return values[code + tie_up.long()] * torch.sign(a)


def fake_nvfp4(x: torch.Tensor, global_scale: float, block: int = NVFP4_BLOCK) -> torch.Tensor:
    """NVFP4 fake quantization of ``x`` ``[..., K]`` (K a multiple of ``block``), dynamic per block:
    ``s_b = fp8(clamp(amax_b / (6 * g), 2^-9, 448))`` (an all-zero block gets 1), then
    ``e2m1(x / (s_b g)) * s_b g``; ``g`` = the exported ``input_scale``."""
    shape = x.shape
    xb = x.float().reshape(*shape[:-1], shape[-1] // block, block)
    s = xb.abs().amax(-1, keepdim=True) / (E2M1_MAX * global_scale)
    s = torch.where(s == 0, torch.ones_like(s), s).clamp(2.0 ** -9, FP8_MAX).to(torch.float8_e4m3fn).float()
    step = s * global_scale
    return (round_e2m1(xb / step) * step).reshape(shape)


def unpack_int4_rows(packed: torch.Tensor) -> torch.Tensor:
    """int8 ``[2R, I]`` from Model-Optimizer's AWQ packing uint8 ``[R, I]``: row 2r = low nibble,
    row 2r+1 = high nibble, each a two's-complement int4 in -8..7."""
    p = packed.view(torch.uint8).to(torch.int16)
    lo, hi = p & 0x0F, p >> 4
    q = torch.stack((lo, hi), dim=1).reshape(2 * p.shape[0], p.shape[1])   # [2R, I]
    return (q - 16 * (q >= 8).to(torch.int16)).to(torch.int8)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """float32 ``[O, 2J]`` from NVFP4 uint8 ``[O, J]``: element 2j = low nibble, 2j+1 = high nibble;
    code bit 3 = sign, bits 0-2 index :data:`E2M1_VALUES`."""
    p = packed.view(torch.uint8)
    codes = torch.stack((p & 0x0F, p >> 4), dim=-1).reshape(*p.shape[:-1], 2 * p.shape[-1]).long()
    mag = torch.tensor(E2M1_VALUES)[codes & 7]
    return torch.where(codes >= 8, -mag, mag)


def expand_blocks(scale: torch.Tensor, block: int, size: int, dim: int) -> torch.Tensor:
    """Repeat each entry of ``scale`` ``block`` times along ``dim`` and keep ``size`` (the last block may be partial)."""
    return scale.repeat_interleave(block, dim=dim).narrow(dim, 0, size)


# -- one layer of the checkpoint -----------------------------------------------------------------

class _Layer:
    """Reads (and consumes) the tensors ``prefix.*`` of one quantized linear layer."""

    def __init__(self, tensors: dict[str, torch.Tensor], prefix: str, lq: LayerQuant, where: str):
        self.tensors, self.prefix, self.lq, self.where = tensors, prefix, lq, where

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.where}: {what} ({self.lq.algo} layer {self.prefix})")

    def take(self, name: str, dtypes: tuple[torch.dtype, ...] | None = None, *, optional=False) -> torch.Tensor | None:
        key = f"{self.prefix}.{name}"
        t = self.tensors.pop(key, None)
        if t is None:
            if optional:
                return None
            raise self.fail(f"missing tensor {key}")
        if dtypes is not None and t.dtype not in dtypes:
            raise self.fail(f"tensor {key} is {t.dtype}, expected {' or '.join(str(d) for d in dtypes)}")
        return t

    def scalar(self, name: str, *, optional=False) -> float | None:
        t = self.take(name, optional=optional)
        if t is None:
            return None
        if t.numel() != 1:
            raise self.fail(f"tensor {self.prefix}.{name} has shape {tuple(t.shape)}, expected a scalar")
        value = float(t.float().reshape(()))
        if not value > 0:
            raise self.fail(f"tensor {self.prefix}.{name} = {value}, expected > 0")
        return value

    def shape_error(self, name: str, got, expected: str) -> ModelFormatError:
        return self.fail(f"tensor {self.prefix}.{name} has shape {tuple(got)}, expected {expected}")

    def group(self, in_features: int, scale_cols: int, default: int | None) -> int:
        g = self.lq.group_size or default or (in_features // max(scale_cols, 1))
        if g <= 0 or in_features % g or scale_cols != in_features // g:
            raise self.shape_error("weight_scale", (-1, scale_cols), f"[O, {in_features}/{g}] (group size {g})")
        return g


def _w_fp8(L: _Layer) -> torch.Tensor:
    w = L.take("weight", (torch.float8_e4m3fn,)).float()
    s = L.take("weight_scale").float()
    O = w.shape[0]
    if s.numel() == 1:
        return w * s.reshape(())
    if s.numel() == O and s.shape[0] == O:
        return w * s.reshape(O, 1)
    raise L.shape_error("weight_scale", s.shape, f"[] (per tensor) or [{O}] (per channel)")


def _w_fp8_block(L: _Layer) -> torch.Tensor:
    w = L.take("weight", (torch.float8_e4m3fn,)).float()
    s = L.take("weight_scale").float()
    O, I = w.shape
    grid = (-(-O // FP8_BLOCK), -(-I // FP8_BLOCK))
    if s.dim() == 4 and s.shape[1] == s.shape[3] == 1:   # Model-Optimizer's block layout [R, 1, C, 1]
        s = s.reshape(s.shape[0], s.shape[2])
    if s.numel() == 1:
        s = s.reshape(1, 1).expand(*grid)
    if tuple(s.shape) != grid:
        raise L.shape_error("weight_scale", s.shape, f"{list(grid)} ({FP8_BLOCK}x{FP8_BLOCK} blocks of [{O}, {I}])")
    return w * expand_blocks(expand_blocks(s, FP8_BLOCK, O, 0), FP8_BLOCK, I, 1)


def _w_int8(L: _Layer) -> torch.Tensor:
    w = L.take("weight", (torch.int8,)).float()
    s = L.take("weight_scale").float()
    if s.numel() != w.shape[0] or s.shape[0] != w.shape[0]:
        raise L.shape_error("weight_scale", s.shape, f"[{w.shape[0]}] (one scale per output channel)")
    return w * s.reshape(-1, 1)


def _w_int4(L: _Layer) -> torch.Tensor:
    packed = L.take("weight", (torch.uint8, torch.int8))
    s = L.take("weight_scale").float()
    if packed.dim() != 2 or s.dim() != 2 or s.shape[0] != 2 * packed.shape[0]:
        raise L.shape_error("weight", packed.shape, f"[O/2, I] uint8 with weight_scale [O, I/g] "
                                                    f"(weight_scale is {tuple(s.shape)})")
    I = packed.shape[1]
    g = L.group(I, s.shape[1], 128)
    return unpack_int4_rows(packed).float() * s.repeat_interleave(g, dim=1)


def _w_w4a8(L: _Layer) -> torch.Tensor:
    w = _w_int4(L)
    return fp8_roundtrip(w, L.scalar("weight_scale_2"))


def _w_nvfp4(L: _Layer) -> torch.Tensor:
    packed = L.take("weight", (torch.uint8,))
    s = L.take("weight_scale", (torch.float8_e4m3fn,)).float()
    s2 = L.scalar("weight_scale_2")
    if packed.dim() != 2 or s.dim() != 2 or s.shape[0] != packed.shape[0]:
        raise L.shape_error("weight", packed.shape, f"[O, I/2] uint8 with weight_scale [O, I/16] "
                                                    f"(weight_scale is {tuple(s.shape)})")
    I = 2 * packed.shape[1]
    g = L.group(I, s.shape[1], NVFP4_BLOCK)
    return unpack_e2m1(packed) * (s * s2).repeat_interleave(g, dim=1)


#: quant_algo -> (weight dequantization, activation quantizer kind or None)
FORMATS: dict[str, tuple[Callable[[_Layer], torch.Tensor], str | None]] = {
    "FP8": (_w_fp8, "fp8"),
    "FP8_PER_CHANNEL_PER_TOKEN": (_w_fp8, "fp8_per_token"),
    "FP8_PB_WO": (_w_fp8_block, None),
    "W8A16": (_w_int8, None),
    "W8A8_SQ_PER_CHANNEL": (_w_int8, "int8"),
    "W4A16_AWQ": (_w_int4, None),
    "W4A8_AWQ": (_w_w4a8, "fp8"),
    "NVFP4": (_w_nvfp4, "nvfp4"),
    "W4A16_NVFP4": (_w_nvfp4, None),
}


# -- runtime modules -----------------------------------------------------------------------------

class ActQuant(nn.Module):
    """The input quantizer of one linear layer: ``kind`` fp8 | fp8_per_token | int8 | nvfp4 with
    the exported per-tensor ``scale`` (None for the dynamic fp8_per_token). Computes in float32 and
    returns ``x``'s dtype."""

    def __init__(self, kind: str, scale: float | None):
        super().__init__()
        self.kind, self.scale = kind, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "fp8":
            y = fp8_roundtrip(x, self.scale)
        elif self.kind == "fp8_per_token":
            y = fake_fp8_per_token(x)
        elif self.kind == "int8":
            y = fake_int8(x, self.scale)
        else:
            y = fake_nvfp4(x, self.scale)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.kind}, scale={self.scale}"


class QuantLinear(nn.Module):
    """``linear(act(x * pre_quant_scale), W)``: a dequantized weight behind the checkpoint's
    activation quantizer. ``weight``/``bias`` keep the names (and Parameters) of the layer it replaces."""

    def __init__(self, linear: nn.Linear, act: ActQuant, pre_quant_scale: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias, self.act = linear.weight, linear.bias, act
        self.register_buffer("pre_quant_scale", pre_quant_scale, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_quant_scale is not None:
            x = x * self.pre_quant_scale
        return F.linear(self.act(x), self.weight, self.bias)


@dataclass(frozen=True)
class QuantInfo:
    """What the loader dequantized (``Transformer.quant``; None for an unquantized checkpoint).

    ``algo``: the checkpoint's ``quant_algo``; ``layers``: ``(algo, count)`` of dequantized linears;
    ``activations``: ``"simulated"`` (the exported input quantizers run in the forward), ``"none"``
    (a weight-only format) or ``"weights only"`` (``quant_activations=False``);
    ``kv_cache``: ``"FP8"`` when K/V are rounded through FP8 with the exported scales, else None;
    ``producer``: the exporting tool and version; ``source``: the config file read; ``dtype``: the
    runtime dtype the weights were dequantized into.
    """

    algo: str
    layers: tuple[tuple[str, int], ...]
    activations: str
    kv_cache: str | None
    producer: str
    source: str
    dtype: str = "float32"

    def describe(self) -> str:
        n = sum(c for _, c in self.layers)
        kinds = ", ".join(f"{c} {a}" for a, c in self.layers)
        kv = f"; KV cache {self.kv_cache} (K/V rounded through FP8 with k_scale/v_scale)" if self.kv_cache else ""
        return (f"{self.algo} checkpoint ({self.producer}): {n} linear layers dequantized to {self.dtype} ({kinds}); "
                f"activations {self.activations}{kv}")

    def to_dict(self) -> dict:
        return {"algo": self.algo, "layers": dict(self.layers), "activations": self.activations,
                "kv_cache": self.kv_cache, "dtype": self.dtype, "producer": self.producer, "source": self.source}


@dataclass
class QuantPlan:
    """What :func:`install` puts into the model: per linear prefix an (ActQuant, pre_quant_scale),
    per attention prefix the FP8 (k_scale, v_scale)."""

    acts: dict[str, tuple[ActQuant, torch.Tensor | None]] = field(default_factory=dict)
    kv: dict[str, tuple[float, float]] = field(default_factory=dict)


def _linear_prefixes(tensors: dict[str, torch.Tensor]) -> list[str]:
    low = (torch.float8_e4m3fn, torch.uint8, torch.int8)
    return sorted({k[: -len(".weight_scale")] for k in tensors if k.endswith(".weight_scale")}
                  | {k[: -len(".weight")] for k, t in tensors.items() if k.endswith(".weight") and t.dtype in low})


def _dequantize_layer(tensors, prefix: str, cfg: QuantConfig, where: str, activations: bool, plan: QuantPlan) -> str:
    lq = cfg.layer(prefix)
    if lq is None:
        raise ModelFormatError(f"{where}: {prefix} has quantized tensors but {cfg.source} leaves it unquantized "
                               f"(excluded / not among the quantized layers)")
    weight_fn, act_kind = FORMATS[lq.algo]
    L = _Layer(tensors, prefix, lq, where)
    w = weight_fn(L)
    scale = L.scalar("input_scale", optional=act_kind in (None, "fp8_per_token"))
    pqs = L.take("pre_quant_scale", optional=True)
    if pqs is not None:
        pqs = pqs.float().reshape(-1)
        if pqs.numel() != w.shape[1]:
            raise L.shape_error("pre_quant_scale", pqs.shape, f"[{w.shape[1]}] (one per input feature)")
    if activations and act_kind is not None:
        if act_kind == "nvfp4" and w.shape[1] % NVFP4_BLOCK:
            raise L.fail(f"in_features {w.shape[1]} is not a multiple of the NVFP4 block {NVFP4_BLOCK}")
        plan.acts[prefix] = (ActQuant(act_kind, scale), pqs)
    elif pqs is not None:                      # no quantizer between the scale and the matmul: fold it
        w = w * pqs[None, :]
    tensors[f"{prefix}.weight"] = w
    return lq.algo


def _kv_scales(tensors, cfg: QuantConfig, where: str, plan: QuantPlan, activations: bool) -> None:
    keys = [k for k in tensors if k.endswith((".k_proj.k_scale", ".v_proj.v_scale"))]
    if cfg.kv_cache_algo is None:
        if keys:
            raise ModelFormatError(f"{where}: tensor {keys[0]} present but {cfg.source} sets no kv_cache_quant_algo")
        return
    attns = sorted({k.rsplit(".", 2)[0] for k in keys})
    if not attns:
        raise ModelFormatError(f"{where}: kv_cache_quant_algo {cfg.kv_cache_algo} but no *.k_proj.k_scale / "
                               "*.v_proj.v_scale tensors (missing scale)")
    for attn in attns:
        pair = []
        for name in ("k_proj.k_scale", "v_proj.v_scale"):
            t = tensors.pop(f"{attn}.{name}", None)
            if t is None or t.numel() != 1 or not float(t.float().reshape(())) > 0:
                raise ModelFormatError(f"{where}: {cfg.kv_cache_algo} KV cache needs a positive scalar "
                                       f"{attn}.{name}, got {None if t is None else tuple(t.shape)}")
            pair.append(float(t.float().reshape(())))
        if activations:
            plan.kv[attn] = (pair[0], pair[1])


def dequantize_checkpoint(tensors: dict[str, torch.Tensor], cfg: QuantConfig, where: str, *,
                          activations: bool = True) -> tuple[dict[str, torch.Tensor], QuantPlan, QuantInfo]:
    """Replace every quantized layer's tensors by its float32 ``weight`` (in a new dict).

    Returns the tensors, the :class:`QuantPlan` for :func:`install` (empty when ``activations`` is
    False: weights only, pre_quant_scale folded) and the :class:`QuantInfo`. Raises
    ModelFormatError naming ``where``, the tensor and the format on a missing scale, a wrong dtype or
    packed shape, or a quantization tensor no layer reads.
    """
    tensors = dict(tensors)
    plan, counts = QuantPlan(), {}
    for prefix in _linear_prefixes(tensors):
        algo = _dequantize_layer(tensors, prefix, cfg, where, activations, plan)
        counts[algo] = counts.get(algo, 0) + 1
    _kv_scales(tensors, cfg, where, plan, activations)
    left = sorted(k for k in tensors if k.endswith(QUANT_SUFFIXES))
    if left:
        raise ModelFormatError(f"{where}: quantization tensors {left[:4]}{' ...' if len(left) > 4 else ''} belong to "
                               f"no quantized layer this runtime reads ({cfg.algo} checkpoint)")
    if not counts and cfg.algo is not None:
        raise ModelFormatError(f"{where}: {cfg.source} says {cfg.algo} but no tensor is quantized (missing weight_scale)")
    acts = "simulated" if plan.acts else "none" if activations else "weights only"
    info = QuantInfo(cfg.algo or "none (KV cache only)", tuple(sorted(counts.items())), acts,
                     cfg.kv_cache_algo if activations else None, cfg.producer, cfg.source)
    return tensors, plan, info


def install(model: nn.Module, plan: QuantPlan) -> None:
    """Put the plan's activation quantizers (``QuantLinear``) and FP8 KV scales into ``model``, whose
    module names are the checkpoint's tensor prefixes."""
    for prefix, (act, pqs) in plan.acts.items():
        parent_name, _, child = prefix.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, QuantLinear(getattr(parent, child), act, pqs))
    for attn, scales in plan.kv.items():
        model.get_submodule(attn).kv_scales = scales
