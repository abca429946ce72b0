"""``trtspec build``: validate a target/draft pair, resolve its recipe, quantize with NVIDIA
Model-Optimizer, export unified Hugging Face checkpoints and emit TensorRT-LLM / vLLM / SGLang
configs into an atomic, resumable bundle. Entry point: :func:`trtspec.builder.pipeline.build`."""
