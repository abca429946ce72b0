"""The machine and its Python packages, for tools/gpu_check.sh: results ``env`` and ``deps``.

``env``: GPU (nvidia-smi), driver, nvcc, compute-sanitizer and ncu, Python, torch (its version
from the package metadata; with ``--gpu`` torch is imported for the device's name, compute
capability, SM count and L2 size). ``deps``: every package a check imports, looked up without
importing it; a missing one is named with the checks that need it (``NEEDS``) and, for the
packages tools/gpu_check/h200_image.yaml lists as absent from the GPU machine's image, what needs
them and how to carry them (tools/gpu_check_wheels.sh). ``deps`` fails only when a check that is
not optional lacks a package.

    python3 tools/gpu_check/env_report.py [--gpu] [--results DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from result import write_result  # noqa: E402

# check -> top-level modules it imports (trtspec's own imports included); OPTIONAL checks skip
NEEDS = {
    "build.extension": ["torch", "setuptools", "ninja"],
    "pytest.cuda": ["torch", "pytest", "scipy", "numpy"],
    "sanitizer": ["torch"],
    "timing.ops": ["torch", "rich"],
    "timing.flashinfer": ["torch", "flashinfer"],
    "runtime.greedy": ["torch", "safetensors", "tokenizers", "yaml"],
    "bench_recipe": ["torch", "numpy", "yaml", "safetensors", "tokenizers", "matplotlib", "rich"],
    "profile": ["torch", "click", "rich", "safetensors", "tokenizers", "yaml"],
}
OPTIONAL = {"timing.flashinfer"}
DISTS = {"yaml": "pyyaml", "flashinfer": "flashinfer-python"}


def _run(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (p.stdout or p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({type(e).__name__})"


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def environment(gpu: bool) -> dict:
    env = {"python": platform.python_version(), "executable": sys.executable, "machine": platform.machine(),
           "cpus": os.cpu_count(), "torch": _version("torch")}
    if shutil.which("nvidia-smi"):
        env["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                  "--format=csv,noheader"])
    nvcc = shutil.which("nvcc")
    release = [line for line in _run([nvcc, "--version"]).splitlines() if "release" in line] if nvcc else []
    env["nvcc"] = release[0].split(",", 1)[-1].strip() if release else (nvcc and "nvcc (version unknown)")
    sys.path.insert(0, str(HERE))
    from run_sanitizer import find_sanitizer

    san = find_sanitizer()
    env["compute_sanitizer"] = (san + " " + _run([san, "--version"]).splitlines()[-1]) if san else None
    env["ncu"] = shutil.which("ncu")
    env["wheels_installed"] = [w for w in os.environ.get("GPU_CHECK_WHEELS", "").split() if w]
    if gpu:
        import torch

        env["torch_cuda"] = torch.version.cuda
        env["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["device"] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
                             "memory_gib": round(p.total_memory / 2**30, 1),
                             "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1)}
    return env


def importable(module: str) -> bool:
    """Whether this Python finds ``module`` (a dotted name whose parent fails to import counts as absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_packages() -> dict[str, list[str]]:
    """module -> checks that need it, for every module some check needs and this Python lacks."""
    out: dict[str, list[str]] = {}
    for check, mods in NEEDS.items():
        for m in mods:
            if not importable(m):
                out.setdefault(m, []).append(check)
    return out


def image_notes() -> dict:
    import yaml

    return yaml.safe_load((HERE / "h200_image.yaml").read_text(encoding="utf-8"))["absent"]


def deps_result(missing: dict[str, list[str]]) -> tuple[str, str, dict]:
    try:
        notes = image_notes()
    except ImportError:
        notes = {}
    lacking = {mod: note for mod, note in notes.items() if not importable(mod)}
    required = {m: c for m, c in missing.items() if set(c) - OPTIONAL}
    parts = ["missing: " + ", ".join(f"{m} (needed by {', '.join(c)})" for m, c in sorted(missing.items()))
             if missing else "every check's imports found"]
    others = sorted(set(lacking) - set(missing))
    if others:
        parts.append("absent, needed by no check: " + ", ".join(others))
    if missing:
        parts.append("carry them as wheels: bash tools/gpu_check_wheels.sh")
    figure = "; ".join(parts)
    detail = {"missing": missing, "lacking_from_image": {m: lacking[m]["dists"] for m in lacking},
              "versions": {m: _version(DISTS.get(m, m)) for mods in NEEDS.values() for m in mods}}
    return ("fail" if required else "pass"), figure, detail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="import torch and describe the CUDA device")
    ap.add_argument("--results", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    env = environment(args.gpu)
    dev = env.get("device")
    if dev:
        figure = (f"{dev['name']} (sm_{dev['capability'].replace('.', '')}, {dev['sms']} SMs, {dev['l2_mib']} MiB L2, "
                  f"{dev['memory_gib']} GiB); torch {env['torch']} (CUDA {env['torch_cuda']}); {env['nvcc']}")
    else:
        figure = f"no GPU; python {env['python']}, torch {env['torch']}; nvcc: {env['nvcc'] or 'none'}"
    figure += f"; compute-sanitizer: {'yes' if env['compute_sanitizer'] else 'none'}"
    status, dfig, detail = deps_result(missing_packages())
    if args.results:
        write_result(args.results, "env", "pass", figure, env)
        write_result(args.results, "deps", status, dfig, detail)
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "deps": detail}, indent=2) + "\n", encoding="utf-8")
    print(f"env: {figure}\ndeps: {status}: {dfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
