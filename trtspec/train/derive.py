"""Settings of a drafter derived from its target, each recorded with the rule that chose it.

* EAGLE-3 aux layers: low, middle and last layer ``(1, L//2, L-1)`` (the EAGLE-3 paper's low / mid / high
  features; Model-Optimizer's default ``{1, L//2-1, L-4}`` collapses to two layers below 8 target layers).
* DFlash / DSpark: ``draft_layers`` = ``clamp(L // 3, 1, 5)`` (Model-Optimizer's default is 5, more than a
  shallow target has to fuse); ``target_layer_ids`` spread evenly over ``1 .. L-2`` (one per draft layer, as
  Model-Optimizer requires; the last layer is left out because engines differ on whether they capture it
  before or after the final norm).
* Draft sizes: the target's heads, KV heads, head dim, RMSNorm eps and rope; MLP width the target's unless
  given.
* EAGLE-3 draft vocabulary: the full vocabulary up to 32768 tokens, else the 32000 most frequent tokens of
  the data (EAGLE-3's practice), mapped back by ``d2t[j] = id_j - j``.
* Mask token (DFlash / DSpark): a given id or token; else the tokenizer's mask token; else the first row
  of the target's vocabulary that no token of the tokenizer uses (the embedding row exists, no text can
  produce it: "added"); else the special token that occurs least in the data; else the least frequent token.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.train.config import TrainDraftConfig, TrainInputError

MASK_NAMES = ("<|mask|>", "<mask>", "[MASK]", "<|MASK|>")
MAX_FULL_DRAFT_VOCAB = 32768
REDUCED_DRAFT_VOCAB = 32000


@dataclass
class TargetInfo:
    """What the drafter needs from the target directory (read before any weight loads)."""

    path: Path
    config: dict                 # config.json as read
    layers: int
    hidden: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rope_theta: float
    rms_norm_eps: float
    tokenizer_vocab: dict         # token -> id (added tokens included)
    special_ids: tuple[int, ...]  # ids of the tokenizer's special (added) tokens

    @classmethod
    def read(cls, target: Path) -> "TargetInfo":
        from trtspec.runtime.config import ModelFormatError, read_model_config, read_quant_config

        target = Path(target)
        try:
            mc = read_model_config(target)
            quant = read_quant_config(target)
        except ModelFormatError as e:
            raise TrainInputError(f"--target: {e}") from None
        if quant is not None:
            raise TrainInputError(f"--target {target}: a quantized checkpoint ({quant.algo}); train the drafter on "
                                  "the unquantized source model (the draft serves the quantized one as well)")
        if mc.rope.kind != "default":
            raise TrainInputError(f"--target {target}: rope type {mc.rope.kind!r}; Model-Optimizer 0.47 trains "
                                  "DFlash drafts with default rope only")
        tok_path = target / "tokenizer.json"
        if not tok_path.is_file():
            raise TrainInputError(f"--target {target}: missing tokenizer.json")
        doc = json.loads(tok_path.read_text(encoding="utf-8"))
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tok_path))
        return cls(path=target, config=json.loads((target / "config.json").read_text()), layers=mc.num_hidden_layers,
                   hidden=mc.hidden_size, vocab=mc.vocab_size, heads=mc.num_attention_heads,
                   kv_heads=mc.num_key_value_heads, head_dim=mc.head_dim, intermediate=mc.intermediate_size,
                   rope_theta=mc.rope.theta, rms_norm_eps=mc.rms_norm_eps,
                   tokenizer_vocab=tok.get_vocab(with_added_tokens=True),
                   special_ids=tuple(sorted(t["id"] for t in doc.get("added_tokens", []) if t.get("special"))))


@dataclass
class Derived:
    """The drafter's settings and, per setting, how it was chosen (``notes``)."""

    layer_ids: tuple[int, ...]
    draft_layers: int
    intermediate: int
    draft_vocab: int = 0
    mask_token_id: int | None = None
    notes: dict = field(default_factory=dict)


def eagle_aux_layers(layers: int) -> tuple[int, ...]:
    """Low, middle and last layer, deduplicated: ``(1, L//2, L-1)`` for ``L >= 3``."""
    return tuple(sorted({min(1, layers - 1), layers // 2, layers - 1}))


def block_draft_layers(layers: int) -> int:
    """DFlash / DSpark draft depth for a target of ``layers`` layers: ``clamp(L // 3, 1, 5)``."""
    return max(1, min(5, layers // 3))


def block_target_layers(layers: int, k: int) -> tuple[int, ...]:
    """``k`` distinct layer ids spread evenly over ``1 .. L-2`` (``0 .. L-1`` when the target is too shallow)."""
    lo, hi = (1, layers - 2) if layers - 2 >= k else (0, layers - 1)
    if hi - lo + 1 < k:
        raise TrainInputError(f"--draft-layers {k}: the target has only {layers} layers to fuse (one per draft layer)")
    if k == 1:
        return ((lo + hi) // 2,)
    return tuple(sorted({round(lo + i * (hi - lo) / (k - 1)) for i in range(k)}))


def _check_ids(ids, layers: int, what: str) -> tuple[int, ...]:
    bad = [i for i in ids if not 0 <= i < layers]
    if bad:
        raise TrainInputError(f"--layer-ids {list(ids)}: {what} {bad} outside the target's layers 0..{layers - 1}")
    return tuple(ids)


def derive(cfg: TrainDraftConfig, t: TargetInfo) -> Derived:
    """Layer ids, draft depth and width for ``cfg.drafter`` on target ``t`` (the mask token and the draft
    vocabulary need the data: :func:`choose_mask_token`, :func:`draft_vocab_size`)."""
    notes = {}
    if cfg.drafter == "eagle3":
        if cfg.draft_layers not in (None, 1):
            raise TrainInputError(f"--draft-layers {cfg.draft_layers}: an EAGLE-3 head has one decoder layer")
        ids = _check_ids(cfg.layer_ids, t.layers, "aux layers") if cfg.layer_ids else eagle_aux_layers(t.layers)
        notes["layer_ids"] = "given" if cfg.layer_ids else f"(1, L//2, L-1) of L={t.layers} target layers"
        k = 1
    else:
        if cfg.layer_ids:
            ids = _check_ids(cfg.layer_ids, t.layers, "target layers")
            k = cfg.draft_layers or len(ids)
            if k != len(ids):
                raise TrainInputError(f"--layer-ids {list(ids)} and --draft-layers {k}: Model-Optimizer's DFlash "
                                      "needs one target layer per draft layer")
            notes["layer_ids"] = "given"
        else:
            k = cfg.draft_layers or block_draft_layers(t.layers)
            ids = block_target_layers(t.layers, k)
            notes["layer_ids"] = f"{k} ids spread over 1..L-2 of L={t.layers} target layers"
        notes["draft_layers"] = "given" if cfg.draft_layers else f"clamp(L // 3, 1, 5) = {k}"
    width = cfg.intermediate or t.intermediate
    notes["intermediate"] = "given" if cfg.intermediate else f"the target's ({t.intermediate})"
    return Derived(layer_ids=tuple(ids), draft_layers=k, intermediate=width, notes=notes)


def draft_vocab_size(cfg: TrainDraftConfig, t: TargetInfo) -> tuple[int, str]:
    """Rows of the EAGLE-3 lm_head and why."""
    if cfg.draft_vocab is not None:
        n = cfg.draft_vocab or t.vocab
        if n > t.vocab:
            raise TrainInputError(f"--draft-vocab {n} exceeds the target's vocab_size {t.vocab}")
        return n, "given"
    if t.vocab <= MAX_FULL_DRAFT_VOCAB:
        return t.vocab, f"the full vocabulary (<= {MAX_FULL_DRAFT_VOCAB} tokens)"
    return REDUCED_DRAFT_VOCAB, f"the {REDUCED_DRAFT_VOCAB} most frequent tokens of the data"


def choose_draft_vocab(counts, size: int):
    """(draft ids int64 ``[size]`` ascending, d2t ``[size]`` with ``id = j + d2t[j]``): the ``size`` most
    frequent ids of ``counts [V]`` (ties to the lower id)."""
    import torch

    order = torch.argsort(-counts.double() + torch.arange(counts.numel()) * 1e-9)   # stable: frequent first
    ids = torch.sort(order[:size]).values
    return ids, ids - torch.arange(size)


def choose_mask_token(cfg: TrainDraftConfig, t: TargetInfo, counts) -> tuple[int, str]:
    """The mask token id and how it was chosen (module docstring). ``counts [V]``: token counts of the data."""
    if cfg.mask_token is not None:
        raw = cfg.mask_token
        tid = int(raw) if raw.lstrip("-").isdigit() else t.tokenizer_vocab.get(raw)
        if tid is None:
            raise TrainInputError(f"--mask-token {raw!r}: not a token of the target's tokenizer (give an id or a "
                                  "token string)")
        if not 0 <= tid < t.vocab:
            raise TrainInputError(f"--mask-token {raw}: id {tid} is outside the target's vocabulary 0..{t.vocab - 1}")
        return tid, "given"
    for name in MASK_NAMES:
        if name in t.tokenizer_vocab and t.tokenizer_vocab[name] < t.vocab:
            return t.tokenizer_vocab[name], f"the tokenizer's mask token {name!r}"
    used = set(t.tokenizer_vocab.values())
    spare = next((i for i in range(t.vocab) if i not in used), None)
    if spare is not None:
        return spare, "added: the first vocabulary row no token uses (the embedding exists, no text produces it)"
    specials = [i for i in t.special_ids if i < t.vocab]
    if specials:
        best = min(specials, key=lambda i: (int(counts[i]), i))
        name = next(k for k, v in t.tokenizer_vocab.items() if v == best)
        return best, f"the special token {name!r}, {int(counts[best])} occurrences in the data"
    best = int(counts.argmin())
    return best, f"the least frequent token (id {best}, {int(counts[best])} occurrences in the data)"
