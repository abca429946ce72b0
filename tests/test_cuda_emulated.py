"""The CUDA kernels' source, run on the CPU under a thread-level emulator (tests/cuda_emu/emu.h),
against the C++ CPU launchers: exact for tree_metadata, verify_greedy and accepted_kv_indices,
exact on dyadic inputs and by agreement rate for verify_sample / verify_block, plus the
documented verdicts for invalid data (tests/cuda_emu/harness.cpp).

This runs the kernels' indexing, control flow and barrier placement on machines without a GPU
(a misplaced barrier deadlocks and times out); it is no substitute for tests/test_ops_cuda.py
and tests/cuda_memcheck.sh on a GPU. The kernel sources are rewritten only mechanically (launch
syntax, builtin variables, includes); see ``emulated_sources``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "cpp" / "src"
EMU = Path(__file__).resolve().parent / "cuda_emu"
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

pytestmark = [
    pytest.mark.slow,  # about 40 s to compile, then 1 s (tree, kv) to 60 s (sample) per group on 2 cores
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed"),
    pytest.mark.skipif(not (CUDA_INCLUDE / "cuda_fp16.h").is_file(),
                       reason=f"CUDA headers (cuda_fp16.h, cuda_bf16.h) not found in {CUDA_INCLUDE}"),
]


def emulated_source(text: str) -> str:
    """Mechanical rewrite of a kernel source for emu.h: includes, builtins, launches, shared memory."""
    text = re.sub(r"#include <(cub/[^>]+|cuda_runtime\.h|cuda_fp16\.h|cuda_bf16\.h)>\n", "", text)
    text = text.replace("threadIdx.x", "emu::tid()").replace("blockIdx.x", "emu::bid()")
    text = re.sub(r"extern __shared__ (\w+) (\w+)\[\];",
                  r"\1* \2 = reinterpret_cast<\1*>(emu::dynamicShared());", text)
    text = text.replace("__shared__ ", "static ")
    text = re.sub(r"(\w+(?:<\w+>)?)<<<(.*?)>>>\(", r"emu::launch(\1, \2, ", text, flags=re.S)
    text = text.replace("cudaGetLastError() == cudaSuccess", "true")
    assert "<<<" not in text and "__shared__" not in text
    return text


def emulated_sources(out: Path) -> list[Path]:
    """Writes the rewritten cpp/src/*_cuda.cu (as .cpp) and cuda_common.cuh into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda_common.cuh").write_text(emulated_source((SRC / "cuda_common.cuh").read_text()))
    files = []
    for cu in sorted(SRC.glob("*_cuda.cu")):
        target = out / (cu.stem + ".cpp")
        target.write_text(emulated_source(cu.read_text()))
        files.append(target)
    return files


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("cuda_emu")
    kernels = emulated_sources(work / "src")
    cpu = [p for p in sorted(SRC.glob("*.cpp"))]
    exe = work / "harness"
    flags = ["-std=c++20", "-O1", "-pthread", "-ffp-contract=off", "-isystem", str(CUDA_INCLUDE),
             "-I", str(work / "src"), "-I", str(ROOT / "cpp" / "include"), "-I", str(SRC)]
    objs = []
    for src in kernels:  # one translation unit per kernel file (each has its own anonymous namespace)
        obj = work / (src.stem + ".o")
        cmd = ["g++", *flags, "-include", str(EMU / "emu.h"), "-c", str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{src.name}:\n{proc.stderr[-4000:]}"
        objs.append(obj)
    cmd = ["g++", *flags, "-include", str(EMU / "emu.h"), str(EMU / "harness.cpp"), *map(str, cpu), *map(str, objs),
           "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


@pytest.mark.parametrize("group", ["tree", "greedy", "sample", "block", "kv"])
def test_cuda_kernel_source_matches_cpu_under_emulation(harness, group):
    proc = subprocess.run([str(harness), group], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    assert "all checks passed" in proc.stdout
