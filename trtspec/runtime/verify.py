"""The verification ops the runtime calls: the compiled ``trtspec.ops`` (C++ on CPU, CUDA on GPU).

Set ``TRTSPEC_OPS=reference`` to run the pure-torch specification ``trtspec.reference`` instead
(same signatures and results, slow Python loops): useful to cross-check a kernel inside the runtime.
"""
from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=None)
def _load(name: str):
    if name == "reference":
        from trtspec import reference

        return reference
    try:
        from trtspec import ops as compiled
    except ImportError as e:
        raise ImportError(f"trtspec.ops cannot load its compiled kernels ({e}); build them with "
                          "`python setup.py build_ext --inplace` or set TRTSPEC_OPS=reference") from e
    return compiled


def ops():
    """The module providing tree_metadata / verify_greedy / verify_sample / verify_block / accepted_kv_indices."""
    name = os.environ.get("TRTSPEC_OPS", "compiled")
    if name not in ("compiled", "reference"):
        raise ValueError(f"TRTSPEC_OPS must be 'compiled' or 'reference', got {name!r}")
    return _load(name)
