"""Compile-only dry run of trtspec._C's CUDA build, for machines with nvcc but no GPU or CUDA torch.

Two results:

* ``build.nvcc``: every ``cpp/src/*.cu`` compiled to an object file with the flags the CUDA build
  (``setup.py``'s CUDAExtension under torch's BuildExtension) gives nvcc: torch's common nvcc
  flags, ``-gencode=arch=compute_90,code=sm_90`` (TORCH_CUDA_ARCH_LIST=9.0), the extension's
  defines and include directories, and setup.py's own nvcc arguments;
* ``build.bindings``: the torch bindings ``cpp/torch/*.cpp`` checked by the host compiler
  (``-fsyntax-only``) with ``TRTSPEC_WITH_CUDA`` defined, against the installed torch's headers
  (c10/cuda included) and the CUDA toolkit's: the CUDA-only code of the bindings, which a CPU
  build never compiles.

setup.py's flags are read from its source (the ``cxx`` list and the CUDAExtension's
``extra_compile_args`` / ``define_macros``), so this check follows setup.py when it changes.

    python3 tools/gpu_check/compile_check.py [--results DIR] [--logs DIR] [--jobs 2] [--only nvcc|bindings]
"""
from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from result import write_result  # noqa: E402

ARCH_LIST = "9.0"


def _literal_list(node) -> list:
    value = ast.literal_eval(node)
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value


def setup_flags(setup_py: Path = ROOT / "setup.py") -> dict:
    """{"cxx": [...], "nvcc": [...], "defines": [(name, value)]} of setup.py's CUDA extension."""
    tree = ast.parse(setup_py.read_text(encoding="utf-8"))
    cxx = nvcc = defines = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "cxx" for t in node.targets):
            cxx = _literal_list(node.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "CUDAExtension":
            for kw in node.keywords:
                if kw.arg == "define_macros":
                    defines = [tuple(x) for x in _literal_list(kw.value)]
                if kw.arg == "extra_compile_args" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "nvcc":
                            nvcc = _literal_list(v)
    missing = [n for n, v in (("cxx", cxx), ("nvcc", nvcc), ("define_macros", defines)) if v is None]
    if missing:
        raise ValueError(f"{setup_py}: could not read {', '.join(missing)} of the CUDAExtension "
                         "(expected `cxx = [...]` and CUDAExtension(..., define_macros=[...], "
                         "extra_compile_args={'nvcc': [...]}))")
    return {"cxx": cxx, "nvcc": nvcc, "defines": defines}


def cuda_home() -> Path | None:
    for cand in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if cand and (Path(cand) / "include" / "cuda_runtime.h").is_file():
            return Path(cand)
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(nvcc).resolve().parents[1]
        if (home / "include" / "cuda_runtime.h").is_file():
            return home
    return None


def _torch_common():
    """Include dirs and defines torch's BuildExtension adds for an extension named trtspec._C."""
    import torch
    import torch.utils.cpp_extension as ext

    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    includes = list(ext.include_paths())
    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    return ext, includes, defines


def nvcc_command(src: Path, obj: Path, flags: dict, home: Path) -> list[str]:
    ext, includes, defines = _torch_common()
    os.environ["TORCH_CUDA_ARCH_LIST"] = ARCH_LIST
    arch = ext._get_cuda_arch_flags()
    incs = [f"-I{p}" for p in includes + [str(home / "include"), str(ROOT / "cpp" / "include")]]
    macros = [f"-D{k}={v}" for k, v in flags["defines"]]
    return ([str(home / "bin" / "nvcc"), "-c", str(src), "-o", str(obj)] + incs + list(ext.COMMON_NVCC_FLAGS)
            + ["--compiler-options", "-fPIC"] + arch + defines + macros + flags["nvcc"])


def cuda_macros_dir(out: Path) -> Path | None:
    """A CPU build of torch ships c10/cuda's headers but not the one its CUDA build generates,
    ``c10/cuda/impl/cuda_cmake_macros.h`` (it only defines C10_CUDA_BUILD_SHARED_LIBS): write that
    define under ``out`` when the installed torch lacks the header; None when torch has it."""
    _, includes, _ = _torch_common()
    if any((Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").is_file() for p in includes):
        return None
    header = out / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n", encoding="utf-8")
    return out


def host_command(src: Path, flags: dict, home: Path, extra_include: Path | None = None) -> list[str]:
    _, includes, defines = _torch_common()
    cxx = os.environ.get("CXX", "c++")
    extra = [str(extra_include)] if extra_include else []
    incs = [f"-I{p}" for p in includes + extra + [str(home / "include"), str(ROOT / "cpp" / "include"),
                                                 sysconfig.get_paths()["include"]]]
    macros = [f"-D{k}={v}" for k, v in flags["defines"]]
    return [cxx, "-fsyntax-only", "-fPIC", str(src)] + incs + defines + macros + flags["cxx"]


def _run(cmd: list[str], timeout: float) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        return p.returncode, p.stdout + p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return 124, f"timeout after {timeout:.0f} s", time.perf_counter() - t0


def check(kind: str, jobs: int, logs: Path, timeout: float) -> tuple[str, str, dict, float]:
    """(status, figure, detail, seconds) of the ``nvcc`` or ``bindings`` compile."""
    home = cuda_home()
    if home is None or not (home / "bin" / "nvcc").is_file():
        return "skipped: nvcc / CUDA headers not found (set CUDA_HOME)", "-", {}, 0.0
    flags = setup_flags()
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu_check_objs_{os.getpid()}"
    out.mkdir(parents=True, exist_ok=True)
    if kind == "nvcc":
        sources = sorted((ROOT / "cpp" / "src").glob("*.cu"))
        cmds = [nvcc_command(s, out / (s.name + ".o"), flags, home) for s in sources]
    else:
        sources = sorted((ROOT / "cpp" / "torch").glob("*.cpp"))
        macros = cuda_macros_dir(out / "include")
        cmds = [host_command(s, flags, home, macros) for s in sources]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        runs = list(pool.map(lambda c: _run(c, timeout), cmds))
    seconds = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    with open(logs / f"build_{kind}.log", "w", encoding="utf-8") as f:
        for src, cmd, (rc, text, s) in zip(sources, cmds, runs):
            f.write(f"$ {' '.join(cmd)}\n[rc {rc}, {s:.1f} s]\n{text}\n")
    bad = [f"{src.name} (rc {rc})" for src, (rc, _, _) in zip(sources, runs) if rc != 0]
    what = "compiled for sm_90 with the extension's nvcc flags" if kind == "nvcc" else \
        "host-compiled (-fsyntax-only) with TRTSPEC_WITH_CUDA"
    detail = {"sources": [s.name for s in sources], "command": cmds[0] if cmds else [],
              "seconds": {s.name: round(r[2], 1) for s, r in zip(sources, runs)}}
    if bad:
        return "fail", f"{len(bad)}/{len(sources)} failed: {', '.join(bad)}", detail, seconds
    return "pass", f"{len(sources)} sources {what} ({seconds:.0f} s)", detail, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=None)
    ap.add_argument("--logs", default="gpu_check_out/logs")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", choices=["nvcc", "bindings"], default=None)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per compiler process")
    args = ap.parse_args(argv)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    ok = True
    for kind in ([args.only] if args.only else ["nvcc", "bindings"]):
        try:
            status, figure, detail, seconds = check(kind, args.jobs, logs, args.timeout)
        except (ValueError, ImportError, OSError) as e:
            status, figure, detail, seconds = "fail", f"{type(e).__name__}: {e}", {}, 0.0
        ok &= status != "fail"
        if args.results:
            write_result(args.results, f"build.{kind}", status, figure, detail, seconds)
        print(f"build.{kind}: {status}: {figure}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
