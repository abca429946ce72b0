"""What a CPU host cannot answer for a serving engine's config code, answered as a GPU host would.

Only two kinds of thing are replaced, and each replacement is reported through ``report`` (the checkers print them
as ``stub: ...`` lines on stderr, the test log shows them):

- compiled extension modules of the engine package (``*.so`` inside it) whose import fails here (they link
  ``libcuda.so.1`` / ``libnvrtc``): each becomes an empty module;
- device probes: the GPU's name, compute capability, memory and count, ``torch.cuda`` availability, and whether
  the host has Triton (a GPU host's torch ships it).

No config code is replaced: argument parsing, validation and resolution run as the engine ships them.
``TRTSPEC_ENGINE_STUBS=engine:gpu:count`` makes ``sitecustomize`` (next to this file, put on ``PYTHONPATH`` by the
checkers) apply the same answers in every subprocess the engine starts (vLLM inspects model classes in one).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.abc
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Callable

#: GPUs the device probes answer for: name, compute capability, memory in bytes, streaming multiprocessors.
GPUS = {
    "h100": ("NVIDIA H100 80GB HBM3", (9, 0), 80 * 2**30, 132),
    "h200": ("NVIDIA H200", (9, 0), 141 * 10**9, 132),
    "b200": ("NVIDIA B200", (10, 0), 180 * 10**9, 148),
    "a100": ("NVIDIA A100-SXM4-80GB", (8, 0), 80 * 2**30, 108),
}

Report = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def native_modules(package: str) -> list[tuple[str, Path]]:
    """(dotted name, file) of each compiled extension module shipped inside ``package``."""
    root = Path(importlib.util.find_spec(package).origin).parent
    out = []
    for so in sorted(root.rglob("*.so")):
        rel = so.relative_to(root.parent)
        name = ".".join(rel.parts).split(".abi3")[0].split(".cpython")[0]
        out.append((name, so))
    return out


def stub_native(package: str, report: Report = _quiet) -> None:
    """Replace each compiled extension of ``package`` that cannot load on this host by an empty module.

    Each file is loaded on its own (not through its package's ``__init__``, which may itself refuse to import
    without it); only a failed load is replaced. torch is imported first, as the engine does, so a failure names
    what is really missing (the CUDA driver), not torch's own libraries."""
    import torch  # noqa: F401

    for name, path in native_modules(package):
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except (ImportError, OSError) as e:
            sys.modules[name] = types.ModuleType(name)
            report(f"{name} (native extension: {str(e).splitlines()[0][:90]}) -> empty module")
        else:
            sys.modules[name] = module


#: capability probes vLLM's ``_C`` extension answers at import (csrc/quantization/*: cutlass_scaled_mm_supports_*
#: and friends), as functions of the compute capability ``major * 10 + minor``.
VLLM_CAPABILITY_PROBES = {
    "cutlass_scaled_mm_supports_fp8": lambda c: c >= 89,
    "cutlass_scaled_mm_supports_block_fp8": lambda c: c >= 90,
    "cutlass_scaled_mm_supports_fp4": lambda c: c >= 100,
    "mxfp4_experts_quant_supported": lambda c: c >= 100,
    "cutlass_group_gemm_supported": lambda c: c == 90 or c >= 100,
}
_LIBS: list = []  # torch.library handles stay alive for the process


def vllm_capability_probes(cap: tuple[int, int], report: Report = _quiet) -> None:
    """Register the ``torch.ops._C`` capability probes the empty ``_C`` module no longer provides."""
    import torch

    lib = torch.library.Library("_C", "FRAGMENT")
    _LIBS.append(lib)
    for name, rule in VLLM_CAPABILITY_PROBES.items():
        if hasattr(torch.ops._C, name):
            continue
        lib.define(f"{name}(int cuda_device_capability) -> bool")
        lib.impl(name, lambda c, rule=rule: bool(rule(int(c))), "CompositeExplicitAutograd")
        report(f"torch.ops._C.{name} (capability probe) -> {bool(rule(cap[0] * 10 + cap[1]))} for "
               f"capability {cap[0]}.{cap[1]}")


def vllm(gpu: str, count: int, report: Report = _quiet) -> None:
    """vLLM: native extensions, the capability probes they answered, its CUDA platform's device queries,
    ``HAS_TRITON``."""
    name, cap, mem, _sms = GPUS[gpu]
    stub_native("vllm", report)
    vllm_capability_probes(cap, report)
    import vllm.platforms as platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    class Answered(cuda.NonNvmlCudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(*cap)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return mem

        @classmethod
        def device_count(cls) -> int:
            return count

        @classmethod
        def is_fully_connected(cls, physical_device_ids) -> bool:
            return True

    platforms._current_platform = Answered()
    report(f"vllm.platforms.current_platform: CudaPlatform with the device queries answered for {name} "
           f"(capability {cap[0]}.{cap[1]}, {mem / 1e9:.0f} GB, {count} devices)")
    import vllm.config.vllm as config_vllm

    if not config_vllm.HAS_TRITON:
        config_vllm.HAS_TRITON = True
        report("vllm.config.vllm.HAS_TRITON = True (a GPU host's torch ships Triton)")


def torch_cuda(gpu: str, count: int, report: Report = _quiet) -> None:
    """``torch.cuda`` probes answered for ``count`` x ``gpu`` (name, capability, properties)."""
    import torch

    name, cap, mem, sms = GPUS[gpu]
    props = types.SimpleNamespace(name=name, major=cap[0], minor=cap[1], total_memory=mem,
                                  multi_processor_count=sms)
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: count
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.get_device_capability = lambda device=None: cap
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.current_device = lambda: 0
    torch.cuda.mem_get_info = lambda device=None: (mem, mem)
    report(f"torch.cuda probes (is_available, device_count, get_device_name/capability/properties, "
           f"mem_get_info) answered for {count} x {name}")


class _Unavailable:
    """A native kernel that cannot run here: importable by name, raises when called."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a native CUDA kernel, replaced on this host (no GPU)")


class _KernelPackage(types.ModuleType):
    """Stand-in for a package of native kernels: every attribute is an :class:`_Unavailable` kernel."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self.__name__}.{name}")


class _KernelFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``<prefix>`` as a :class:`_KernelPackage`; its submodules stay missing (ImportError), so the engine's
    own fallbacks for them run as on a host without the package."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.prefix:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _KernelPackage(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


def stub_kernel_package(pkg: str, report: Report = _quiet) -> None:
    """Replace a native-kernel package that cannot import here by names that raise when called."""
    try:
        importlib.import_module(pkg)
    except (ImportError, OSError) as e:
        sys.modules.pop(pkg, None)
        sys.meta_path.insert(0, _KernelFinder(pkg))
        report(f"{pkg} (native kernels: {str(e).splitlines()[0][:90]}) -> package whose kernels raise when called")


def stub_torchvision_ops(report: Report = _quiet) -> None:
    """torchvision's compiled ops: the PyPI wheel is a CUDA build whose ``_C`` cannot load here, and its meta
    registrations for those ops then fail at import; they are skipped."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return
    root = Path(spec.origin).parent
    so = next(root.glob("_C*.so"), None)
    try:
        if so is not None:
            lib_spec = importlib.util.spec_from_file_location("torchvision._C", so)
            importlib.util.module_from_spec(lib_spec)
            import torch

            torch.ops.load_library(str(so))
            return
    except (ImportError, OSError, RuntimeError) as e:
        why = str(e).splitlines()[0][:90]
    else:
        why = "no compiled ops in the wheel"
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    report(f"torchvision._meta_registrations (registrations for torchvision's compiled ops, which cannot load: "
           f"{why}) -> empty module")


def sglang(gpu: str, count: int, report: Report = _quiet) -> None:
    """SGLang: ``torch.cuda`` probes, ``sgl_kernel`` (native kernels) whose kernels raise when called, and
    torchvision's registrations for its compiled CUDA ops (the PyPI torchvision is a CUDA build) skipped."""
    torch_cuda(gpu, count, report)
    stub_kernel_package("sgl_kernel", report)
    stub_torchvision_ops(report)


APPLY = {"vllm": vllm, "sglang": sglang}


def from_env(report: Report = _quiet) -> None:
    """Apply ``TRTSPEC_ENGINE_STUBS=engine:gpu:count`` (set by the checkers for the engine's subprocesses)."""
    spec = os.environ.get("TRTSPEC_ENGINE_STUBS")
    if not spec:
        return
    engine, gpu, count = spec.split(":")
    APPLY[engine](gpu, int(count), report)
