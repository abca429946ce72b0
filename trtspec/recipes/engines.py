"""Serving engines: the per-step costs that kernel tables do not hold, per engine (``recipes/engines/<name>.yaml``).

A measured kernel table prices the kernels of a forward; a real engine step costs more. Per engine (``--engine``):

* ``step_us`` -- each target forward: scheduling, input preparation, sampling, the host sync of a CUDA-graph replay;
* ``spec_step_us`` -- each speculative step on top: the acceptance kernel, KV-cache rewind, draft bookkeeping;
* ``draft_forward_us`` -- each serial draft forward (EAGLE-3 / draft model / chained MTP: one per draft token; a
  parallel drafter -- DFlash, DSpark -- pays it once per block): the drafter's own launches, top-k and state copies;
* ``lookup_us`` / ``lookup_per_token_us`` -- the host-side n-gram / suffix-automaton proposal of ``ngram`` / ``sa``.

Each figure is ``{value: x, justification: "..."}``; a fitted figure's justification says what it was fitted on
(the corpus's ``split: train`` cases, ``benchmarks/bench_fidelity.py --fit``). ``perf_db`` names the
aiconfigurator-core data version that prices this engine's kernels (``default``, and ``overrides`` per system).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes.errors import CatalogError, RecipeError
from trtspec.recipes.paths import book_dir

ENGINES = ("trtllm", "vllm", "sglang")
PARAMS = ("step_us", "spec_step_us", "draft_forward_us", "lookup_us", "lookup_per_token_us")


@dataclass(frozen=True)
class EngineProfile:
    """One serving engine's fixed costs (seconds) and the perf-db version that prices its kernels."""

    name: str
    display_name: str
    perf_db_version: str
    perf_db_overrides: dict
    step: float
    spec_step: float
    draft_forward: float
    lookup: float
    lookup_per_token: float
    justifications: dict = field(default_factory=dict, compare=False)
    path: str = ""

    def __post_init__(self):
        if self.name not in ENGINES:
            raise CatalogError(f"engine {self.name!r}: expected one of {', '.join(ENGINES)}")
        for attr in ("step", "spec_step", "draft_forward", "lookup", "lookup_per_token"):
            if not getattr(self, attr) >= 0:
                raise CatalogError(f"engine {self.name!r}: {attr} must be >= 0 seconds, got {getattr(self, attr)!r}")

    def perf_db_version_for(self, system: str) -> str:
        """The aiconfigurator-core data version for ``system`` (an override, else the default)."""
        return str(self.perf_db_overrides.get(system, self.perf_db_version))

    def params_us(self) -> dict:
        """The overheads in microseconds, keyed as in the YAML (``PARAMS``)."""
        return {"step_us": self.step * 1e6, "spec_step_us": self.spec_step * 1e6,
                "draft_forward_us": self.draft_forward * 1e6, "lookup_us": self.lookup * 1e6,
                "lookup_per_token_us": self.lookup_per_token * 1e6}

    def with_params(self, **params_us) -> "EngineProfile":
        """A copy with some overheads replaced (microseconds, keys of ``PARAMS``); used by the fit."""
        unknown = set(params_us) - set(PARAMS)
        if unknown:
            raise RecipeError(f"unknown engine parameters {sorted(unknown)}; expected {PARAMS}")
        cur = {**self.params_us(), **params_us}
        return EngineProfile(self.name, self.display_name, self.perf_db_version, self.perf_db_overrides,
                             cur["step_us"] * 1e-6, cur["spec_step_us"] * 1e-6, cur["draft_forward_us"] * 1e-6,
                             cur["lookup_us"] * 1e-6, cur["lookup_per_token_us"] * 1e-6, self.justifications,
                             self.path)


def _param(doc: dict, key: str, path: Path) -> tuple[float, str]:
    entry = (doc.get("overheads") or {}).get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        raise CatalogError(f"{path}: overheads.{key} must be a mapping {{value: ..., justification: ...}}")
    if not str(entry.get("justification") or "").strip():
        raise CatalogError(f"{path}: overheads.{key} has no justification; every figure needs one")
    try:
        value = float(entry["value"])
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{path}: overheads.{key} must be a number of microseconds, got {entry['value']!r}") from exc
    return value, str(entry["justification"])


def load_engine_file(path: str | Path) -> EngineProfile:
    """Parse and validate one engine YAML (see ``recipes/engines/trtllm.yaml``)."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read engine file {path}: {exc}") from exc
    if not isinstance(doc, dict) or not doc.get("name"):
        raise CatalogError(f"{path}: expected a mapping with a 'name'")
    db = doc.get("perf_db") or {}
    if not str(db.get("version") or "").strip() or not str(db.get("source") or "").strip():
        raise CatalogError(f"{path}: 'perf_db' needs a 'version' and a 'source'")
    values, why = {}, {}
    for key in PARAMS:
        values[key], why[key] = _param(doc, key, path)
    return EngineProfile(
        name=str(doc["name"]), display_name=str(doc.get("display_name", doc["name"])),
        perf_db_version=str(db["version"]), perf_db_overrides={str(k): str(v) for k, v in (db.get("overrides") or {}).items()},
        step=values["step_us"] * 1e-6, spec_step=values["spec_step_us"] * 1e-6,
        draft_forward=values["draft_forward_us"] * 1e-6, lookup=values["lookup_us"] * 1e-6,
        lookup_per_token=values["lookup_per_token_us"] * 1e-6, justifications=why, path=str(path))


@functools.lru_cache(maxsize=None)
def load_engine(name: str) -> EngineProfile:
    """The engine profile ``recipes/engines/<name>.yaml``; unknown names list the known ones."""
    key = str(name).strip().lower()
    if key not in ENGINES:
        raise RecipeError(f"unknown --engine {name!r}; expected one of {', '.join(ENGINES)}")
    path = book_dir() / "engines" / f"{key}.yaml"
    if not path.is_file():
        raise CatalogError(f"engine file {path} is missing; reinstall trtspec")
    return load_engine_file(path)
