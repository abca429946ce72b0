"""Emulates a Python image that lacks some packages, on a machine that has them.

With this directory first on PYTHONPATH and ``GPU_CHECK_HIDE=pydantic,modelopt,...`` set, importing
any of those top-level packages raises ModuleNotFoundError, as on the machine that lacks them.
``tools/gpu_check.sh --emulate-image`` uses it to run the CPU dry runs with the package set of the
GPU machine's image (tools/gpu_check/h200_image.yaml), so a check that would need a missing package
fails here first. Nothing happens when GPU_CHECK_HIDE is unset.
"""
import os
import sys

_HIDDEN = frozenset(n.strip() for n in os.environ.get("GPU_CHECK_HIDE", "").split(",") if n.strip())

if _HIDDEN:
    import importlib.abc

    class _Hidden(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in _HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden: GPU_CHECK_HIDE)", name=name)
            return None

    sys.meta_path.insert(0, _Hidden())
