"""Build and install trtspec.

The torch extension ``trtspec._C`` is built from the torch-free kernels in ``cpp/src`` (CPU
``.cpp`` always, CUDA ``.cu`` when the installed torch is a CUDA build and ``nvcc`` exists) and
the thin torch bindings in ``cpp/torch``. Install torch first and build without isolation::

    pip install torch==2.13.0
    pip install --no-build-isolation -e ".[test]"
"""
from __future__ import annotations

import glob
import os

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _extensions():
    import torch
    from torch.utils.cpp_extension import CppExtension, CUDAExtension, CUDA_HOME

    cpu_sources = sorted(glob.glob("cpp/src/*.cpp")) + sorted(glob.glob("cpp/torch/*.cpp"))
    cuda_sources = sorted(glob.glob("cpp/src/*.cu")) + sorted(glob.glob("cpp/torch/*.cu"))
    with_cuda = bool(torch.version.cuda) and CUDA_HOME is not None and os.environ.get("TRTSPEC_NO_CUDA") != "1"
    include_dirs = [os.path.join(ROOT, "cpp", "include")]
    cxx = ["-O3", "-std=c++20", "-ffp-contract=off"]  # no FMA contraction: CPU maths stays bit-exact with the reference
    if with_cuda:
        return [
            CUDAExtension(
                "trtspec._C",
                cpu_sources + cuda_sources,
                include_dirs=include_dirs,
                define_macros=[("TRTSPEC_WITH_CUDA", "1")],
                extra_compile_args={"cxx": cxx, "nvcc": ["-O3", "-std=c++20", "--expt-relaxed-constexpr"]},
            )
        ]
    return [CppExtension("trtspec._C", cpu_sources, include_dirs=include_dirs, extra_compile_args=cxx)]


def _cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    return {"build_ext": BuildExtension.with_options(use_ninja=True)}


setup(
    name="trtspec",
    version="0.1.0",
    description="Speculative-decoding co-design for TensorRT-LLM, TensorRT and Triton: kernels, recipes, builder",
    long_description=open(os.path.join(ROOT, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # the top-level recipe book (recipes/) ships as the package trtspec.recipebook, the plugins'
    # interface YAMLs (plugins/<name>/<name>.yaml) as trtspec.pluginspecs
    packages=find_packages(include=["trtspec", "trtspec.*"]) + ["trtspec.recipebook", "trtspec.pluginspecs"],
    package_dir={"trtspec.recipebook": "recipes", "trtspec.pluginspecs": "plugins"},
    include_package_data=True,
    package_data={
        "trtspec": ["recipes/models/*.yaml", "bench/data/*", "zoo/**/*", "triton/**/*", "builder/engines/*.yaml"],
        "trtspec.recipebook": ["gpus/*.yaml", "priors/*.yaml", "book/*.yaml", "measurements/*.yaml", "engines/*.yaml",
                               "validation/*.yaml"],
        "trtspec.pluginspecs": ["trtSpec*/trtSpec*.yaml"],
    },
    ext_modules=_extensions(),
    cmdclass=_cmdclass(),
    install_requires=[
        "torch>=2.4",
        "numpy",
        "click>=8.1",
        "pydantic>=2.6",
        "pyyaml>=6",
        "rich>=13",
        "tqdm",
        "matplotlib>=3.8",
        "safetensors>=0.4",
        "tokenizers>=0.19",
        "transformers>=4.45",
        "nvidia-modelopt>=0.40",
        "requests",  # nvidia-modelopt imports it without declaring it
        "onnx>=1.16",
        "onnxscript",
        "onnxruntime>=1.18",
        "onnxruntime-extensions>=0.12",
        "pyarrow",
        "prometheus-client>=0.20",
        "tritonclient[http,grpc]>=2.40",
        # measured kernel latencies per GPU and engine version (trtspec.recipes.perfdb); 0.12.0 tested
        "aiconfigurator-core>=0.12,<0.13",
    ],
    extras_require={"test": ["pytest>=8", "hypothesis>=6", "scipy", "ninja"]},
    entry_points={"console_scripts": ["trtspec=trtspec.cli:main"]},
)
