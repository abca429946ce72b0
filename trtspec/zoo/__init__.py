"""The demo target/draft pair that trtspec trains on the Python standard library and ships.

``demo_paths()`` gives the two Hugging Face directories; ``python -m trtspec.zoo.train`` retrains
them (see ``MODEL_CARD.md`` next to this file for data, sizes and measured acceptance).
"""
from __future__ import annotations

from pathlib import Path

ZOO_DIR = Path(__file__).resolve().parent
DEMO_DIR = ZOO_DIR / "demo"
MODEL_CARD = ZOO_DIR / "MODEL_CARD.md"


def demo_paths() -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of the shipped demo pair (HF directories, same tokenizer).

    Raises FileNotFoundError naming the missing directory when the package was installed without them.
    """
    target, draft = DEMO_DIR / "target", DEMO_DIR / "draft"
    for d in (target, draft):
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"demo model missing: {d} has no config.json (retrain: python -m trtspec.zoo.train)")
    return target, draft


def demo_acceptance_path() -> Path:
    """Acceptance profile (``trtspec.acceptance/v1`` JSON) measured for the demo pair."""
    path = DEMO_DIR / "acceptance.json"
    if not path.is_file():
        raise FileNotFoundError(f"demo acceptance profile missing: {path}")
    return path


__all__ = ["demo_paths", "demo_acceptance_path", "DEMO_DIR", "MODEL_CARD", "ZOO_DIR"]
