"""Calibration data for Model-Optimizer PTQ: the built-in sample or the user's file.

A calibration file is JSON Lines or Parquet in which each record has a ``text`` or ``prompt``
string or SPEED-Bench's ``turns`` (list of strings, joined by a blank line). The built-in sample
is 33 short texts, three for each SPEED-Bench ``qualitative`` category, written for this project.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Callable, Iterable

from trtspec.builder.validate import BuildInputError
from trtspec.jsonl import JsonlError, read_jsonl

BUILTIN_SAMPLE: tuple[tuple[str, str], ...] = (
    ("coding", "def merge_sorted(a, b):\n    i = j = 0\n    out = []\n    while i < len(a) and j < len(b):\n"
               "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n"
               "            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]"),
    ("coding", "Write a SQL query that returns, for every customer, the total value of orders placed in 2024, "
               "sorted from the largest total to the smallest, including customers with no orders."),
    ("coding", "#include <vector>\ntemplate <typename T> T dot(const std::vector<T>& x, const std::vector<T>& y) {\n"
               "  T s{};\n  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];\n  return s;\n}"),
    ("math", "Let f(x) = 3x^2 - 12x + 7. Find the minimum value of f and the point where it is reached, "
             "then show that f(x) >= -5 for every real x."),
    ("math", "A bag holds 4 red and 6 blue marbles. Two are drawn without replacement. What is the probability "
             "that both have the same colour? Give the answer as a fraction in lowest terms."),
    ("math", "Prove by induction that the sum of the first n odd numbers equals n squared."),
    ("humanities", "Explain how the printing press changed the spread of religious and scientific ideas in "
                   "sixteenth-century Europe, with two concrete examples."),
    ("humanities", "Compare the views of Hobbes and Locke on the state of nature and what they imply for the "
                   "legitimacy of government."),
    ("humanities", "Why did the Silk Road matter for cultural exchange, and not only for trade?"),
    ("stem", "Describe how a lithium-ion battery stores energy, what limits its cycle life, and why fast charging "
             "heats the cell."),
    ("stem", "A 2 kg block slides down a frictionless incline of 30 degrees from a height of 5 m. What is its "
             "speed at the bottom? Take g = 9.81 m/s^2."),
    ("stem", "What is the difference between mitosis and meiosis, and why does meiosis produce genetic diversity?"),
    ("writing", "Write a short story opening in which a lighthouse keeper finds a letter addressed to someone who "
                "died a hundred years ago."),
    ("writing", "Draft a polite email to a landlord asking for a broken heater to be repaired before the weekend."),
    ("writing", "Write a haiku sequence of three stanzas about the first snow in a city."),
    ("summarization", "Summarize in three sentences: The city council met on Tuesday to debate the new transit plan. "
                      "Supporters argued that dedicated bus lanes would cut commute times by a fifth, while shop "
                      "owners feared losing parking. After four hours the council approved a one-year pilot on two "
                      "corridors and asked for a report on sales and travel times."),
    ("summarization", "Give the key points of this abstract: We study speculative decoding, in which a small draft "
                      "model proposes several tokens that a large target model verifies in one pass. The speedup "
                      "depends on the acceptance rate and on the relative cost of drafting and verification."),
    ("summarization", "Summarize the plot of a detective novel in which the culprit turns out to be the narrator."),
    ("roleplay", "You are a ship's navigator in 1750. The captain asks how you will determine longitude on the "
                 "voyage across the Atlantic. Answer in character."),
    ("roleplay", "Pretend to be a museum guide explaining a Roman mosaic to a group of ten-year-olds."),
    ("roleplay", "Act as a patient chess coach reviewing a beginner's game in which they lost their queen early."),
    ("rag", "Context: The Aurora 7 router supports Wi-Fi 6, has four gigabit ports, and its firmware updates "
            "automatically at 3 a.m. Question: How many wired devices can be connected, and when do updates run?"),
    ("rag", "Using the passage below, answer the question. Passage: Mount Kilimanjaro has three volcanic cones: "
            "Kibo, Mawenzi and Shira. Kibo is the highest. Question: Which cone holds the summit?"),
    ("rag", "Document: Refunds are issued within 14 days for unopened items; opened items receive store credit. "
            "Question: A customer opened a blender and wants money back. What applies?"),
    ("multilingual", "Traduis en anglais : « Le train de huit heures a été annulé à cause de la neige. »"),
    ("multilingual", "Erkläre in zwei Sätzen, warum der Himmel blau ist."),
    ("multilingual", "¿Cuál es la diferencia entre 'ser' y 'estar' en español? Da dos ejemplos."),
    ("reasoning", "Alice is taller than Bob. Bob is taller than Carol. Dave is shorter than Carol. Who is the "
                  "second shortest? Explain step by step."),
    ("reasoning", "If all bloops are razzies and some razzies are lazzies, must some bloops be lazzies? Justify."),
    ("reasoning", "A clock shows 3:15. What is the angle between the hour and minute hands?"),
    ("qa", "What is the capital of Australia, and why is it not Sydney?"),
    ("qa", "How many bones are in the adult human body?"),
    ("qa", "Who proposed the theory of plate tectonics, and what evidence convinced geologists?"),
)


class CalibrationError(BuildInputError):
    """The calibration file is unusable (the message names ``--calib``)."""


def _record_text(rec: dict, where: str) -> str:
    for key in ("text", "prompt"):
        if isinstance(rec.get(key), str) and rec[key].strip():
            return rec[key]
    turns = rec.get("turns")
    if isinstance(turns, (list, tuple)) and turns and all(isinstance(t, str) for t in turns):
        return "\n\n".join(turns)
    raise CalibrationError(f"--calib {where}: record has no 'text', 'prompt' or 'turns' string field "
                           f"(keys: {sorted(rec)[:6]})")


def load_texts(path: Path | None) -> list[str]:
    """All calibration texts of ``path`` (``.jsonl``/``.json`` lines or ``.parquet``), or the built-in sample."""
    if path is None:
        return [t for _cat, t in BUILTIN_SAMPLE]
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"--calib {path}: file not found")
    texts: list[str] = []
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise CalibrationError(f"--calib {path}: not a readable Parquet file ({e})") from None
        texts = [_record_text(r, f"{path} row {i}") for i, r in enumerate(rows)]
    elif path.suffix in (".jsonl", ".json"):
        try:
            records = list(read_jsonl(path))
        except JsonlError as e:
            raise CalibrationError(f"--calib {path}: {e}") from None
        for i, rec in records:
            if not isinstance(rec, dict):
                raise CalibrationError(f"--calib {path}:{i}: expected a JSON object, got {type(rec).__name__}")
            texts.append(_record_text(rec, f"{path}:{i}"))
    else:
        raise CalibrationError(f"--calib {path}: expected a .jsonl or .parquet file")
    if not texts:
        raise CalibrationError(f"--calib {path}: no records")
    return texts


def check_calib_file(path: Path) -> int:
    """Validate ``path`` fully (it is small next to a model); return the record count."""
    return len(load_texts(path))


def calib_fingerprint(path: Path | None, samples: int, seq_len: int, seed: int) -> str:
    """sha256 identifying the calibration data and how it is cut (part of the cache key)."""
    h = hashlib.sha256()
    h.update(json.dumps([samples, seq_len, seed]).encode())
    for t in load_texts(path):
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()


def encode_batches(texts: list[str], tokenizer_dir: Path, samples: int, seq_len: int, seed: int) -> list[list[int]]:
    """Token ids of ``samples`` calibration sequences of at most ``seq_len`` tokens each.

    Texts are shuffled with ``seed``; when there are fewer texts than ``samples``, consecutive
    texts are concatenated into longer sequences before cutting, so no text is used twice.
    """
    tok = load_tokenizer(tokenizer_dir)
    order = list(texts)
    random.Random(seed).shuffle(order)
    ids = [tok(t) for t in order]
    seqs: list[list[int]] = []
    if len(ids) >= samples:
        seqs = [s[:seq_len] for s in ids[:samples]]
    else:
        flat = [t for s in ids for t in s]
        step = max(1, min(seq_len, len(flat) // samples))
        seqs = [flat[i * step:(i + 1) * step] for i in range(samples) if flat[i * step:(i + 1) * step]]
    return [s for s in seqs if s]


def load_tokenizer(path: Path) -> Callable[[str], list[int]]:
    """A text -> ids function from ``tokenizer.json`` (fast path) or transformers' AutoTokenizer."""
    tj = Path(path) / "tokenizer.json"
    if tj.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tj))
        return lambda text: tok.encode(text).ids
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(path))
    return lambda text: hf(text)["input_ids"]


def forward_loop(batches: Iterable[list[int]], device: str, vocab_size: int, progress=None):
    """A Model-Optimizer ``forward_loop(model)`` that runs every batch once (ids clipped to the vocab).

    Calibration runs with the quantizers in statistics mode, so it works on CPU for every format,
    NVFP4 included (only NVFP4's fake-quant forward *after* calibration needs CUDA).
    """
    import torch

    batches = list(batches)

    def loop(model):
        with torch.no_grad():
            for ids in batches:
                x = torch.tensor([ids], dtype=torch.long, device=device).clamp_(0, vocab_size - 1)
                model(input_ids=x, attention_mask=torch.ones_like(x))
                if progress is not None:
                    progress()

    loop.num_batches = len(batches)
    return loop
