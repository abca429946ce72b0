"""Stage 3 of ``trtspec build``: post-training quantization with NVIDIA Model-Optimizer.

``--quant`` -> Model-Optimizer config (``modelopt.torch.quantization``, 0.47):

==============  ==========================  ================================================
--quant         config                      exported ``quant_algo`` (unified HF checkpoint)
==============  ==========================  ================================================
fp8             FP8_DEFAULT_CFG             FP8: F8_E4M3 weights, F32 per-tensor scales
nvfp4           NVFP4_DEFAULT_CFG           NVFP4: packed E2M1 weights, F8_E4M3 scales / 16
w4a16_nvfp4     W4A16_NVFP4_CFG             W4A16_NVFP4: NVFP4 weights, 16-bit activations
int4_awq        INT4_AWQ_CFG                W4A16_AWQ: U8-packed int4, group 128
w4a8_awq        W4A8_AWQ_BETA_CFG           W4A8_AWQ: int4 weights, FP8 activations
int8_sq         INT8_SMOOTHQUANT_CFG        W8A8_SQ_PER_CHANNEL: int8 weights and activations
==============  ==========================  ================================================

``--kv-cache-quant fp8`` adds the ``FP8_KV_CFG`` quantizers (``*[kv]_bmm_quantizer``), which the
export records as ``kv_cache_quant_algo: FP8``. NVFP4_AWQ_* configs are not offered: their AWQ
search runs the NVFP4 fake-quant forward, which needs CUDA.

A target with MTP layers in its checkpoint (DeepSeek-V3 layout) is quantized without them (transformers does
not build them); :mod:`trtspec.builder.mtp_layers` copies them back unquantized into the export and excludes
them, and for the NVFP4 formats leaves MLA's latent projections unquantized, as NVIDIA's DeepSeek NVFP4
checkpoints do.

On CPU, calibration works for every format above; the fake-quant forward *after* calibration
works for all but the NVFP4 formats (Model-Optimizer: "amax must be a CUDA tensor for dynamic block
quantization"), so the post-quantization check is skipped for them on CPU and says so.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

MODELOPT_CONFIGS: dict[str, str] = {
    "fp8": "FP8_DEFAULT_CFG",
    "nvfp4": "NVFP4_DEFAULT_CFG",
    "w4a16_nvfp4": "W4A16_NVFP4_CFG",
    "int4_awq": "INT4_AWQ_CFG",
    "w4a8_awq": "W4A8_AWQ_BETA_CFG",
    "int8_sq": "INT8_SMOOTHQUANT_CFG",
}
#: ``quantization_config.quant_algo`` Model-Optimizer writes for each format.
EXPORTED_QUANT_ALGO: dict[str, str] = {
    "fp8": "FP8",
    "nvfp4": "NVFP4",
    "w4a16_nvfp4": "W4A16_NVFP4",
    "int4_awq": "W4A16_AWQ",
    "w4a8_awq": "W4A8_AWQ",
    "int8_sq": "W8A8_SQ_PER_CHANNEL",
}
#: formats whose fake-quant forward needs CUDA (calibration and export still work on CPU).
CUDA_ONLY_FORWARD = frozenset({"nvfp4", "w4a16_nvfp4"})


def check_quant(quant: str, arg: str = "--quant") -> str:
    """Return ``quant`` if trtspec knows it, else raise naming ``arg`` and the known formats."""
    if quant != "none" and quant not in MODELOPT_CONFIGS:
        raise ValueError(f"{arg} {quant!r}: unknown format; expected one of none, {', '.join(MODELOPT_CONFIGS)}")
    return quant


def modelopt_config(quant: str, kv_cache_quant: str = "none") -> dict:
    """The Model-Optimizer quantization config for ``quant`` (+ FP8 KV cache), as a fresh dict."""
    import modelopt.torch.quantization as mtq

    check_quant(quant)
    if kv_cache_quant not in ("none", "fp8"):
        raise ValueError(f"--kv-cache-quant {kv_cache_quant!r}: expected none or fp8")
    if quant == "none":
        cfg = {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"}
    else:
        cfg = copy.deepcopy(getattr(mtq, MODELOPT_CONFIGS[quant]))
    if kv_cache_quant == "fp8":
        kv = copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])
        if isinstance(cfg["quant_cfg"], list):
            cfg["quant_cfg"] = list(cfg["quant_cfg"]) + list(kv)
        else:  # dict-style configs of older Model-Optimizer releases
            cfg["quant_cfg"] = {**cfg["quant_cfg"], **kv}
    return cfg


@dataclass(frozen=True)
class QuantReport:
    """What one quantization did: seconds, calibration batches, and the post-quant check."""

    quant: str
    kv_cache_quant: str
    seconds: float
    calib_batches: int
    top1_agreement: Optional[float]  # fraction of positions whose argmax matches the unquantized model
    check: str  # one line for the summary


def load_model(path: Path, device: str):
    """Load a causal LM for calibration in its checkpoint dtype, with ``architectures`` kept."""
    import json

    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()

    cfg = json.loads((Path(path) / "config.json").read_text())
    dtype_name = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    dtype = getattr(torch, str(dtype_name).replace("torch.", ""), torch.float32)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device).eval()
    if not getattr(model.config, "architectures", None):
        model.config.architectures = cfg.get("architectures") or [type(model).__name__]
    return model


def quantize_and_export(src: Path, quant: str, kv_cache_quant: str, batches: list[list[int]], device: str,
                        export_dir: Path, progress: Callable[[], None] | None = None) -> QuantReport:
    """Calibrate ``src`` on ``batches`` with the ``quant`` config and write a unified HF checkpoint
    (``config.json`` with ``quantization_config``, ``hf_quant_config.json``, safetensors) to ``export_dir``."""
    import torch

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import modelopt.torch.quantization as mtq
        from modelopt.torch.export import export_hf_checkpoint

    from transformers.utils import logging as hf_logging

    from trtspec.builder.calib import forward_loop
    from trtspec.builder.mtp_layers import quant_cfg_overrides, reattach

    hf_logging.disable_progress_bar()
    model = load_model(src, device)
    vocab = int(model.config.vocab_size)
    probe = torch.tensor([batches[0]], device=device).clamp_(0, vocab - 1)
    with torch.no_grad():
        ref = model(input_ids=probe).logits.argmax(-1)
    loop = forward_loop(batches, device, vocab, progress)
    source_config = json.loads((Path(src) / "config.json").read_text())
    cfg = modelopt_config(quant, kv_cache_quant)
    cfg["quant_cfg"] = list(cfg["quant_cfg"]) + quant_cfg_overrides(source_config, quant)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mtq.quantize(model, cfg, loop)
    agreement = None
    if device == "cpu" and quant in CUDA_ONLY_FORWARD:
        check = f"{quant} fake-quant forward needs CUDA: post-quant check skipped on CPU"
    else:
        with torch.no_grad():
            out = model(input_ids=probe).logits
        if not torch.isfinite(out).all():
            raise RuntimeError(f"--quant {quant}: the quantized model produces non-finite logits")
        agreement = float((out.argmax(-1) == ref).float().mean())
        check = f"top-1 agreement with the unquantized model {agreement:.1%}"
    export_dir = Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_hf_checkpoint(model, dtype=model.dtype, export_dir=str(export_dir))
    del model
    reattach(Path(src), export_dir, source_config)   # MTP layers: dropped by transformers, kept unquantized
    return QuantReport(quant, kv_cache_quant, time.perf_counter() - t0, len(batches), agreement, check)
