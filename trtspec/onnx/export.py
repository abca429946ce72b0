"""Export the target verification step and the draft step to ONNX with trtspec plugin nodes.

The graphs (:mod:`trtspec.onnx.graphs`) take the batch and the past length as dynamic axes and
the tree size ``N`` as fixed: TensorRT plans are built for a maximum tree anyway, and the plugin
nodes' output shapes (``[B, max_depth + 1]``) depend on it. The custom nodes are in domain
``trtspec`` with ``plugin_version`` / ``plugin_namespace`` attributes, which is how TensorRT's
ONNX parser finds the IPluginV3 creators of ``libtrtspec_plugins.so``.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

OPSET = 18
"""ONNX opset of the exported graphs (BitwiseAnd needs >= 18)."""
FORMAT = "trtspec.onnx_bundle/v1"


class ExportError(ValueError):
    """The model or the requested shapes cannot be exported."""


@dataclass(frozen=True)
class ExportSpec:
    """What was exported, written next to the graphs as ``onnx_spec.json``.

    max_nodes: tree size N of the target graph (root included), 2..4096.
    max_depth: bound on the accepted path's depth (for a chain, N - 1).
    """

    max_nodes: int
    max_depth: int
    num_layers: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    draft_num_layers: int
    draft_kv_heads: int
    draft_head_dim: int
    quant: str = "none"
    opset: int = OPSET
    format: str = FORMAT

    def __post_init__(self):
        if not 2 <= self.max_nodes <= 4096:
            raise ExportError(f"max_nodes must be in 2..4096 (the root plus at least one draft), got {self.max_nodes}")
        if not 1 <= self.max_depth <= self.max_nodes - 1:
            raise ExportError(f"max_depth must be in 1..max_nodes-1={self.max_nodes - 1}, got {self.max_depth}")


def _export(module, args, path: Path, input_names, output_names, dynamic_axes) -> None:
    import torch

    from trtspec.onnx.graphs import register_symbolics

    register_symbolics(OPSET)
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes,
                          custom_opsets={"trtspec": 1}, do_constant_folding=True)


def check_graph(path: str | Path) -> None:
    """``onnx.checker`` with ``full_check`` (shape inference included), the trtspec schemas registered."""
    import onnx

    from trtspec.onnx_schemas import register_schemas

    register_schemas()
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


QUANT_FORMATS = ("none", "fp8", "int8", "int4_awq")
"""Weight/activation formats the graphs can carry as Q/DQ nodes (Model-Optimizer fake quantization):
fp8 -> ``trt::TRT_FP8QuantizeLinear/DequantizeLinear``, int8 -> ONNX QuantizeLinear/DequantizeLinear,
int4_awq -> weight-only ``trt::DequantizeLinear`` (block 128). TensorRT's ONNX parser reads all three;
onnxruntime runs only ``none`` and ``int8``."""


def _modelopt_config(quant: str):
    import modelopt.torch.quantization as mtq

    return {"fp8": mtq.FP8_DEFAULT_CFG, "int8": mtq.INT8_DEFAULT_CFG, "int4_awq": mtq.INT4_AWQ_CFG}[quant]


def quantize_for_export(model, quant: str, calib_batches: int = 4, seed: int = 0) -> None:
    """Fake-quantize ``model``'s linear layers in place with Model-Optimizer so the export carries Q/DQ.

    Calibration runs the functional decoder on ``calib_batches`` batches of random token ids
    (a graph-structure calibration: use ``trtspec build --backend tensorrt`` for data calibration).
    """
    import torch

    from trtspec.onnx.graphs import DraftStep

    import modelopt.torch.quantization as mtq

    step, cfg = DraftStep(model), model.config
    g = torch.Generator().manual_seed(seed)

    def forward_loop(_):
        for _ in range(calib_batches):
            toks = torch.randint(0, cfg.vocab_size, (2, 16), generator=g)
            kv = torch.zeros(cfg.num_hidden_layers, 2, cfg.num_key_value_heads, 1, cfg.head_dim)
            step(toks, torch.zeros(2, dtype=torch.long), kv, kv)

    with torch.no_grad():
        mtq.quantize(model, _modelopt_config(quant), forward_loop)


def export_step_graphs(target_dir: str | Path, draft_dir: str | Path, out_dir: str | Path, *,
                       max_nodes: int = 5, max_depth: int | None = None, quant: str = "none") -> ExportSpec:
    """Write ``target_verify.onnx``, ``draft_step.onnx`` and ``onnx_spec.json`` into ``out_dir``.

    Args:
        target_dir, draft_dir: Hugging Face directories of a supported Llama-family pair.
        max_nodes: the tree size N (default 5: a chain of 4 drafts).
        max_depth: bound on the accepted depth (default ``max_nodes - 1``, a chain).
        quant: one of :data:`QUANT_FORMATS`; not ``none``: both models' linear layers export as Q/DQ.
    """
    import torch

    from trtspec.onnx.graphs import DraftStep, TargetVerifyStep
    from trtspec.runtime.config import ModelFormatError
    from trtspec.runtime.models import load_model

    max_depth = max_nodes - 1 if max_depth is None else max_depth
    if quant not in QUANT_FORMATS:
        raise ExportError(f"quant must be one of {QUANT_FORMATS}, got {quant!r}")
    try:
        target = load_model(target_dir)
        draft = load_model(draft_dir)
    except ModelFormatError as e:
        raise ExportError(f"cannot export: {e}") from e
    tc, dc = target.config, draft.config
    if tc.vocab_size != dc.vocab_size:
        raise ExportError(f"draft vocab_size {dc.vocab_size} differs from the target's {tc.vocab_size}")
    spec = ExportSpec(max_nodes=max_nodes, max_depth=max_depth, num_layers=tc.num_hidden_layers,
                      kv_heads=tc.num_key_value_heads, head_dim=tc.head_dim, vocab_size=tc.vocab_size,
                      draft_num_layers=dc.num_hidden_layers, draft_kv_heads=dc.num_key_value_heads,
                      draft_head_dim=dc.head_dim, quant=quant)
    if quant != "none":
        if quant == "int4_awq" and (tc.hidden_size % 128 or tc.intermediate_size % 128):
            raise ExportError(f"int4_awq needs hidden and intermediate sizes that are multiples of 128, got "
                              f"{tc.hidden_size} and {tc.intermediate_size}")
        quantize_for_export(target, quant)
        quantize_for_export(draft, quant)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        B, P = 2, 3
        chain = torch.tensor([[-1] + list(range(max_nodes - 1))] * B, dtype=torch.int32)
        kv = torch.zeros(tc.num_hidden_layers, B, tc.num_key_value_heads, P, tc.head_dim)
        _export(TargetVerifyStep(target, max_depth),
                (torch.zeros(B, max_nodes, dtype=torch.int64), chain, torch.full((B,), P, dtype=torch.int64), kv, kv),
                tmp / "target_verify.onnx",
                ["tokens", "parents", "cache_lens", "past_k", "past_v"],
                ["accepted_len", "accepted_nodes", "bonus_token", "new_k", "new_v"],
                {"tokens": {0: "B"}, "parents": {0: "B"}, "cache_lens": {0: "B"},
                 "past_k": {1: "B", 3: "P"}, "past_v": {1: "B", 3: "P"},
                 "accepted_len": {0: "B"}, "accepted_nodes": {0: "B"}, "bonus_token": {0: "B"},
                 "new_k": {1: "B"}, "new_v": {1: "B"}})
        dkv = torch.zeros(dc.num_hidden_layers, B, dc.num_key_value_heads, P, dc.head_dim)
        _export(DraftStep(draft), (torch.zeros(B, 2, dtype=torch.int64), torch.full((B,), P, dtype=torch.int64), dkv, dkv),
                tmp / "draft_step.onnx", ["tokens", "cache_lens", "past_k", "past_v"], ["logits", "new_k", "new_v"],
                {"tokens": {0: "B", 1: "T"}, "cache_lens": {0: "B"}, "past_k": {1: "B", 3: "P"},
                 "past_v": {1: "B", 3: "P"}, "logits": {0: "B"}, "new_k": {1: "B", 3: "T"}, "new_v": {1: "B", 3: "T"}})
        for name in ("target_verify.onnx", "draft_step.onnx"):
            check_graph(tmp / name)
        (tmp / "onnx_spec.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
        if out_dir.exists():
            import shutil

            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return spec
