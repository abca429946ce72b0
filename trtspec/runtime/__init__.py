"""Reference speculative-decoding runtime in torch: models, drafters, batching engine, metrics.

Public API: :func:`load_pipeline` -> :class:`Pipeline` (``generate``, ``engine``, ``tokenizer``).
Nothing is imported until used.
"""
from __future__ import annotations

__all__ = ["load_pipeline", "Pipeline", "Generation", "Engine", "SamplingParams", "SpecConfig", "TreeShape", "SpecStats"]

_WHERE = {
    "load_pipeline": "api", "Pipeline": "api", "Generation": "api", "Engine": "engine",
    "SamplingParams": "params", "SpecConfig": "params", "TreeShape": "params", "SpecStats": "stats",
}


def __getattr__(name):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"trtspec.runtime.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'trtspec.runtime' has no attribute {name!r}")
