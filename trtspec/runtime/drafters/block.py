"""Loading a block drafter (``dflash`` / ``dspark``): the checks that run before any weight loads, and the factory."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trtspec.runtime.block_head import read_block_config
from trtspec.runtime.config import ModelConfig, ModelFormatError

#: the training record ``trtspec train-draft`` writes next to a head
TRAIN_RECORD = "train_draft.json"


def vocab_digest(vocab: dict) -> str:
    """sha256 of a tokenizer's ``token -> id`` map (sorted): what must match between a target and its draft."""
    return hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()


def check_trained_for(draft, vocab: dict) -> None:
    """A head trained by ``trtspec train-draft`` records its target's tokenizer (``train_draft.json``,
    ``target_tokenizer_vocab_sha256``); refuse it for a target whose tokenizer differs."""
    path = Path(draft) / TRAIN_RECORD
    if not path.is_file():
        return
    try:
        want = json.loads(path.read_text(encoding="utf-8")).get("target_tokenizer_vocab_sha256")
    except json.JSONDecodeError as e:
        raise ModelFormatError(f"{path}: not valid JSON ({e})") from None
    if want and want != vocab_digest(vocab):
        raise ModelFormatError(f"tokenizer mismatch: {path} says the head was trained for a target whose tokenizer "
                               f"(target_tokenizer_vocab_sha256 {want[:12]}...) differs from this target's; the draft "
                               "must share the target's tokenizer")


def check_block_draft(draft, drafter: str, target: ModelConfig, spec) -> None:
    """Refuse a head that is not a ``drafter`` export, does not fit ``target`` (layer ids, vocabulary, mask
    token, hidden size) or cannot give the configured D (``spec.max_depth`` above its block's drafts)."""
    cfg = read_block_config(draft)
    if cfg.drafter != drafter:
        raise ModelFormatError(f"{cfg.source}: a {cfg.drafter} head (dflash_config.projector_type "
                               f"{'dspark' if cfg.drafter == 'dspark' else 'unset'}), not {drafter}; pass "
                               f"--drafter {cfg.drafter}")
    cfg.check_target(target)
    if spec.branching != 1:
        raise ValueError(f"drafter {drafter!r} proposes chains only; drop the tree (topk={spec.branching})")
    if spec.max_depth > cfg.drafts:
        raise ValueError(f"draft_len {spec.max_depth} exceeds what the {drafter} head's block gives: block_size "
                         f"{cfg.block_size} -> {cfg.drafts} drafts ({cfg.source})")


def block_drafter(draft, target, *, device="cpu", dtype=None, **kw):
    """A :class:`~trtspec.runtime.drafters.dflash.DFlashDrafter` or :class:`~trtspec.runtime.drafters.dspark.DSparkDrafter`
    for the export in ``draft`` on the runtime target ``target``."""
    import torch

    from trtspec.runtime.block_head import load_block_head

    head = load_block_head(Path(draft), target, device=device, dtype=dtype or torch.float32)
    if head.config.drafter == "dspark":
        from trtspec.runtime.drafters.dspark import DSparkDrafter

        return DSparkDrafter(head, target, **kw)
    from trtspec.runtime.drafters.dflash import DFlashDrafter

    return DFlashDrafter(head, target)
