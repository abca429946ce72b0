"""Intervals on predicted speedups, shipped as data (``recipes/validation/intervals.yaml``).

Every speedup the planner prints carries the interval its validation supports (design.md, habit 7). The file is
written by ``python benchmarks/bench_fidelity.py --write-intervals`` from the corpus (``recipes/measurements``) and
never recomputed at plan time; it holds, per interval class (``interval_class``: the drafter class ``sequential`` /
``parallel`` / ``host-side``, with ``+moe`` for a target with routed experts; and ``all``), ``log_residual_q =
[-q, q]`` with q the 70th percentile of the leave-one-source-out |log(predicted / published)| of the corpus's
speedups in that class (``trtspec.recipes.validation.interval_table``), and, per drafter, the 10th and
90th percentiles (a10, a90) of log(published AL / the closest published prior's AL at that D)
(``acceptance_spread``: how far a prior can be from a deployment it was not measured on).

A predicted speedup p gets ``[p * exp(-q), p * exp(q)]``; with an acceptance prior instead of a measured profile
the AL spread widens it to ``[p * exp(-q + a10), p * exp(q + a90)]`` (both errors added at their ends: no
independence assumed). An interval that straddles 1 is ``uncertain``: the model cannot tell whether speculation wins
there.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from trtspec.recipes.errors import CatalogError
from trtspec.recipes.paths import book_dir

FORMAT = "trtspec.intervals/v1"
CLASSES = ("sequential", "parallel", "host-side")
MOE = "+moe"  # suffix of the interval class of a target with routed experts (``interval_class``)
# drafter kind -> interval class (trtspec.recipes.drafters.DRAFTER_CLASS, "lookup" named host-side)
_CLASS_OF = {"draft_model": "sequential", "eagle3": "sequential", "mtp": "sequential", "dflash": "parallel",
             "dspark": "parallel", "ngram": "host-side", "sa": "host-side"}


def interval_class(drafter: str, arch=None) -> str:
    """The interval class of a speedup of ``drafter`` on target ``arch``: the drafter's class, with ``+moe`` when
    the target has routed experts. An MoE target's verification price depends on which experts the B*(1+D) verified
    tokens touch (routing skew, the grouped-GEMM configuration the engine picks per token count) where the kernel
    tables hold one routing and the roofline uniform routing, and its leave-one-source-out residuals are about twice
    a dense target's (sequential drafters, corpus of 2026-12-02: 70th percentile of |log error| 0.29 on MoE
    targets, 0.11 on dense ones), so it gets its own residual percentile."""
    cls = _CLASS_OF.get(drafter, "")
    routed = arch is not None and getattr(arch, "moe", None) is not None and any(
        b.ffn == "moe" for b in getattr(arch, "blocks", ()))
    return cls + MOE if cls and routed else cls


def interval_path() -> Path:
    return book_dir() / "validation" / "intervals.yaml"


@dataclass(frozen=True)
class IntervalTable:
    """The shipped residual and acceptance-spread percentiles (see the module docstring)."""

    quantiles: tuple
    cost_model: dict      # class -> (q_lo, q_hi) of log(predicted / published)
    acceptance: dict      # drafter -> (a_lo, a_hi) of log(published AL / prior AL)
    how: str
    path: str = ""
    corpus_cases: int = 0  # speedups the percentiles were computed from
    level: float = 0.0     # the percentile of |log error| the cost-model intervals span

    def describe(self) -> str:
        """One line: what an interval is (for plan output, recipes and READMEs)."""
        return (f"{self.level:.0%} of the planner's leave-one-source-out errors on {self.corpus_cases} published "
                "speedups fall within it (both sides)")

    def cost_quantiles(self, drafter: str, arch=None) -> tuple:
        """(q_lo, q_hi) of the interval class of ``drafter`` on ``arch`` (``interval_class``), else of the drafter
        class, else ``all``."""
        for key in (interval_class(drafter, arch), _CLASS_OF.get(drafter, "")):
            if key in self.cost_model:
                return self.cost_model[key]
        return self.cost_model["all"]

    def interval(self, speedup: float, drafter: str, prior: bool = False, arch=None) -> tuple[float, float]:
        """The interval of a predicted ``speedup`` of ``drafter`` on target ``arch`` (``prior``: acceptance from a
        prior, not measured). D = 0 rows (no speculation) have no uncertainty: (1, 1) times the speedup."""
        q_lo, q_hi = self.cost_quantiles(drafter, arch)
        a_lo, a_hi = self.acceptance.get(drafter, self.acceptance.get("all", (0.0, 0.0))) if prior else (0.0, 0.0)
        return speedup * math.exp(-q_hi + a_lo), speedup * math.exp(-q_lo + a_hi)


def _pair(doc, key: str, where: str) -> tuple:
    v = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, (int, float)) for x in v) or v[0] > v[1]:
        raise CatalogError(f"{where}: '{key}' must be [low, high] numbers with low <= high, got {v!r}")
    return float(v[0]), float(v[1])


def parse_interval_doc(doc: dict, where: str = "intervals") -> IntervalTable:
    """Validate a parsed intervals document (see ``write_intervals`` for the layout)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CatalogError(f"{where}: expected 'format: {FORMAT}'")
    cost = doc.get("cost_model") or {}
    if "all" not in cost:
        raise CatalogError(f"{where}: cost_model needs an 'all' entry")
    table = {k: _pair(v, "log_residual_q", f"{where}: cost_model.{k}") for k, v in cost.items()}
    acc = {k: _pair(v, "log_ratio_q", f"{where}: acceptance_spread.{k}") for k, v in (doc.get("acceptance_spread")
                                                                                      or {}).items()}
    if not str(doc.get("how") or "").strip():
        raise CatalogError(f"{where}: 'how' must say how the percentiles were computed")
    n = int((doc.get("corpus") or {}).get("speedups_scored") or 0)
    return IntervalTable(tuple(doc.get("quantiles") or ()), table, acc, str(doc["how"]), where, n,
                         float(doc.get("level") or 0.0))


@functools.lru_cache(maxsize=1)
def load_intervals() -> IntervalTable:
    """The shipped table (``recipes/validation/intervals.yaml``)."""
    path = interval_path()
    if not path.is_file():
        raise CatalogError(f"{path} is missing; regenerate it with `python benchmarks/bench_fidelity.py "
                           "--write-intervals`")
    return parse_interval_doc(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


def write_intervals(doc: dict, path: Path | None = None) -> Path:
    """Validate ``doc`` and write it (temp file + rename)."""
    import os
    import tempfile

    parse_interval_doc(doc)
    path = Path(path or interval_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# Intervals of the planner's predicted speedups (trtspec.recipes.intervals). Written by\n"
                    "# `python benchmarks/bench_fidelity.py --write-intervals`; do not edit by hand.\n")
            yaml.safe_dump(doc, f, sort_keys=False, width=120)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    load_intervals.cache_clear()
    return path


def uncertain(lo: float, hi: float) -> bool:
    """True when the interval straddles 1 (speculation may win or lose)."""
    return lo < 1.0 < hi


def speedup_interval(req, spec, speedup: float) -> tuple[float, float]:
    """The interval of a plan's predicted ``speedup`` for drafter ``spec`` (``DrafterSpec``) under ``req``
    (``PlanRequest``): widened when the drafter's acceptance is a published prior (a profile named ``prior:...``)
    rather than measured on the deployment."""
    profile = req.acceptance.get(spec.kind)
    prior = bool(profile is not None and str(profile.name).startswith("prior:"))
    return load_intervals().interval(speedup, spec.kind, prior=prior, arch=req.model)


def settle_command(req, draft_len: int, base=None) -> str:
    """The measurement that settles an uncertain row: acceptance (and throughput) measured on the deployment."""
    return (f"`trtspec bench --server http://HOST:PORT --draft-len {draft_len}` against your server (or "
            f"`trtspec bench --sweep-draft-len 0..{max(draft_len, 1)}` on the local runtime), then `trtspec plan "
            "--acceptance <its acceptance.json>`")
