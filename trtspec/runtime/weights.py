"""Read checkpoint tensors from safetensors files (never unpickle)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trtspec.runtime.config import ModelFormatError


def _files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise ModelFormatError(f"{index}: not a safetensors index ({e})") from e
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
    else:
        files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(p.name for p in model_dir.glob("*.pt"))
        hint = f" (found {pickled}: pickled checkpoints are not loaded; convert to safetensors)" if pickled else ""
        raise ModelFormatError(f"{model_dir}: no *.safetensors weights{hint}")
    for f in files:
        if not f.is_file():
            raise ModelFormatError(f"{model_dir}: weight shard {f.name} listed in the index is missing")
    return files


def load_safetensors(model_dir: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model_dir``'s safetensors file(s), on CPU; truncated/corrupt files raise ModelFormatError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for f in _files(Path(model_dir)):
        try:
            tensors.update(load_file(str(f), device="cpu"))
        except (SafetensorError, OSError, ValueError) as e:
            raise ModelFormatError(f"{f}: corrupt or truncated safetensors file ({e})") from e
    return tensors
