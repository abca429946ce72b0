"""The demo target/draft pair that trtspec trains on the Python standard library and ships.

``demo_paths()`` gives the two Hugging Face directories, ``demo_draft("eagle3" | "dflash" | "dspark")`` the
heads trained for the target with ``trtspec train-draft``; ``python -m trtspec.zoo.train`` retrains the pair
(see ``MODEL_CARD.md`` next to this file for data, sizes, commands and measured acceptance).

The second demo target, ``deepseek_path()``, is in the DeepSeek-V3 layout (multi-head latent attention,
mixture of experts, one MTP layer, drafter ``mtp``); ``python -m trtspec.zoo.train --arch deepseek-v3``
retrains it (``DEEPSEEK_MODEL_CARD.md``).
"""
from __future__ import annotations

from pathlib import Path

ZOO_DIR = Path(__file__).resolve().parent
DEMO_DIR = ZOO_DIR / "demo"
MODEL_CARD = ZOO_DIR / "MODEL_CARD.md"
DEEPSEEK_DIR = ZOO_DIR / "deepseek"
DEEPSEEK_CARD = ZOO_DIR / "DEEPSEEK_MODEL_CARD.md"


def demo_paths() -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of the shipped demo pair (HF directories, same tokenizer).

    Raises FileNotFoundError naming the missing directory when the package was installed without them.
    """
    target, draft = DEMO_DIR / "target", DEMO_DIR / "draft"
    for d in (target, draft):
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"demo model missing: {d} has no config.json (retrain: python -m trtspec.zoo.train)")
    return target, draft


def deepseek_path() -> Path:
    """The DeepSeek-V3-layout demo target (one Hugging Face directory; its MTP layer drafts for it).

    Raises FileNotFoundError naming the directory when the package was installed without it.
    """
    if not (DEEPSEEK_DIR / "config.json").is_file():
        raise FileNotFoundError(f"demo DeepSeek-V3 target missing: {DEEPSEEK_DIR} has no config.json "
                                "(retrain: python -m trtspec.zoo.train --arch deepseek-v3)")
    return DEEPSEEK_DIR


#: drafters whose demo head lives in ``demo/<drafter>/`` (trained by ``trtspec train-draft``)
HEAD_DRAFTERS = ("eagle3", "dflash", "dspark")


def demo_draft(drafter: str = "draft_model") -> Path | None:
    """The demo drafter for ``drafter``: ``draft_model`` -> the draft LM; ``eagle3`` / ``dflash`` / ``dspark`` ->
    the head trained for the demo target by ``trtspec train-draft`` (``demo/<drafter>/``, its command in
    ``train_draft.json``); ``ngram`` -> None (no weights).

    Raises FileNotFoundError when that drafter is not installed, ValueError for other drafters.
    """
    if drafter == "ngram":
        return None
    if drafter == "draft_model":
        return demo_paths()[1]
    if drafter in HEAD_DRAFTERS:
        path = DEMO_DIR / drafter
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"demo {drafter} head missing: {path} has no config.json (retrain: see "
                                    f"{MODEL_CARD.name})")
        return path
    raise ValueError(f"drafter={drafter!r}: the demo pair ships draft_model, {', '.join(HEAD_DRAFTERS)} and ngram "
                     "drafters")


def demo_pair(drafter: str = "draft_model") -> tuple[Path, Path | None]:
    """``(target_dir, drafter_dir)``: the demo target and its drafter for ``drafter`` (see :func:`demo_draft`);
    for ``mtp`` the DeepSeek-V3-layout target, whose MTP layer is in its own directory (drafter_dir None)."""
    if drafter == "mtp":
        return deepseek_path(), None
    return demo_paths()[0], demo_draft(drafter)


def demo_acceptance_path(drafter: str = "draft_model") -> Path:
    """Acceptance profile (``trtspec.acceptance/v1`` JSON) measured for the demo target with ``drafter``
    (``draft_model``: ``demo/acceptance.json``; a head drafter: ``demo/<drafter>/acceptance.json``; ``mtp``: the
    DeepSeek-V3-layout target's ``deepseek/acceptance.json``)."""
    if drafter == "mtp":
        path = DEEPSEEK_DIR / "acceptance.json"
    else:
        path = DEMO_DIR / (drafter if drafter in HEAD_DRAFTERS else "") / "acceptance.json"
    if not path.is_file():
        raise FileNotFoundError(f"demo acceptance profile missing: {path}")
    return path


__all__ = ["demo_paths", "demo_draft", "demo_pair", "demo_acceptance_path", "deepseek_path", "DEMO_DIR", "HEAD_DRAFTERS",
           "MODEL_CARD", "DEEPSEEK_DIR", "DEEPSEEK_CARD", "ZOO_DIR"]
