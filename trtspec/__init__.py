"""trtspec: choose, build and serve speculative decoding for TensorRT-LLM, TensorRT and Triton.

Nothing heavy happens at import time; the kernels load with ``trtspec.ops``.
"""
__version__ = "0.1.0"
