"""Feed a bundle's ``llm_api.yaml`` through TensorRT-LLM's own LLM-API code, as ``trtllm-serve ./target --config
llm_api.yaml`` does, and print what it resolved.

Run inside the TensorRT-LLM environment made by ``tools/engines/setup.sh trtllm`` (this file imports nothing from
trtspec):

    python check_trtllm.py --src ~/.cache/trtspec/engines/trtllm-main-0004396/src --gpu h200 --out r.json BUNDLE...

TensorRT-LLM does not install here (its wheels are not reachable), so what runs is its Python source as fetched into
``--src`` by ``tools/engines/trtllm_sources.py``: ``tensorrt_llm/llmapi/llm_args.py`` whole, and the class
``SpeculativeDecodingMode`` of ``tensorrt_llm/_torch/speculative/interface.py`` (the rest of that module drives CUDA
kernels). Steps, all TensorRT-LLM's code: ``update_llm_args_with_extra_dict`` merges the YAML into the arguments the
``trtllm-serve`` command line gives by default, ``TorchLlmArgs(**args)`` validates them (every field, the
``*DecodingConfig`` validators, ``validate_speculative_config`` with its draft ``config.json`` reads and CUDA-graph
key merge), then ``warn_on_unstable_feature_usage``. The result is one JSON object per bundle: ``accepted``, the
resolved ``speculative_config`` and top-level fields, the mode's predicates (``support_dynamic_draft_len``,
``use_one_engine``), and the engine's warnings.

Replaced, each printed on stderr as ``stub: ...``: the native bindings (``tensorrt_llm.bindings.*``), the modules
``llm_args.py`` imports only for field types, telemetry or non-speculative features (listed in ``STUBBED``), the
``trtllm-serve`` command line (its defaults are given), and the ``torch.cuda`` device queries, answered for ``--gpu``.
"""
from __future__ import annotations

import argparse
import enum
import json
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any, Optional, Type

STUBS: list[str] = []
#: compute capability the device queries answer with, per GPU name (--gpu)
CAPABILITY = {"h100": (9, 0), "h200": (9, 0), "b200": (10, 0), "a100": (8, 0)}
GPUS_PER_NODE = 8
INTERFACE_CLASS = "interface_SpeculativeDecodingMode.py"


def stub(what: str) -> None:
    STUBS.append(what)
    print(f"stub: {what}", file=sys.stderr, flush=True)


def _module(name: str, why: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    stub(f"{name} ({why}): {', '.join(sorted(attrs)) or 'empty'}")
    return mod


def _package(name: str, path: Optional[Path]) -> None:
    """A package whose real ``__init__`` is not run (it loads the whole engine); its submodules come from ``path``."""
    mod = types.ModuleType(name)
    mod.__path__ = [str(path)] if path is not None else []
    sys.modules[name] = mod


class _Native:
    """A C++ class of the native bindings: no members, so the PybindMirror field checks compare nothing."""

    __members__: dict = {}

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _native(name: str) -> type:
    return type(name, (_Native,), {"__members__": {}})


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


WARNINGS = _Warnings()


def install_stubs(src: Path, gpu: str) -> None:
    """Everything ``llm_args.py`` imports that is not in ``src``, and the device queries."""
    import torch
    from pydantic import BaseModel, ConfigDict

    cap = CAPABILITY[gpu]
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: GPUS_PER_NODE
    torch.cuda.get_device_capability = lambda *a, **k: cap
    stub(f"torch.cuda.is_available/device_count/get_device_capability -> True, {GPUS_PER_NODE}, {cap} ({gpu})")
    for pkg, sub in (("tensorrt_llm", "tensorrt_llm"), ("tensorrt_llm.llmapi", "tensorrt_llm/llmapi"),
                     ("tensorrt_llm._torch", None), ("tensorrt_llm._torch.speculative", None),
                     ("tensorrt_llm._torch.peft", None), ("tensorrt_llm._torch.peft.lora", None),
                     ("tensorrt_llm.bindings", None), ("tensorrt_llm.bindings.internal", None),
                     ("tensorrt_llm.models", None), ("tensorrt_llm.usage", None)):
        _package(pkg, src / sub if sub else None)
    logger = logging.getLogger("tensorrt_llm")
    logger.setLevel(logging.INFO)
    logger.addHandler(WARNINGS)
    _module("tensorrt_llm.logger", "logging.Logger 'tensorrt_llm'; warnings collected", logger=logger)
    executor = {n: _native(n) for n in (
        "BatchingType", "CacheTransceiverBackendType", "CacheTransceiverConfig", "CapacitySchedulerPolicy",
        "ContextChunkingPolicy", "DecodingConfig", "DynamicBatchConfig", "ExtendedRuntimePerfKnobConfig",
        "KvCacheConfig", "PeftCacheConfig", "SchedulerConfig")}
    _module("tensorrt_llm.bindings.executor", "native C++ bindings, memberless", **executor)
    _module("tensorrt_llm.bindings.internal.algorithms", "native", AgentTreeConfig=_native("AgentTreeConfig"))
    _module("tensorrt_llm.bindings.internal.batch_manager", "native enum",
            LinearCacheType=enum.Enum("LinearCacheType", {"RECURRENT_STATES": -1}))
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    _module("tensorrt_llm._utils", "imports the native bindings; answered for the GPU",
            _str_to_torch_dtype_dict=dtypes, is_sm_100f=lambda: cap[0] == 10, mpi_rank=lambda: 0,
            prefer_pinned=lambda: True, get_sm_version=lambda: cap[0] * 10 + cap[1])
    _module("tensorrt_llm._torch.peft.lora.config", "LoRA field type; no LoRA in a bundle",
            LoraConfig=type("LoraConfig", (), {}), get_default_trtllm_modules_to_hf_modules=lambda: {})
    _module("tensorrt_llm.mapping", "mapping.py not fetched; built only by to_mapping(), which validation never calls",
            CpType=enum.Enum("CpType", ["ULYSSES", "STAR", "RING", "HELIX"]), Mapping=type("Mapping", (), {}))
    quant = type("QuantConfig", (), {"kv_cache_quant_algo": None})
    _module("tensorrt_llm.models.modeling_utils", "quantization types, imports TensorRT",
            QuantAlgo=enum.Enum("QuantAlgo", ["FP8", "NVFP4"]), QuantConfig=quant)
    _module("tensorrt_llm.sampling_params", "type name only",
            BatchedLogitsProcessor=type("BatchedLogitsProcessor", (), {}))
    _module("tensorrt_llm.tokenizer", "custom tokenizer aliases; none used", TOKENIZER_ALIASES={})
    _module("tensorrt_llm.usage.config", "telemetry", **_telemetry(BaseModel, ConfigDict))
    _module("tensorrt_llm.llmapi.tokenizer", "tokenizer loading; the bundle's tokenizer is not loaded",
            TokenizerBase=type("TokenizerBase", (), {}), tokenizer_factory=lambda *a, **k: None)

    class StrictBaseModel(BaseModel):
        model_config = ConfigDict(extra="forbid")

    _module("tensorrt_llm.llmapi.utils", "utils.py not fetched: StrictBaseModel = BaseModel with extra='forbid'",
            StrictBaseModel=StrictBaseModel, generate_api_docs_as_docstring=lambda *a, **k: "",
            get_type_repr=lambda cls: getattr(cls, "__name__", str(cls)))
    _interface(src, cap)


def _telemetry(BaseModel, ConfigDict) -> dict:
    class TelemetryField:
        def __init__(self, values=()):
            self.values = list(values)

        @classmethod
        def categorical(cls, *values):
            return cls(values)

        def as_json_schema_extra(self):
            return {"kind": "categorical", "values": self.values}

    class TelemetryConfig(BaseModel):
        model_config = ConfigDict(extra="allow")

    return {"TelemetryField": TelemetryField, "TelemetryConfig": TelemetryConfig,
            "UsageContext": enum.Enum("UsageContext", ["UNKNOWN", "CLI_SERVE"])}


def _interface(src: Path, cap: tuple) -> None:
    """``tensorrt_llm._torch.speculative.interface`` with its ``SpeculativeDecodingMode`` class as fetched."""
    path = src / INTERFACE_CLASS
    names: dict[str, Any] = {"IntEnum": enum.IntEnum, "auto": enum.auto, "Optional": Optional, "Type": Type,
                             "AttentionBackend": type("AttentionBackend", (), {}),
                             "TrtllmAttention": type("TrtllmAttention", (), {}),
                             "BaseResourceManager": type("BaseResourceManager", (), {}),
                             "get_sm_version": lambda: cap[0] * 10 + cap[1], "__name__": "interface"}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), names)  # noqa: S102 - the engine's class
    _module("tensorrt_llm._torch.speculative.interface",
            f"only the class SpeculativeDecodingMode, from {path.name}; the module's kernels and metadata are not "
            "loaded", SpeculativeDecodingMode=names["SpeculativeDecodingMode"])


def cli_args(llm_args) -> dict:
    """What ``trtllm-serve MODEL`` passes before the YAML is merged, with no option typed (tensorrt_llm/commands/
    serve.py get_llm_args is not fetched: its defaults as documented)."""
    return {"model": "./target", "backend": "pytorch", "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
            "moe_expert_parallel_size": None, "gpus_per_node": GPUS_PER_NODE, "trust_remote_code": False,
            "kv_cache_config": llm_args.KvCacheConfig(free_gpu_memory_fraction=0.9)}


def resolved(args) -> dict:
    spec = args.speculative_config
    out = {"tensor_parallel_size": args.tensor_parallel_size, "max_batch_size": args.max_batch_size,
           "max_seq_len": args.max_seq_len, "max_num_tokens": args.max_num_tokens,
           "moe_expert_parallel_size": args.moe_expert_parallel_size,
           "moe_tensor_parallel_size": args.moe_tensor_parallel_size,
           "kv_cache_config": args.kv_cache_config.model_dump(mode="json"),
           "cuda_graph_config": args.cuda_graph_config.model_dump(mode="json") if args.cuda_graph_config else None,
           "speculative_config": None}
    if spec is not None:
        data = spec.model_dump(mode="json")
        data["decoding_type"] = spec.decoding_type
        mode = spec.spec_dec_mode
        data["_mode"] = {"name": mode.name, "support_dynamic_draft_len": bool(mode.support_dynamic_draft_len()),
                         "use_one_engine": bool(mode.use_one_engine())}
        out["speculative_config"] = data
    return out


def check_one(llm_args, config: str) -> dict:
    """The config in the current directory (a bundle), through the engine's merge and validation."""
    import yaml

    WARNINGS.lines = []
    try:
        with open(config) as f:
            extra = yaml.safe_load(f)
        merged = llm_args.update_llm_args_with_extra_dict(cli_args(llm_args), extra, config)
        args = llm_args.TorchLlmArgs(**merged)
        args.warn_on_unstable_feature_usage()
        return {"accepted": True, "resolved": resolved(args), "warnings": list(WARNINGS.lines)}
    except Exception as e:  # the engine refused the config: report its own message
        return {"accepted": False, "error": f"{type(e).__name__}: {e}", "warnings": list(WARNINGS.lines)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", nargs="*", default=["."], help="bundle directories (default: the current one)")
    ap.add_argument("--src", required=True, help="directory holding the fetched TensorRT-LLM sources "
                    "(tensorrt_llm/llmapi/llm_args.py and interface_SpeculativeDecodingMode.py)")
    ap.add_argument("--gpu", default="h200", choices=sorted(CAPABILITY), help="GPU the device queries answer for")
    ap.add_argument("--config", default="llm_api.yaml", help="the config file inside each bundle")
    ap.add_argument("--out", default="-", help="JSON list of results, one per bundle (default: stdout)")
    a = ap.parse_args()
    src = Path(a.src).resolve()
    if not (src / "tensorrt_llm" / "llmapi" / "llm_args.py").is_file() or not (src / INTERFACE_CLASS).is_file():
        print(f"check_trtllm: --src {src} lacks tensorrt_llm/llmapi/llm_args.py or {INTERFACE_CLASS} "
              "(set it up with tools/engines/trtllm_sources.py)", file=sys.stderr)
        return 2
    install_stubs(src, a.gpu)
    import importlib

    llm_args = importlib.import_module("tensorrt_llm.llmapi.llm_args")
    here = os.getcwd()
    results = []
    for b in [str(Path(b).resolve()) for b in a.bundles]:
        os.chdir(b)
        try:
            results.append({"engine": "trtllm", "src": str(src), "stubs": STUBS, "bundle": b,
                            **check_one(llm_args, a.config)})
        finally:
            os.chdir(here)
    text = json.dumps(results, default=str, indent=1)
    if a.out == "-":
        print(text)
    else:
        Path(a.out).write_text(text + "\n")
    return 0 if all(r["accepted"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
