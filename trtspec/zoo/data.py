"""Corpus and tokenizer for the demo pair: the running interpreter's own standard library.

Every machine with Python has the corpus, so the demo pair can be retrained anywhere. Files are
``*.py`` under ``sysconfig.get_paths()["stdlib"]``, excluding tests, vendored packages, GUI code and
generated tables (see :data:`EXCLUDED_DIRS`). The file list is sorted by relative POSIX path; a file
is **held out** (never used for the tokenizer or for training) when
``int(sha256(relpath)[:8], 16) % heldout_modulus == 0`` (default modulus 20, about 5 % of files).
"""
from __future__ import annotations

import ast
import hashlib
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

#: Directory names skipped anywhere in the path (tests, third-party, GUI, generated data).
EXCLUDED_DIRS = frozenset(
    {
        "test", "tests", "site-packages", "dist-packages", "idlelib", "tkinter", "turtledemo",
        "__pycache__", "pydoc_data", "encodings", "ensurepip", "lib2to3", "distutils",
    }
)
#: Files whose content is generated data rather than code.
EXCLUDED_PREFIXES = ("_sysconfigdata", "config-")

EOS_TOKEN = "<|endoftext|>"
#: Special tokens, ids 0.. in this order. ``<|endoftext|>`` is eos, bos and pad.
SPECIAL_TOKENS = (EOS_TOKEN, "<|system|>", "<|user|>", "<|assistant|>", "<|fim_prefix|>", "<|fim_middle|>",
                  "<|fim_suffix|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|endoftext|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def stdlib_root() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def python_version() -> str:
    """Exact interpreter version, e.g. ``"3.11.7 (CPython)"``."""
    return f"{sys.version.split()[0]} ({sys.implementation.name})"


def is_heldout(relpath: str, modulus: int = 20) -> bool:
    """True when the file ``relpath`` (POSIX, relative to the stdlib root) belongs to the held-out set."""
    if modulus < 2:
        raise ValueError(f"heldout_modulus must be >= 2, got {modulus}")
    return int(hashlib.sha256(relpath.encode()).hexdigest()[:8], 16) % modulus == 0


def list_stdlib_files(root: Path | None = None) -> list[str]:
    """Sorted relative POSIX paths of the corpus files under ``root`` (default: :func:`stdlib_root`)."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise FileNotFoundError(f"root: expected a directory with Python sources, got {root}")
    out = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if any(part in EXCLUDED_DIRS for part in rel.parts[:-1]):
            continue
        if rel.parts[0].startswith(EXCLUDED_PREFIXES) or rel.name.startswith(EXCLUDED_PREFIXES):
            continue
        out.append(rel.as_posix())
    return sorted(out)


def heldout_files(root: Path | None = None, modulus: int = 20) -> list[Path]:
    """Absolute paths of the held-out corpus files (never trained on), sorted; for benchmarks' code prompts."""
    root = Path(root) if root is not None else stdlib_root()
    return [root / rel for rel in list_stdlib_files(root) if is_heldout(rel, modulus)]


def list_hash(files: list[str]) -> str:
    """sha256 of the newline-joined file list (identifies a split in the model card)."""
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


@dataclass(frozen=True)
class CorpusSplit:
    """The deterministic train/held-out split of the stdlib sources.

    ``train`` and ``heldout`` are sorted relative POSIX paths under ``root``; ``max_files`` (default
    None = all) keeps only the first N training files (used by the smoke run).
    """

    root: Path
    train: tuple[str, ...]
    heldout: tuple[str, ...]
    heldout_modulus: int = 20
    python: str = field(default_factory=python_version)

    def __post_init__(self):
        if not self.train:
            raise ValueError(f"train: no training files found under {self.root}")
        if not self.heldout:
            raise ValueError(f"heldout: no held-out files under {self.root} (modulus {self.heldout_modulus})")
        if set(self.train) & set(self.heldout):
            raise ValueError("train and heldout overlap")

    @classmethod
    def build(cls, root: Path | None = None, heldout_modulus: int = 20, max_files: int | None = None) -> "CorpusSplit":
        root = Path(root) if root is not None else stdlib_root()
        files = list_stdlib_files(root)
        train = [f for f in files if not is_heldout(f, heldout_modulus)]
        heldout = [f for f in files if is_heldout(f, heldout_modulus)]
        if max_files is not None:
            if max_files < 1:
                raise ValueError(f"max_files must be >= 1 or None, got {max_files}")
            train, heldout = train[:max_files], heldout[: max(1, max_files // 10)]
        return cls(root=root, train=tuple(train), heldout=tuple(heldout), heldout_modulus=heldout_modulus)

    def read(self, which: str) -> list[str]:
        """Texts of the ``"train"`` or ``"heldout"`` files, in list order (undecodable bytes replaced)."""
        if which not in ("train", "heldout"):
            raise ValueError(f"which: expected 'train' or 'heldout', got {which!r}")
        files = self.train if which == "train" else self.heldout
        return [(self.root / f).read_text(encoding="utf-8", errors="replace") for f in files]

    def summary(self) -> dict:
        return {
            "python": self.python,
            "stdlib_root": str(self.root),
            "heldout_rule": f"int(sha256(relpath)[:8], 16) % {self.heldout_modulus} == 0",
            "excluded_dirs": sorted(EXCLUDED_DIRS),
            "num_train_files": len(self.train),
            "num_heldout_files": len(self.heldout),
            "train_list_sha256": list_hash(list(self.train)),
            "heldout_list_sha256": list_hash(list(self.heldout)),
            "heldout_files": list(self.heldout),
        }


def train_tokenizer(texts: list[str], vocab_size: int = 4096):
    """Byte-level BPE (``tokenizers``) with :data:`SPECIAL_TOKENS` as ids 0..6; returns a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)} (bytes + specials), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def save_tokenizer(tok, out_dir: Path, model_max_length: int = 512) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` (loadable by ``AutoTokenizer``) into ``out_dir``."""
    import json

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": True}
        for t in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "bos_token": EOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "additional_special_tokens": list(SPECIAL_TOKENS[1:]),
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def encode_corpus(tok, texts: list[str]) -> "torch.Tensor":  # noqa: F821
    """One int64 token stream ``[T]``: each text's ids followed by ``<|endoftext|>``."""
    import torch

    eos = tok.token_to_id(EOS_TOKEN)
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def function_prompts(split: CorpusSplit, tok, num_prompts: int = 32, prompt_tokens: int = 64,
                     min_body_tokens: int = 64) -> list[list[int]]:
    """Held-out code prompts: the first ``prompt_tokens`` tokens of held-out functions.

    Candidates are ``def`` nodes (sorted by file then line) whose source has at least
    ``prompt_tokens + min_body_tokens`` tokens; ``num_prompts`` are taken evenly spaced over them.
    Returns lists of token ids (no special tokens).
    """
    candidates: list[list[int]] = []
    for rel, text in zip(split.heldout, split.read("heldout")):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        nodes = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                       key=lambda n: n.lineno)
        for n in nodes:
            start = min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1
            indent = len(lines[start]) - len(lines[start].lstrip())
            src = "".join(line[indent:] if line[:indent].isspace() else line for line in lines[start:n.end_lineno])
            ids = tok.encode(src, add_special_tokens=False).ids
            if len(ids) >= prompt_tokens + min_body_tokens:
                candidates.append(ids[:prompt_tokens])
    if len(candidates) < num_prompts:
        raise ValueError(f"num_prompts: only {len(candidates)} held-out functions are long enough, asked {num_prompts}")
    step = len(candidates) / num_prompts
    return [candidates[int(i * step)] for i in range(num_prompts)]
