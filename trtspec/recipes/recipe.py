"""A recipe: the optimizer's per-batch choices plus the serving-engine settings derived from them.

Engine settings (all keys are inclusive upper batch bounds, TensorRT-LLM semantics):

* TensorRT-LLM ``draft_len_schedule`` {bound: D}: batch b uses the D of the smallest key >= b; batches above the
  largest key get D = 0. Its rules are enforced here: the smallest key's value equals ``max_draft_len`` and no value
  exceeds it, i.e. the schedule is non-increasing in the batch size. Per-batch optima need not be (MoE models load
  fewer *new* experts per extra draft once the batch already touches most experts, so their best D can grow with
  B), so when speedup curves are given the schedule is the non-increasing sequence that maximizes the sum over
  buckets of log(predicted speedup) (a small dynamic programme over D; ties go to the smaller D); without curves
  the optimum is capped by a running minimum. A row whose scheduled D differs from its optimum records
  ``schedule_draft_len`` and ``schedule_speedup``. Tiers with equal D are merged; trailing D = 0 tiers are dropped. TensorRT-LLM forbids combining the schedule with ``max_concurrency``: when the schedule has a single tier
  that ends below ``max_batch_size`` it is expressed as ``max_draft_len`` + ``max_concurrency`` instead (see
  ``trtllm_speculative_config``); otherwise ``max_concurrency`` is None.
* vLLM ``num_speculative_tokens_per_batch_size`` {bound: D} for every batch bucket (zeros kept).
* SGLang ``speculative_num_steps`` (depth at the smallest batch), ``speculative_eagle_topk`` (1 for chains) and
  ``speculative_num_draft_tokens`` (tree nodes including the root; depth + 1 for chains).
"""
from __future__ import annotations

import datetime as _dt
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes.errors import CatalogError

FORMAT = "trtspec.recipe/v1"


def monotone_schedule(curves: dict, tolerance: float = 1e-3) -> dict:
    """Non-increasing D per batch maximizing sum_b log(speedup_b(D)); ``curves``: batch -> {D: speedup}. A D missing
    from a batch's curve is not allowed there (e.g. it does not fit in memory); every curve must hold D = 0."""
    import math

    batches = sorted(curves)
    ds = sorted(set.union(*(set(curves[b]) for b in batches)))
    if not ds or any(0 not in curves[b] for b in batches):
        return {}
    val = {b: {d: math.log(max(curves[b][d], 1e-12)) if d in curves[b] else -math.inf for d in ds} for b in batches}
    best = {}  # best[(i, d)] = best total for buckets i.. given s_i <= d
    for i in range(len(batches) - 1, -1, -1):
        run = -math.inf
        for d in ds:
            here = val[batches[i]][d] + (best[(i + 1, d)] if i + 1 < len(batches) else 0.0)
            run = max(run, here)
            best[(i, d)] = run
    out, cap = {}, ds[-1]
    for i, b in enumerate(batches):
        totals = {d: val[b][d] + (best[(i + 1, d)] if i + 1 < len(batches) else 0.0) for d in ds if d <= cap}
        top = max(totals.values())
        cap = min(d for d, t in totals.items() if t >= top - tolerance)
        out[b] = cap
    return out


def derive_schedule(rows: list, max_batch_size: int, curves: dict | None = None) -> tuple:
    """(draft_len_schedule, max_draft_len, scheduled D per batch) from plan rows (see module docstring);
    ``curves``: batch -> {D: predicted speedup} of the recipe's drafter, enabling the optimal monotone schedule."""
    capped, cap = {}, None
    if curves:
        capped = monotone_schedule({r["batch"]: curves[r["batch"]] for r in rows})
    for r in sorted(rows, key=lambda r: r["batch"]):
        if r["batch"] in capped:
            continue
        d = r["draft_len"] if cap is None else min(cap, r["draft_len"])
        cap = d
        capped[r["batch"]] = d
    schedule: dict = {}
    items = sorted(capped.items())
    for i, (b, d) in enumerate(items):
        if i + 1 < len(items) and items[i + 1][1] == d:
            continue  # merged into the next (larger) bound
        schedule[b] = d
    while schedule and schedule[max(schedule)] == 0:
        del schedule[max(schedule)]
    if schedule and max(schedule) == max(capped) and max(capped) < max_batch_size:
        last = max(schedule)
        schedule[max_batch_size] = schedule.pop(last)
    max_draft_len = schedule[min(schedule)] if schedule else 0
    return schedule, max_draft_len, capped


@dataclass
class Recipe:
    """Per-batch plan rows and the engine settings; ``provenance`` says where every input came from."""

    name: str
    model: str
    gpu: str
    tp: int
    quant: str
    drafter: str
    context: int
    max_batch_size: int
    rows: list
    acceptance: dict
    signature: dict
    provenance: dict
    draft_len_schedule: dict = field(default_factory=dict)
    max_draft_len: int = 0
    max_concurrency: int | None = None
    vllm_schedule: dict = field(default_factory=dict)
    sglang: dict = field(default_factory=dict)

    @classmethod
    def from_rows(cls, *, rows: list, max_batch_size: int, curves: dict | None = None, **kw) -> "Recipe":
        """``curves``: batch -> {D: predicted speedup} for the optimal non-increasing schedule (optional)."""
        rows = [dict(r) for r in rows]
        schedule, max_len, capped = derive_schedule(rows, max_batch_size, curves)
        for r in rows:
            if capped[r["batch"]] != r["draft_len"]:
                r["schedule_draft_len"] = capped[r["batch"]]
                if curves and capped[r["batch"]] in curves.get(r["batch"], {}):
                    r["schedule_speedup"] = round(curves[r["batch"]][capped[r["batch"]]], 5)
        max_conc = None
        if len(schedule) == 1 and max(schedule) < max_batch_size:
            max_conc = max(schedule)
        first = min(rows, key=lambda r: r["batch"])
        # SGLang runs one shape at every batch size: the smallest batch's tree when the schedule keeps its
        # depth, else a chain of max_len (num_draft_tokens counts the root: depth + 1 for a chain)
        tree = max_len and int(first.get("topk", 1)) > 1 and int(first.get("draft_len", -1)) == max_len
        sglang = {"speculative_num_steps": max_len,
                  "speculative_eagle_topk": int(first["topk"]) if tree else 1,
                  "speculative_num_draft_tokens": int(first.get("num_nodes", max_len + 1)) if tree else max_len + 1}
        vllm = {int(b): int(d) for b, d in sorted(capped.items())}
        return cls(rows=rows, max_batch_size=max_batch_size, draft_len_schedule=schedule, max_draft_len=max_len,
                   max_concurrency=max_conc, vllm_schedule=vllm, sglang=sglang, **kw)

    def trtllm_speculative_config(self) -> dict:
        """The schedule part of TensorRT-LLM's ``speculative_config`` (never schedule and max_concurrency together)."""
        if self.max_draft_len == 0:
            return {"max_draft_len": 0}
        if self.max_concurrency is not None:
            return {"max_draft_len": self.max_draft_len, "max_concurrency": self.max_concurrency}
        if len(self.draft_len_schedule) == 1:
            return {"max_draft_len": self.max_draft_len}
        return {"max_draft_len": self.max_draft_len, "draft_len_schedule": dict(self.draft_len_schedule)}

    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "name": self.name, "model": self.model, "gpu": self.gpu, "tp": self.tp,
            "quant": self.quant, "drafter": self.drafter, "context": self.context,
            "max_batch_size": self.max_batch_size, "signature": self.signature, "acceptance": self.acceptance,
            "trtllm": {"draft_len_schedule": dict(self.draft_len_schedule), "max_draft_len": self.max_draft_len,
                       "max_concurrency": self.max_concurrency,
                       "speculative_config": self.trtllm_speculative_config()},
            "vllm": {"num_speculative_tokens_per_batch_size": dict(self.vllm_schedule)},
            "sglang": dict(self.sglang), "rows": self.rows, "provenance": self.provenance,
        }

    def save(self, path) -> Path:
        """Write YAML atomically (temp file in the same folder, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"# trtspec recipe {self.name}: generated by `trtspec plan`; edit the inputs, not this file.\n")
                yaml.safe_dump(self.to_dict(), f, sort_keys=False, width=120)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def from_dict(cls, doc: dict, where: str = "recipe") -> "Recipe":
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise CatalogError(f"{where}: expected a mapping with format {FORMAT!r}")
        for key in ("name", "model", "gpu", "drafter", "rows", "provenance", "trtllm"):
            if key not in doc:
                raise CatalogError(f"{where}: recipe lacks '{key}'")
        t = doc["trtllm"]
        return cls(name=doc["name"], model=doc["model"], gpu=doc["gpu"], tp=int(doc.get("tp", 1)),
                   quant=str(doc.get("quant", "none")), drafter=doc["drafter"], context=int(doc.get("context", 4096)),
                   max_batch_size=int(doc.get("max_batch_size", 256)), rows=list(doc["rows"]),
                   acceptance=doc.get("acceptance") or {}, signature=doc.get("signature") or {},
                   provenance=doc["provenance"], draft_len_schedule={int(k): int(v) for k, v in
                                                                     (t.get("draft_len_schedule") or {}).items()},
                   max_draft_len=int(t.get("max_draft_len", 0)), max_concurrency=t.get("max_concurrency"),
                   vllm_schedule={int(k): int(v) for k, v in
                                  ((doc.get("vllm") or {}).get("num_speculative_tokens_per_batch_size") or {}).items()},
                   sglang=doc.get("sglang") or {})

    @classmethod
    def load(cls, path) -> "Recipe":
        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise CatalogError(f"cannot read recipe {path}: {exc}") from exc
        return cls.from_dict(doc, str(path))


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
