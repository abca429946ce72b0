"""The typed settings of ``trtspec train-draft``; the CLI's defaults are read from here."""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

DRAFTERS = ("eagle3", "dflash", "dspark")
DATA_KINDS = ("builtin", "file")
EXPORT_DTYPES = ("bfloat16", "float16", "float32")
MARKOV_HEADS = ("vanilla", "gated", "rnn")


class TrainInputError(ValueError):
    """A setting or input that cannot train a drafter; the message names it."""


@dataclass(frozen=True)
class TrainDraftConfig:
    """Everything that determines a trained drafter. ``None`` means "derived from the target" (see
    :mod:`trtspec.train.derive`, which records what it chose).

    Training: ``steps`` optimizer steps of ``batch_size`` sequences of ``seq_len`` tokens; AdamW at ``lr``
    (betas 0.9/0.95, weight decay ``weight_decay``) with ``warmup`` linear warmup steps then cosine decay to
    ``lr * min_lr_ratio``; gradient-norm clip 1.0; ``seed`` fixes data order, initialisation and anchors;
    ``device`` cpu | cuda[:N]; ``threads`` CPU threads (0 = torch's default).

    Data: ``data`` a ``.jsonl`` (one string, or an object with ``text`` / ``prompt`` / ``content``, per line)
    or ``.parquet`` (a ``text`` column) file, None = the built-in sample (the Python standard library's
    sources, training split); ``self_distill`` replaces each training sequence by the target's own greedy
    continuation of its first ``prompt_tokens`` tokens; ``max_sequences`` caps the sequences prepared.

    Drafter: ``draft_layers`` decoder layers of the draft (EAGLE-3: 1; DFlash / DSpark: one per target layer
    fused); ``intermediate`` the draft's MLP width (None = the target's); ``layer_ids`` target layers fused
    by ``fc`` (EAGLE-3 aux layers / DFlash ``target_layer_ids``); ``draft_vocab`` rows of the EAGLE-3 lm_head
    (the most frequent target tokens of the data, mapped back by ``d2t``; 0 = the full vocabulary);
    ``ttt_steps`` EAGLE-3 training-time-test depth; ``block_size`` DFlash / DSpark tokens per block;
    ``anchors`` DFlash / DSpark blocks sampled per sequence and step (None: Model-Optimizer's 512, capped by
    the sequence);
    ``mask_token`` an id or token string (None: a mask token of the tokenizer, else an unused vocabulary
    row, else a special token absent from the data); ``markov_rank`` / ``markov_head`` / ``confidence_head``
    DSpark's Markov and confidence heads.

    Check: ``eval_prompts`` held-out prompts of ``eval_prompt_tokens`` tokens, ``eval_new_tokens`` new tokens
    each, greedy, at D = ``eval_draft_len`` (None: the block's drafts, EAGLE-3: 8). Export: ``dtype``.
    """

    drafter: str
    steps: int = 1000
    batch_size: int = 4
    seq_len: int = 128
    lr: float = 1e-3
    warmup: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    device: str = "cpu"
    threads: int = 0
    data: Path | None = None
    self_distill: bool = False
    prompt_tokens: int = 32
    max_sequences: int = 4096
    draft_layers: int | None = None
    intermediate: int | None = None
    layer_ids: tuple[int, ...] | None = None
    draft_vocab: int | None = None
    ttt_steps: int = 3
    block_size: int = 8
    anchors: int | None = None
    mask_token: str | None = None
    markov_rank: int = 32
    markov_head: str = "vanilla"
    confidence_head: bool = True
    eval_prompts: int = 32
    eval_prompt_tokens: int = 64
    eval_new_tokens: int = 64
    eval_draft_len: int | None = None
    dtype: str = "bfloat16"

    def __post_init__(self):
        if self.drafter not in DRAFTERS:
            raise TrainInputError(f"--drafter: expected one of {', '.join(DRAFTERS)}, got {self.drafter!r}")
        for name in ("steps", "batch_size", "seq_len", "prompt_tokens", "max_sequences", "ttt_steps",
                     "markov_rank", "eval_prompts", "eval_prompt_tokens", "eval_new_tokens"):
            if getattr(self, name) < 1:
                raise TrainInputError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        for name in ("warmup", "threads"):
            if getattr(self, name) < 0:
                raise TrainInputError(f"--{name}: must be >= 0, got {getattr(self, name)}")
        if not 0 < self.lr < 1:
            raise TrainInputError(f"--lr: must be in (0, 1), got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise TrainInputError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.block_size < 2:
            raise TrainInputError(f"--block-size: must be >= 2 (the root and at least one mask position), "
                                  f"got {self.block_size}")
        if self.drafter != "eagle3" and self.seq_len % self.block_size:
            raise TrainInputError(f"--seq-len {self.seq_len} must be a multiple of --block-size {self.block_size} "
                                  "(Model-Optimizer's DFlash training splits sequences into whole blocks)")
        if self.drafter == "eagle3" and self.ttt_steps >= self.seq_len - 1:
            raise TrainInputError(f"--ttt-steps {self.ttt_steps} must be < --seq-len - 1")
        if self.self_distill and self.prompt_tokens >= self.seq_len:
            raise TrainInputError(f"--prompt-tokens {self.prompt_tokens} must be < --seq-len {self.seq_len}")
        for name in ("draft_layers", "intermediate", "eval_draft_len", "anchors"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise TrainInputError(f"--{name.replace('_', '-')}: must be >= 1, got {v}")
        if self.draft_vocab is not None and self.draft_vocab < 0:
            raise TrainInputError(f"--draft-vocab: must be >= 0 (0 = full vocabulary), got {self.draft_vocab}")
        if self.markov_head not in MARKOV_HEADS:
            raise TrainInputError(f"--markov-head: expected one of {', '.join(MARKOV_HEADS)}, got {self.markov_head!r}")
        if self.dtype not in EXPORT_DTYPES:
            raise TrainInputError(f"--dtype: expected one of {', '.join(EXPORT_DTYPES)}, got {self.dtype!r}")
        if self.data is not None and Path(self.data).suffix not in (".jsonl", ".parquet"):
            raise TrainInputError(f"--data {self.data}: expected a .jsonl or .parquet file")
        if self.layer_ids is not None and (not self.layer_ids or len(set(self.layer_ids)) != len(self.layer_ids)):
            raise TrainInputError(f"--layer-ids: expected distinct layer ids, got {list(self.layer_ids)}")

    @classmethod
    def default(cls, name: str):
        """The default of field ``name`` (for the CLI's option defaults)."""
        f = {f.name: f for f in fields(cls)}[name]
        return f.default

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
        return out
