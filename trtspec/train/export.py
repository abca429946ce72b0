"""Model-Optimizer's export (``export_speculative_decoding``) and the corrections it needs, each reported.

Corrections (Model-Optimizer 0.47):

* EAGLE-3 ``bos_token_id`` / ``eos_token_id`` / ``pad_token_id``: its exporter fills them from the draft's
  config, which carries Llama's defaults (1 / 2 / unset), not the target's; they are set to the target's.
* ``dtype``: for an unquantized model its EAGLE exporter ignores the ``dtype`` argument (weights stay in the
  training precision, ``torch_dtype`` says the draft config's); weights are cast and ``torch_dtype`` written.
* ``rope_scaling``: must be what the draft trained with (none); an injected one is removed.

The export is then read back the way the runtime reads it (config parse and tensor shapes), so a layout
problem surfaces here, not when the drafter is first served.
"""
from __future__ import annotations

import json
from pathlib import Path

from trtspec.train.derive import TargetInfo

IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def export(model, out_dir: Path, dtype_name: str) -> None:
    """``modelopt.torch.export.export_speculative_decoding`` into ``out_dir``."""
    import torch
    from modelopt.torch.export import export_speculative_decoding

    export_speculative_decoding(model, dtype=getattr(torch, dtype_name), export_dir=str(out_dir))


def fix(out_dir: Path, drafter: str, t: TargetInfo, dtype_name: str) -> list[str]:
    """Correct the export in ``out_dir`` in place; returns one line per correction made."""
    import torch
    from safetensors.torch import load_file, save_file

    out_dir = Path(out_dir)
    path = out_dir / "config.json"
    cfg = json.loads(path.read_text())
    fixes = []
    if drafter == "eagle3":
        for key in IDS:
            want = t.config.get(key)
            if cfg.get(key) != want:
                fixes.append(f"{key}: Model-Optimizer wrote {cfg.get(key)!r}, the target's is {want!r}")
                cfg[key] = want
    if cfg.get("rope_scaling"):
        fixes.append(f"rope_scaling: Model-Optimizer injected {cfg['rope_scaling']!r}; the draft trained without "
                     "rope scaling, removed")
        cfg["rope_scaling"] = None
    want = getattr(torch, dtype_name)
    tensors = load_file(str(out_dir / "model.safetensors"))
    floats = {k for k, v in tensors.items() if v.is_floating_point()}
    wrong = sorted({str(tensors[k].dtype).removeprefix("torch.") for k in floats if tensors[k].dtype != want})
    if wrong:
        fixes.append(f"dtype: Model-Optimizer wrote {', '.join(wrong)} weights for --dtype {dtype_name}; cast")
        tensors = {k: (v.to(want) if k in floats else v).contiguous() for k, v in tensors.items()}
        save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    if cfg.get("torch_dtype") != dtype_name:
        fixes.append(f"torch_dtype: Model-Optimizer wrote {cfg.get('torch_dtype')!r}, the weights are {dtype_name}")
        cfg["torch_dtype"] = dtype_name
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    return fixes


def check_loads(out_dir: Path, drafter: str, target_dir: Path) -> None:
    """Read the export back as the runtime does (config, then every tensor's name and shape)."""
    from trtspec.runtime.models import load_eagle3, load_model

    target = load_model(target_dir)
    if drafter == "eagle3":
        load_eagle3(out_dir, target)
    else:
        from trtspec.runtime.block_head import load_block_head

        load_block_head(out_dir, target)
