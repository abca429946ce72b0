"""Write a Triton model repository that serves a trtspec bundle.

Layout (``<out>/<model_name>/``)::

    config.pbtxt      Python backend, decoupled, tensors named like TensorRT-LLM's LLM-API model
    1/model.py        our model (trtspec/triton/model_template/model.py)
    1/model.yaml      ModelSettings: the bundle (relative when the repository lives inside it) and limits

The same repository runs anywhere ``import trtspec`` works in the server's Python: on a GPU with
TensorRT-LLM installed the model serves through ``tensorrt_llm.LLM`` with the bundle's
``llm_api.yaml``; elsewhere through the trtspec runtime.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from trtspec.triton.bundle import read_bundle
from trtspec.triton.protocol import INPUTS, OUTPUTS, ModelSettings

#: Largest batch dimension a client may send (TensorRT-LLM's LLM-API model uses 64 as well).
MAX_BATCH_SIZE = 64
TEMPLATE = Path(__file__).resolve().parent / "model_template" / "model.py"


def config_pbtxt(model_name: str, max_batch_size: int = MAX_BATCH_SIZE) -> str:
    """The ``config.pbtxt`` text: Python backend, decoupled, one CPU instance (the backend batches)."""
    lines = [f'name: "{model_name}"', 'backend: "python"', f"max_batch_size: {max_batch_size}",
             "model_transaction_policy { decoupled: true }", "input ["]
    lines += [",\n".join(
        f'  {{ name: "{name}" data_type: {dtype} dims: [ 1 ]{" optional: true" if optional else ""} }}'
        for name, dtype, optional in INPUTS)]
    lines += ["]", "output ["]
    lines += [",\n".join(f'  {{ name: "{name}" data_type: {dtype} dims: [ 1 ] }}' for name, dtype in OUTPUTS)]
    lines += ["]", "instance_group [ { kind: KIND_CPU count: 1 } ]", ""]
    return "\n".join(lines)


def default_settings(bundle_dir: Path) -> ModelSettings:
    """Limits from the target's context: ``max_tokens_limit`` = min(1024, ctx/2), prompt gets the rest."""
    bundle = read_bundle(bundle_dir)
    config = json.loads((bundle.target / "config.json").read_text())
    context = int(config.get("max_position_embeddings", 4096))
    if context < 2:
        raise ValueError(f"bundle: target context {context} is too small to serve")
    limit = min(1024, context // 2)
    return ModelSettings(bundle=bundle.root, default_max_tokens=min(64, limit), max_tokens_limit=limit,
                         max_prompt_tokens=context - limit)


def write_repository(bundle_dir: str | Path, out_dir: str | Path, model_name: str = "trtspec", *,
                     settings: ModelSettings | None = None) -> Path:
    """Write (or replace) ``out_dir/model_name`` serving ``bundle_dir``; return the model folder.

    Args:
        bundle_dir: a trtspec bundle (``target/``, ``draft/``, ``llm_api.yaml``).
        out_dir: the model repository (created; other models in it are left alone).
        model_name: Triton model name. Default ``trtspec``.
        settings: limits and backend choice; default :func:`default_settings` (``bundle`` is overridden).
    """
    if not model_name or not all(c.isalnum() or c in "-_." for c in model_name):
        raise ValueError(f"model_name: expected letters, digits, '-', '_' or '.', got {model_name!r}")
    bundle = read_bundle(bundle_dir)
    settings = replace(settings or default_settings(bundle.root), bundle=bundle.root)
    out_dir = Path(out_dir).expanduser().resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / model_name
    version_dir = final / "1"
    try:
        bundle_ref = os.path.relpath(bundle.root, version_dir)
        relative = final.is_relative_to(bundle.root)
    except ValueError:
        relative = False
    import yaml

    with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".{model_name}.") as tmp:
        staging = Path(tmp) / model_name
        (staging / "1").mkdir(parents=True)
        (staging / "config.pbtxt").write_text(config_pbtxt(model_name))
        shutil.copyfile(TEMPLATE, staging / "1" / "model.py")
        header = ("# trtspec Triton model settings (trtspec.triton.protocol.ModelSettings).\n"
                  "# bundle: relative paths are relative to this file's folder.\n")
        body = settings.to_dict(bundle=bundle_ref if relative else str(bundle.root))
        (staging / "1" / "model.yaml").write_text(header + yaml.safe_dump(body, sort_keys=False))
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    return final
