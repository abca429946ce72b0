"""Training sequences and held-out prompts for ``trtspec train-draft``.

Sources: a ``.jsonl`` file (each line a JSON string, or an object with ``text``, ``prompt`` or ``content``),
a ``.parquet`` file (its ``text`` column), or the built-in sample: the Python standard library's sources
(the demo target's corpus, :mod:`trtspec.zoo.data`). A record is held out when
``int(sha256(text)[:8], 16) % 20 == 0`` (the built-in sample holds out whole files by path, as the demo
pair does); held-out records never reach training and give the acceptance check's prompts.

Training sequences are ``seq_len``-token windows at seeded random offsets of the concatenated training
records (each followed by the end-of-text token when the target has one); with ``self_distill`` each
window keeps its first ``prompt_tokens`` tokens and the rest is the target's own greedy continuation.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from trtspec.jsonl import JsonlError, read_jsonl
from trtspec.train.config import TrainDraftConfig, TrainInputError

HELDOUT_MODULUS = 20
TEXT_FIELDS = ("text", "prompt", "content")


def is_heldout(text: str, modulus: int = HELDOUT_MODULUS) -> bool:
    return int(hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()[:8], 16) % modulus == 0


def read_records(path: Path) -> list[str]:
    """Texts of a ``.jsonl`` or ``.parquet`` file; a clear error naming the line or column otherwise."""
    path = Path(path)
    if not path.is_file():
        raise TrainInputError(f"--data {path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        if "text" not in table.column_names:
            raise TrainInputError(f"--data {path}: no 'text' column (columns: {', '.join(table.column_names)})")
        texts = [t for t in table.column("text").to_pylist() if isinstance(t, str) and t]
    else:
        try:
            texts = [_record_text(item, path, n) for n, item in read_jsonl(path)]
        except JsonlError as e:
            raise TrainInputError(f"--data {path}: {e}") from None
    if not texts:
        raise TrainInputError(f"--data {path}: no text records")
    return texts


def _record_text(item, path: Path, n: int) -> str:
    text = item if isinstance(item, str) else next(
        (item[k] for k in TEXT_FIELDS if isinstance(item, dict) and isinstance(item.get(k), str)), None)
    if text is None:
        raise TrainInputError(f"--data {path}: line {n}: expected a string or an object with one of "
                              f"{', '.join(TEXT_FIELDS)}")
    return text


@dataclass
class Corpus:
    """Training token stream ``[T]`` and held-out prompts; ``source`` says where they came from."""

    stream: "torch.Tensor"  # noqa: F821
    prompts: list[list[int]]
    source: str
    summary: dict


def _encode(tok, texts: list[str], eos: int | None):
    import torch

    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        if eos is not None:
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def _eos(target_dir: Path) -> int | None:
    cfg = json.loads((target_dir / "config.json").read_text())
    eos = cfg.get("eos_token_id")
    return (eos[0] if eos else None) if isinstance(eos, list) else eos


def load_corpus(cfg: TrainDraftConfig, target_dir: Path) -> Corpus:
    """The training stream and ``cfg.eval_prompts`` held-out prompts of ``cfg.eval_prompt_tokens`` tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(target_dir) / "tokenizer.json"))
    eos = _eos(Path(target_dir))
    if cfg.data is None:
        from trtspec.zoo import data as zoo_data

        split = zoo_data.CorpusSplit.build()
        stream = _encode(tok, split.read("train"), eos)
        prompts = zoo_data.function_prompts(split, tok, cfg.eval_prompts, cfg.eval_prompt_tokens)
        return Corpus(stream, prompts, f"built-in sample: Python {split.python} standard library, "
                      f"{len(split.train)} training files; prompts: the first {cfg.eval_prompt_tokens} tokens of "
                      f"{cfg.eval_prompts} held-out functions", split.summary())
    texts = read_records(cfg.data)
    train = [t for t in texts if not is_heldout(t)]
    held = [t for t in texts if is_heldout(t)]
    if not train:
        raise TrainInputError(f"--data {cfg.data}: every record is held out; give more records")
    prompts = [ids[:cfg.eval_prompt_tokens] for ids in (e.ids for e in tok.encode_batch(held, add_special_tokens=False))
               if len(ids) > cfg.eval_prompt_tokens]
    if len(prompts) < cfg.eval_prompts:
        raise TrainInputError(f"--data {cfg.data}: {len(prompts)} held-out records are longer than "
                              f"--eval-prompt-tokens {cfg.eval_prompt_tokens}; need --eval-prompts {cfg.eval_prompts} "
                              f"(records with int(sha256(text)[:8], 16) % {HELDOUT_MODULUS} == 0 are held out)")
    stream = _encode(tok, train, eos)
    return Corpus(stream, prompts[:cfg.eval_prompts], f"{cfg.data}: {len(train)} training records, "
                  f"{len(held)} held out", {"file": str(cfg.data), "train_records": len(train),
                                             "heldout_records": len(held)})


def windows(stream, cfg: TrainDraftConfig):
    """``min(max_sequences, len/seq_len * 4)`` windows ``[N, seq_len]`` at seeded random offsets of ``stream``."""
    import torch

    hi = stream.numel() - cfg.seq_len
    if hi < 1:
        raise TrainInputError(f"the training data has {stream.numel()} tokens, fewer than --seq-len {cfg.seq_len}")
    n = max(cfg.batch_size, min(cfg.max_sequences, 4 * stream.numel() // cfg.seq_len))
    g = torch.Generator().manual_seed(cfg.seed + 1)
    starts = torch.randint(0, hi, (n,), generator=g)
    return torch.stack([stream[s:s + cfg.seq_len] for s in starts.tolist()])


def _cache_key(target_dir: Path, prompts, seq_len: int) -> str:
    """Everything the continuations depend on: the target's weights and config, the prompts, the length."""
    h = hashlib.sha256()
    for f in sorted(Path(target_dir).glob("*.safetensors")) + [Path(target_dir) / "config.json"]:
        h.update(f.read_bytes())
    h.update(prompts.numpy().tobytes())
    h.update(str((tuple(prompts.shape), seq_len)).encode())
    return h.hexdigest()[:32]


def self_distill(target_dir: Path, seqs, cfg: TrainDraftConfig, cache_dir: Path | None = None, progress=None):
    """Each window's first ``prompt_tokens`` tokens followed by the target's greedy continuation (the runtime,
    batched, no stop token) up to ``seq_len`` tokens. Results are kept under ``cache_dir`` (default
    ``~/.cache/trtspec/self_distill``), keyed by the target's files, the prompts and the length."""
    import os

    from safetensors.torch import load_file, save_file

    cache_dir = Path(cache_dir or Path.home() / ".cache" / "trtspec" / "self_distill")
    path = cache_dir / f"{_cache_key(target_dir, seqs[:, :cfg.prompt_tokens].contiguous(), cfg.seq_len)}.safetensors"
    if path.is_file():
        return load_file(str(path))["seqs"]
    out = _continue(target_dir, seqs, cfg, progress)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file({"seqs": out.contiguous()}, str(tmp))
    os.replace(tmp, path)
    return out


def _continue(target_dir: Path, seqs, cfg: TrainDraftConfig, progress=None):
    import torch

    from trtspec.runtime import load_pipeline
    from trtspec.runtime.params import SamplingParams

    pipe = load_pipeline(target_dir, draft_len=0, device=cfg.device)
    out = seqs.clone()
    new = cfg.seq_len - cfg.prompt_tokens
    batch = 64
    params = SamplingParams(max_new_tokens=new)
    for i in range(0, seqs.shape[0], batch):
        chunk = seqs[i:i + batch, :cfg.prompt_tokens].tolist()
        eng = pipe.engine(max_batch_size=len(chunk), max_seq_len=min(cfg.seq_len + 1,
                                                                     pipe.target.config.max_position_embeddings))
        for j, p in enumerate(chunk):
            eng.add_request(j, p, params)
        got = {j: [] for j in range(len(chunk))}
        while eng.has_work():
            for o in eng.step():
                got[o.request_id] += o.new_token_ids
        for j in range(len(chunk)):
            cont = got[j][:new]
            out[i + j, cfg.prompt_tokens:cfg.prompt_tokens + len(cont)] = torch.tensor(cont)
        if progress is not None:
            progress(len(chunk))
    return out
