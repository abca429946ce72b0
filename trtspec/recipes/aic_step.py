"""aiconfigurator-core's own whole-step estimate of a plain decode step (the baseline the op-by-op model is judged
beside in ``benchmarks/bench_fidelity.py``).

trtspec prices a decode step op class by op class from aiconfigurator-core's kernel tables (``trtspec.recipes.pricing``)
and adds the engine's fitted fixed costs. aiconfigurator-core also composes a whole generation step itself: its
backend (``sdk.backends.factory.get_backend(engine)``) runs the model's generation op list
(``sdk.models.get_model``: embedding, norms, GEMMs, attention, MoE with its dispatch, all-reduces, logits) through its
compiled engine, ``run_static_latency_only(model, db, RuntimeConfig(batch_size=B, isl=context, osl=2),
mode="static_gen")`` -- one decode step of B requests at ``context`` tokens, in milliseconds. That composition is
NVIDIA's, calibrated against its own runs; it holds no host-side cost per step, so the comparison adds the same
LOSO-fitted ``step_us`` per engine to it as to the op-by-op kernels.

``whole_step(setup)`` -> seconds, or raises ``RecipeError`` saying why a case has no such estimate (a model without a
config in the package's ``model_configs/``, a quantization it does not model, ...). Models that trtspec ships itself
are mapped to the package's config of the same architecture (``SAME_ARCHITECTURE``).
"""
from __future__ import annotations

import contextlib
import functools
import logging

from trtspec.recipes.errors import RecipeError

# trtspec built-in model -> an aiconfigurator-core model_configs/ id of the same architecture (same dims and counts)
SAME_ARCHITECTURE = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.3-70b": "meta-llama/Meta-Llama-3.1-70B", "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B",
    "qwen3-8b": "Qwen/Qwen3-8B", "qwen3-32b": "Qwen/Qwen3-32B", "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-coder-30b-a3b": "Qwen/Qwen3-30B-A3B", "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1", "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2", "deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash",
    "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro", "minimax-m3": "MiniMaxAI/MiniMax-M3",
    "qwen3.5-397b-a17b": "Qwen/Qwen3.5-397B-A17B", "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
}
# trtspec --quant base -> (GEMM, MoE) quant mode names of aiconfigurator-core
_QUANT = {"none": ("bfloat16", "bfloat16"), "bf16": ("bfloat16", "bfloat16"), "fp16": ("bfloat16", "bfloat16"),
          "fp8": ("fp8", "fp8"), "fp4": ("nvfp4", "nvfp4"), "nvfp4": ("nvfp4", "nvfp4"),
          "int4_awq": ("int4_wo", "int4_wo")}


def config_id(arch) -> str:
    """The aiconfigurator-core model id of ``arch`` (a ``model_configs/`` file stem or a built-in's equivalent)."""
    from pathlib import Path

    if arch.name in SAME_ARCHITECTURE:
        return SAME_ARCHITECTURE[arch.name]
    stem = Path(arch.name).name
    if stem.endswith("_config") and "--" in stem:
        return stem[: -len("_config")].replace("--", "/")
    raise RecipeError(f"model {arch.name!r}: no aiconfigurator-core config of the same architecture")


@contextlib.contextmanager
def _quiet():
    log = logging.getLogger("aiconfigurator_core")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


_DIRS: dict = {}


def _model_path(model_id: str) -> str:
    """What the package's ``get_model`` reads for ``model_id``: the id itself when the package ships it among its
    default models, else a temporary directory holding the package's own ``model_configs/`` copy as
    ``config.json`` (the package would otherwise try to download it)."""
    import importlib.resources
    import shutil
    import tempfile
    from pathlib import Path

    from aiconfigurator_core.sdk.common import DefaultHFModels

    if model_id in DefaultHFModels:
        return model_id
    if model_id not in _DIRS:
        stem = model_id.replace("/", "--")
        configs = Path(str(importlib.resources.files("aiconfigurator_core") / "model_configs"))
        src = configs / f"{stem}_config.json"
        if not src.is_file():
            raise RecipeError(f"model {model_id!r}: not in aiconfigurator-core's model_configs/")
        tmp = tempfile.TemporaryDirectory(prefix="trtspec-aic-")
        shutil.copy(src, Path(tmp.name) / "config.json")
        quant = configs / f"{stem}_hf_quant_config.json"
        if quant.is_file():
            shutil.copy(quant, Path(tmp.name) / "hf_quant_config.json")
        _DIRS[model_id] = tmp  # removed when the process exits
    return _DIRS[model_id].name


@functools.lru_cache(maxsize=None)
def _model(model_id: str, engine: str, tp: int, ep: int, quant: str, kv: str):
    from aiconfigurator_core.sdk import common, config
    from aiconfigurator_core.sdk.models import get_model

    gemm, moe = _QUANT[quant]
    mc = config.ModelConfig(tp_size=tp, gemm_quant_mode=getattr(common.GEMMQuantMode, gemm),
                            moe_quant_mode=getattr(common.MoEQuantMode, moe),
                            kvcache_quant_mode=getattr(common.KVCacheQuantMode, kv),
                            fmha_quant_mode=common.FMHAQuantMode.bfloat16, moe_tp_size=tp // ep, moe_ep_size=ep)
    with _quiet():
        return get_model(_model_path(model_id), mc, engine)


def whole_step(setup) -> float:
    """aiconfigurator-core's decode-step latency (seconds) of the case's model, GPU, engine and parallelism at its
    batch and context (see the module docstring)."""
    from trtspec.recipes.perfdb import PerfDBUnavailable, open_db

    req = setup.request
    base = req.quant.split(":")[0]
    if base not in _QUANT:
        raise RecipeError(f"quant {req.quant!r}: no aiconfigurator-core quant mode mapped")
    if not req.gpu.perf_db_system:
        raise RecipeError(f"gpu {req.gpu.name!r}: no aiconfigurator-core system")
    from trtspec.recipes.engines import load_engine
    from trtspec.recipes.costmodel import Precision

    engine = load_engine(req.engine)
    try:
        db = open_db(req.gpu.perf_db_system, engine.name, engine.perf_db_version_for(req.gpu.perf_db_system))
    except PerfDBUnavailable as exc:
        raise RecipeError(str(exc)) from exc
    kv = "fp8" if Precision.of(req.quant).kv_bytes <= 1.0 else "bfloat16"
    from aiconfigurator_core.sdk import config
    from aiconfigurator_core.sdk.backends.factory import get_backend

    try:
        with _quiet():
            model = _model(config_id(req.model), engine.name, req.tp, req.ep, base, kv)
            ms = get_backend(engine.name).run_static_latency_only(
                model, db.database, config.RuntimeConfig(batch_size=setup.case.batch,
                                                                  isl=max(1, req.context), osl=2),
                mode="static_gen")
    except RecipeError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the package raises many kinds for shapes it does not model
        raise RecipeError(f"aiconfigurator-core has no whole-step estimate here: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160] if str(exc) else ''}") from exc
    if not ms > 0:
        raise RecipeError("aiconfigurator-core returned no latency")
    return ms * 1e-3
