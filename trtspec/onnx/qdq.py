"""Model-Optimizer fake quantization carried into the exported graphs as Q/DQ nodes.

Model-Optimizer calibrates (``mtq.quantize``); its own ONNX symbolics serve only TorchScript's
exporter, and its quantizers do not trace under ``torch.export``. So :func:`to_qdq` copies a
calibrated model with every quantized ``nn.Linear`` replaced by a plain :class:`QDQLinear` holding
the calibrated scales, whose forward is the same fake quantization (pre-quant scale, input, weight,
output quantizers) written with :func:`trtspec.onnx.export_ops.fake_quant`; the translation table
turns that op into:

* int8 (``num_bits=8``): ONNX ``QuantizeLinear`` / ``DequantizeLinear``, per tensor or per channel
  (``axis``), scale ``amax / 127`` -- onnxruntime runs these;
* fp8 (``num_bits=(4, 3)``): ``trt::TRT_FP8QuantizeLinear`` / ``trt::TRT_FP8DequantizeLinear``, scale
  ``amax / 448``;
* int4 (``num_bits=4``, blocks along the input dim): weight-only ``trt::DequantizeLinear`` with
  ``axis`` and ``block_size`` and one scale ``amax / 7`` per block (ONNX's blocked-DQ layout: the
  scale has the weight's shape with ``axis`` divided by ``block_size``).

The ``trt``-domain nodes are what TensorRT's ONNX parser reads; :func:`register_trt_schemas` gives
``onnx.checker`` their OpSchemas (inputs, outputs, attributes, type constraints) for a full check.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from trtspec.onnx.export_ops import QDQ_BOUNDS, fake_quant
from trtspec.onnx.tiers import ExportError

QUANT_FORMATS = ("none", "fp8", "int8", "int4_awq")
"""Formats the graphs can carry as Q/DQ nodes: fp8 -> ``trt::TRT_FP8QuantizeLinear/DequantizeLinear``,
int8 -> ONNX QuantizeLinear/DequantizeLinear, int4_awq -> weight-only ``trt::DequantizeLinear`` (block
128). TensorRT's ONNX parser reads all three; onnxruntime runs only ``none`` and ``int8``."""


class QDQ(nn.Module):
    """One calibrated quantizer: ``fake_quant(x, scale, kind, axis, block_size)`` (see export_ops)."""

    def __init__(self, kind: str, scale: torch.Tensor, axis: int = -1, block_size: int = 0):
        super().__init__()
        self.kind, self.axis, self.block_size = kind, axis, block_size
        self.register_buffer("scale", scale.detach().float().clone())

    def forward(self, x):
        return fake_quant(x, self.scale, self.kind, self.axis, self.block_size)


def _qdq(quantizer, shape: tuple[int, ...], where: str) -> QDQ | None:
    """The :class:`QDQ` of a Model-Optimizer ``TensorQuantizer`` for a tensor of ``shape`` (None if disabled)."""
    if not quantizer.is_enabled:
        return None
    bits = quantizer.num_bits
    kind = "fp8" if bits == (4, 3) else {8: "int8", 4: "int4"}.get(bits) if not isinstance(bits, tuple) else None
    amax = quantizer.amax
    if kind is None or amax is None:
        raise ExportError(f"{where}: cannot export a {bits}-bit quantizer{'' if amax is not None else ' without a '}"
                          f"{'calibrated amax' if amax is None else ''} as Q/DQ; supported: int8, fp8 (4, 3), int4 blocks")
    scale = amax.detach().float() / QDQ_BOUNDS[kind]
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    if kind == "int4":
        block = int((quantizer.block_sizes or {}).get(-1) or 0)
        if len(shape) != 2 or not block or shape[-1] % block:
            raise ExportError(f"{where}: int4 export needs a 2-D weight with blocks along its last dim, got "
                              f"shape {shape}, block {block}")
        return QDQ(kind, scale.reshape(shape[0], shape[1] // block), axis=1, block_size=block)
    if scale.numel() == 1:
        return QDQ(kind, scale.reshape(()))
    axis = next(i for i, n in enumerate(amax.shape) if n == amax.numel())   # per channel along that axis
    return QDQ(kind, scale.reshape(-1), axis=axis)


class QDQLinear(nn.Module):
    """A fake-quantized linear layer: ``out_q(linear(in_q(x * pre_quant_scale), w_q(weight)) + bias)``."""

    def __init__(self, linear, where: str):
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().clone(), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        pqs = linear.input_quantizer.pre_quant_scale
        self.register_buffer("pre_quant_scale", None if pqs is None else pqs.detach().float().clone())
        x_shape = (linear.in_features,)
        self.input_q = _qdq(linear.input_quantizer, x_shape, f"{where}.input_quantizer")
        self.weight_q = _qdq(linear.weight_quantizer, tuple(self.weight.shape), f"{where}.weight_quantizer")
        self.output_q = _qdq(linear.output_quantizer, (linear.out_features,), f"{where}.output_quantizer")

    def forward(self, x):
        if self.pre_quant_scale is not None:
            x = x * self.pre_quant_scale
        if self.input_q is not None:
            x = self.input_q(x)
        w = self.weight if self.weight_q is None else self.weight_q(self.weight)
        y = torch.nn.functional.linear(x, w, self.bias)
        return y if self.output_q is None else self.output_q(y)


def to_qdq(model: nn.Module) -> nn.Module:
    """A copy of a Model-Optimizer-calibrated ``model`` whose quantized linears are :class:`QDQLinear`.

    Any other module with an enabled quantizer raises :class:`ExportError` naming it.
    """
    from modelopt.torch.quantization.nn import TensorQuantizer

    out = copy.deepcopy(model)
    for name, module in list(out.named_modules()):
        quantizers = [m for m in module.children() if isinstance(m, TensorQuantizer)]
        if not quantizers:
            continue
        if isinstance(module, nn.Linear) and hasattr(module, "weight_quantizer"):
            parent, _, leaf = name.rpartition(".")
            setattr(out.get_submodule(parent) if parent else out, leaf, QDQLinear(module, name))
        elif any(q.is_enabled for q in quantizers):
            raise ExportError(f"{name} ({type(module).__name__}) has an enabled quantizer; only linear layers "
                              "export as Q/DQ")
    return out


def _modelopt_config(quant: str):
    import modelopt.torch.quantization as mtq

    return {"fp8": mtq.FP8_DEFAULT_CFG, "int8": mtq.INT8_DEFAULT_CFG, "int4_awq": mtq.INT4_AWQ_CFG}[quant]


def quantize_for_export(model, quant: str, calib: list[list[int]] | None = None, calib_batches: int = 4,
                        seed: int = 0) -> None:
    """Fake-quantize ``model``'s linear layers in place with Model-Optimizer so the export carries Q/DQ.

    Calibration runs the functional decoder over ``calib`` (token-id sequences, e.g. the bundle's
    calibration texts from :func:`trtspec.builder.calib.encode_batches`); without it, over
    ``calib_batches`` batches of random token ids drawn with ``seed`` (the graph structure is the
    same; the scales are then not those of text).
    """
    import modelopt.torch.quantization as mtq
    import torch

    from trtspec.onnx.graphs import DraftStep

    if quant not in QUANT_FORMATS or quant == "none":
        raise ValueError(f"quant must be one of {QUANT_FORMATS[1:]}, got {quant!r}")
    if calib is not None and (not calib or any(not s for s in calib)):
        raise ValueError("calib must be a non-empty list of non-empty token-id sequences")
    step, cfg = DraftStep(model), model.config
    g = torch.Generator().manual_seed(seed)
    if calib is None:
        batches = [torch.randint(0, cfg.vocab_size, (2, 16), generator=g) for _ in range(calib_batches)]
    else:
        batches = [torch.tensor([ids[:cfg.max_position_embeddings]], dtype=torch.int64) for ids in calib]

    def forward_loop(_):
        for toks in batches:
            kv = torch.zeros(cfg.num_hidden_layers, toks.shape[0], cfg.num_key_value_heads, 1, cfg.head_dim)
            step(toks, torch.zeros(toks.shape[0], dtype=torch.long), kv, kv)

    with torch.no_grad():
        mtq.quantize(model, _modelopt_config(quant), forward_loop)


def _trt_schemas():
    from onnx import helper
    from onnx.defs import OpSchema

    floats = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
    P = OpSchema.FormalParameter

    def attr(name, value, doc):
        return OpSchema.Attribute(name, helper.make_attribute(name, value), doc)

    q8 = OpSchema("TRT_FP8QuantizeLinear", "trt", 1, "FP8 E4M3 quantization y = saturate(x / scale); "
                  "the E4M3 bytes are carried as uint8 (TensorRT's ONNX parser reads them as FP8).",
                  inputs=[P("x", "T", "values to quantize"), P("scale", "T", "scalar scale")],
                  outputs=[P("y", "tensor(uint8)", "E4M3 codes")],
                  type_constraints=[("T", floats, "float types")])
    dq8 = OpSchema("TRT_FP8DequantizeLinear", "trt", 1, "FP8 E4M3 dequantization y = x * scale.",
                   inputs=[P("x", "tensor(uint8)", "E4M3 codes"), P("scale", "T", "scalar scale")],
                   outputs=[P("y", "T", "dequantized values")],
                   type_constraints=[("T", floats, "float types")])
    dq4 = OpSchema("DequantizeLinear", "trt", 1, "Blocked INT4 weight dequantization (Model-Optimizer's "
                   "weight-only form): y = x quantized to [-8, 7] in blocks of block_size along axis, times scale.",
                   inputs=[P("x", "T", "weights"), P("scale", "T", "one scale per block")],
                   outputs=[P("y", "T", "dequantized weights")],
                   type_constraints=[("T", floats, "float types")],
                   attributes=[attr("axis", 0, "blocked axis"), attr("block_size", 128, "elements per block")])
    return q8, dq8, dq4


def register_trt_schemas() -> None:
    """Register the ``trt``-domain Q/DQ OpSchemas with ONNX (idempotent).

    ``onnx.reference`` (imported by onnxscript) indexes all schemas by bare name once, on import,
    and refuses two ops of one name; ``trt::DequantizeLinear`` shares its name with the standard op,
    so that index is built first.
    """
    import onnx.defs
    import onnx.reference.op_run  # noqa: F401  (see above)

    for schema in _trt_schemas():
        if not onnx.defs.has(schema.name, 1, "trt"):
            onnx.defs.register_schema(schema)
