"""The verification ops the runtime calls: ``trtspec.ops`` (compiled kernels) when it imports,
else the pure-torch specification ``trtspec.reference`` (same signatures, slow loops)."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def ops():
    """The module providing tree_metadata / verify_greedy / verify_sample / verify_block / accepted_kv_indices."""
    try:
        from trtspec import ops as compiled
        return compiled
    except (ImportError, OSError):
        from trtspec import reference
        return reference


def backend_name() -> str:
    return ops().__name__
