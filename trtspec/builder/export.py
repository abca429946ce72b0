"""Stage 4 of ``trtspec build``: put checkpoints into the bundle.

* quantized checkpoints come from :func:`trtspec.builder.quantize.quantize_and_export` (unified HF
  layout: ``config.json`` with ``quantization_config``, ``hf_quant_config.json``, safetensors);
* an unquantized checkpoint is copied file by file (config, safetensors, index);
* EAGLE-3 / DFlash / DSpark heads are copied as they are: they are already in the layout of
  Model-Optimizer's speculative export (EAGLE-3: ``architectures: [LlamaForCausalLMEagle3]``,
  ``eagle_config``, tensors ``layers.0.*``, ``fc``, ``norm``, optional ``d2t`` and ``lm_head``);
* tokenizer files of the target are copied next to every checkpoint that lacks them.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from trtspec.builder.validate import TOKENIZER_FILES

#: files of an HF checkpoint copied when it is bundled unchanged.
CHECKPOINT_GLOBS = ("config.json", "*.safetensors", "model.safetensors.index.json", "generation_config.json",
                    "hf_quant_config.json")


def copy_checkpoint(src: Path, dst: Path, *, all_files: bool = False) -> list[Path]:
    """Copy ``src``'s checkpoint files (every top-level file when ``all_files``) into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    names: set[Path] = set()
    if all_files:
        names = {p for p in Path(src).iterdir() if p.is_file()}
    else:
        for g in CHECKPOINT_GLOBS + TOKENIZER_FILES:
            names.update(Path(src).glob(g))
    out = []
    for p in sorted(names):
        shutil.copy2(p, dst / p.name)
        out.append(dst / p.name)
    return out


def copy_tokenizer(src: Path, dst: Path) -> list[str]:
    """Copy the tokenizer files of ``src`` that ``dst`` lacks; return their names."""
    copied = []
    for name in TOKENIZER_FILES:
        if (Path(src) / name).is_file() and not (dst / name).exists():
            shutil.copy2(Path(src) / name, dst / name)
            copied.append(name)
    return copied


def fix_exported_config(export_dir: Path, source_config: dict) -> None:
    """Keep ``architectures`` of the source in the exported ``config.json`` (some exports drop it)."""
    p = Path(export_dir) / "config.json"
    cfg = json.loads(p.read_text())
    if not cfg.get("architectures") and source_config.get("architectures"):
        cfg["architectures"] = source_config["architectures"]
        p.write_text(json.dumps(cfg, indent=2))


def read_quant_config(ckpt_dir: Path) -> dict | None:
    """``quantization_config`` of an exported checkpoint's ``config.json`` (None when unquantized)."""
    return json.loads((Path(ckpt_dir) / "config.json").read_text()).get("quantization_config")
