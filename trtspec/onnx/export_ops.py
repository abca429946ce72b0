"""Export-side torch ops, one per plugin node, and their ONNX translations for the dynamo exporter.

Each op has the signature of its plugin node and computes the node's outputs with
:mod:`trtspec.ops` (so a traced graph is exact); :func:`translation_table` maps it, for
``torch.onnx.export(..., dynamo=True, custom_translation_table=...)``, to the custom-domain node
``trtspec::TrtSpec*`` with the ``plugin_version`` / ``plugin_namespace`` attributes TensorRT's ONNX
parser uses to find the IPluginV3 creator. ``fake_quant`` carries Model-Optimizer's fake
quantization into the graph as Q/DQ nodes (see :mod:`trtspec.onnx.qdq`).
"""
from __future__ import annotations

import functools

import torch

NAMESPACE = "trtspec"
#: Q/DQ kinds of :func:`fake_quant` -> (bound of the quantized integer / float range).
QDQ_BOUNDS = {"int8": 127.0, "fp8": 448.0, "int4": 7.0}


@torch.library.custom_op("trtspec_export::tree_mask", mutates_args=())
def tree_mask(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """parents int32 ``[B, N]`` -> packed_mask int32 ``[B, N, ceil(N/32)]``, depth int32 ``[B, N]``."""
    from trtspec import ops

    mask, depth, _, _ = ops.tree_metadata(parents.contiguous())
    return mask, depth


@tree_mask.register_fake
def _(parents):
    B, N = parents.shape
    return parents.new_empty((B, N, (N + 31) // 32)), parents.new_empty((B, N))


@torch.library.custom_op("trtspec_export::verify_greedy", mutates_args=())
def verify_greedy(tokens: torch.Tensor, parents: torch.Tensor,
                  target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As :func:`trtspec.ops.verify_greedy` with ``max_depth = N - 1`` (the node's default ``-1``):
    accepted_len int32 ``[B]``, accepted_nodes int32 ``[B, N]``, bonus_token int64 ``[B]``."""
    from trtspec import ops

    return ops.verify_greedy(tokens.contiguous(), parents.contiguous(), target_logits.contiguous())


@verify_greedy.register_fake
def _(tokens, parents, target_logits):
    B, N = tokens.shape
    return (tokens.new_empty((B,), dtype=torch.int32), tokens.new_empty((B, N), dtype=torch.int32),
            tokens.new_empty((B,), dtype=torch.int64))


@torch.library.custom_op("trtspec_export::verify_sample", mutates_args=())
def verify_sample(draft_tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                  draft_probs: torch.Tensor, seed: torch.Tensor, offset: torch.Tensor, draft_lens: torch.Tensor,
                  siblings_without_replacement: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As :func:`trtspec.ops.verify_sample` with ``max_depth = D`` (the node's ``-1``): accepted_len int32
    ``[B]``, accepted_nodes int32 ``[B, D + 1]``, bonus_token int64 ``[B]``."""
    from trtspec import ops

    return ops.verify_sample(draft_tokens.contiguous(), parents.contiguous(), target_probs.contiguous(),
                             draft_probs.contiguous(), seed, offset, bool(siblings_without_replacement), draft_lens)


@verify_sample.register_fake
def _(draft_tokens, parents, target_probs, draft_probs, seed, offset, draft_lens, siblings_without_replacement):
    B, N = parents.shape
    return (parents.new_empty((B,), dtype=torch.int32), parents.new_empty((B, N), dtype=torch.int32),
            parents.new_empty((B,), dtype=torch.int64))


@torch.library.custom_op("trtspec_export::verify_block", mutates_args=())
def verify_block(draft_tokens: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor,
                 seed: torch.Tensor, offset: torch.Tensor, draft_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`trtspec.ops.verify_block`: accepted_len int32 ``[B]``, bonus_token int64 ``[B]``."""
    from trtspec import ops

    return ops.verify_block(draft_tokens.contiguous(), target_probs.contiguous(), draft_probs.contiguous(),
                            seed, offset, draft_lens)


@verify_block.register_fake
def _(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens):
    B = target_probs.shape[0]
    return target_probs.new_empty((B,), dtype=torch.int32), target_probs.new_empty((B,), dtype=torch.int64)


@torch.library.custom_op("trtspec_export::fake_quant", mutates_args=())
def fake_quant(x: torch.Tensor, scale: torch.Tensor, kind: str, axis: int, block_size: int) -> torch.Tensor:
    """``dequantize(quantize(x, scale), scale)`` as the Q/DQ nodes of ``kind`` compute it.

    int8: round half to even, saturate to [-128, 127] (ONNX QuantizeLinear); fp8: E4M3 with
    saturation to +-448; int4: round, saturate to [-8, 7]. ``scale``: a scalar; or 1-D, one value
    per index of ``x``'s ``axis`` (per channel); or, with ``block_size``, ``x``'s shape with ``axis``
    divided by ``block_size`` (one value per block).
    """
    s = scale.to(x.dtype)
    if block_size:
        s = s.repeat_interleave(block_size, dim=axis)
    elif s.dim() == 1:
        s = s.reshape([-1 if d == axis % x.dim() else 1 for d in range(x.dim())])
    if kind == "fp8":
        return (x / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(x.dtype) * s
    lo, hi = (-128.0, 127.0) if kind == "int8" else (-8.0, 7.0)
    return torch.round(x / s).clamp(lo, hi) * s


@fake_quant.register_fake
def _(x, scale, kind, axis, block_size):
    return torch.empty_like(x)


@functools.cache
def plugin_version(name: str) -> str:
    """The plugin's current version, from its interface YAML (what TensorRT's ONNX parser asks the registry for)."""
    from trtspec.onnx_schemas import load_plugin_specs

    return load_plugin_specs()[name].version


def _plugin_attrs(name: str) -> dict:
    return {"plugin_version": plugin_version(name), "plugin_namespace": NAMESPACE}


@functools.cache
def translation_table() -> dict:
    """``{torch op overload: onnxscript function}`` for ``custom_translation_table``."""
    from onnx import TensorProto
    from onnxscript import opset18 as op
    from onnxscript.values import Opset

    ts, trt = Opset(NAMESPACE, 1), Opset("trt", 1)

    def t_tree_mask(parents):
        return ts.TrtSpecTreeMask(parents, _outputs=2, **_plugin_attrs("TrtSpecTreeMask"))

    def t_verify_greedy(tokens, parents, target_logits):
        return ts.TrtSpecVerifyGreedy(tokens, parents, target_logits, _outputs=3, **_plugin_attrs("TrtSpecVerifyGreedy"))

    # every input and attribute explicit: onnxruntime-extensions ops have a fixed arity and no defaults
    def t_verify_sample(draft_tokens, parents, target_probs, draft_probs, seed, offset, draft_lens,
                        siblings_without_replacement: int):
        return ts.TrtSpecVerifySample(draft_tokens, parents, target_probs, draft_probs, seed, offset, draft_lens,
                                      max_depth=-1, siblings_without_replacement=siblings_without_replacement,
                                      _outputs=3, **_plugin_attrs("TrtSpecVerifySample"))

    def t_verify_block(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens):
        return ts.TrtSpecVerifyBlock(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, _outputs=2,
                                     **_plugin_attrs("TrtSpecVerifyBlock"))

    def t_fake_quant(x, scale, kind: str, axis: int, block_size: int):
        if kind == "int8":
            zero = op.Cast(op.Mul(scale, op.Constant(value_float=0.0)), to=TensorProto.INT8)
            kw = {"axis": axis} if axis >= 0 else {}
            return op.DequantizeLinear(op.QuantizeLinear(x, scale, zero, **kw), scale, zero, **kw)
        if kind == "fp8":
            return trt.TRT_FP8DequantizeLinear(trt.TRT_FP8QuantizeLinear(x, scale), scale)
        return trt.DequantizeLinear(x, scale, axis=axis, block_size=block_size)

    return {torch.ops.trtspec_export.tree_mask.default: t_tree_mask,
            torch.ops.trtspec_export.verify_greedy.default: t_verify_greedy,
            torch.ops.trtspec_export.verify_sample.default: t_verify_sample,
            torch.ops.trtspec_export.verify_block.default: t_verify_block,
            torch.ops.trtspec_export.fake_quant.default: t_fake_quant}
