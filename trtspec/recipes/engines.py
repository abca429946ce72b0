"""Serving engines: the per-step costs that kernel tables do not hold, per engine (``recipes/engines/<name>.yaml``).

A measured kernel table prices the kernels of a forward; a real engine step costs more. Per engine (``--engine``):

* ``step_us`` -- each target forward: scheduling, input preparation, sampling, the host sync of a CUDA-graph replay;
* ``spec_step_us`` -- each speculative step on top: the acceptance kernel, KV-cache rewind, draft bookkeeping;
* ``spec_layer_us`` -- each target layer of a speculative step on top (per-layer work that verification adds:
  tree / causal masks and positions, KV-cache rewind of rejected drafts, the draft's hidden-state capture), so it
  scales with the target's depth, not its width;
* ``spec_request_us`` -- each request of a speculative step on top (per-request host work: draft-token and
  acceptance bookkeeping, per-request metadata of the draft and verify forwards), so it grows with the batch;
* ``draft_forward_us`` -- each serial draft forward (EAGLE-3 / draft model / chained MTP: one per draft token; a
  parallel drafter -- DFlash, DSpark -- pays it once per block): the drafter's own launches, top-k and state copies;
* ``lookup_us`` / ``lookup_per_token_us`` -- the host-side n-gram / suffix-automaton proposal of ``ngram`` / ``sa``.

and one kernel figure no table holds (section ``verification``):

* ``verify_split`` -- how the engine's attention kernels verify T = 1+D query tokens per request, between two
  physical limits: 0 packs the T rows of a request into the MMA tiles of one decode pass (the KV cache is streamed
  once per tile: XQA's speculative mode, FlashInfer / FA3 GQA packing); 1 runs every verified token as a decode
  request of its own (the KV cache re-read T times: what aiconfigurator-core's ``nextn`` pricing assumes, and what a
  kernel without query packing or an L2 that cannot hold the request's KV does). A fraction in [0, 1]
  (``trtspec.recipes.pricing`` blends the two measured prices linearly).

One figure is never in an engine file: ``kernel_scale`` (default 1), a factor on every kernel-priced part of a step
(everything but these fixed costs), which only a deployment calibration (``trtspec calibrate``,
``trtspec.recipes.user_calibration``) sets: its kernels may run slower or faster than the measured tables.

Each figure is ``{value: x, justification: "..."}``; a fitted figure's justification says what it was fitted on
(the corpus, ``benchmarks/bench_fidelity.py --fit``). ``perf_db`` names the
aiconfigurator-core data version that prices this engine's kernels (``default``, and ``overrides`` per system).
"""
from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.recipes.errors import CatalogError, RecipeError
from trtspec.recipes.paths import book_dir, read_named_mapping

ENGINES = ("trtllm", "vllm", "sglang")
PARAMS = ("step_us", "spec_step_us", "spec_layer_us", "spec_request_us", "draft_forward_us", "lookup_us",
          "lookup_per_token_us")
_ATTRS = ("step", "spec_step", "spec_layer", "spec_request", "draft_forward", "lookup", "lookup_per_token")
SPLIT = "verify_split"
SCALE = "kernel_scale"


@dataclass(frozen=True)
class EngineProfile:
    """One serving engine's fixed costs (seconds) and the perf-db version that prices its kernels."""

    name: str
    display_name: str
    perf_db_version: str
    perf_db_overrides: dict
    step: float
    spec_step: float
    spec_layer: float
    spec_request: float
    draft_forward: float
    lookup: float
    lookup_per_token: float
    verify_split: float = 0.0
    kernel_scale: float = 1.0
    justifications: dict = field(default_factory=dict, compare=False)
    path: str = ""

    def __post_init__(self):
        if self.name not in ENGINES:
            raise CatalogError(f"engine {self.name!r}: expected one of {', '.join(ENGINES)}")
        for attr in _ATTRS:
            if not getattr(self, attr) >= 0:
                raise CatalogError(f"engine {self.name!r}: {attr} must be >= 0 seconds, got {getattr(self, attr)!r}")
        if not 0.0 <= self.verify_split <= 1.0:
            raise CatalogError(f"engine {self.name!r}: verification.{SPLIT} must be a fraction in [0, 1], got "
                               f"{self.verify_split!r}")
        if not self.kernel_scale > 0:
            raise CatalogError(f"engine {self.name!r}: {SCALE} must be > 0, got {self.kernel_scale!r}")

    def perf_db_version_for(self, system: str) -> str:
        """The aiconfigurator-core data version for ``system`` (an override, else the default)."""
        return str(self.perf_db_overrides.get(system, self.perf_db_version))

    def params_us(self) -> dict:
        """The overheads in microseconds, keyed as in the YAML (``PARAMS``)."""
        return {key: getattr(self, attr) * 1e6 for key, attr in zip(PARAMS, _ATTRS)}

    def with_params(self, **params) -> "EngineProfile":
        """A copy with some figures replaced (overheads in microseconds, keys of ``PARAMS``, ``verify_split`` and
        ``kernel_scale``); used by the fits."""
        unknown = set(params) - set(PARAMS) - {SPLIT, SCALE}
        if unknown:
            raise RecipeError(f"unknown engine parameters {sorted(unknown)}; expected {PARAMS + (SPLIT, SCALE)}")
        cur = {**self.params_us(), **{k: v for k, v in params.items() if k not in (SPLIT, SCALE)}}
        return EngineProfile(self.name, self.display_name, self.perf_db_version, self.perf_db_overrides,
                             *(cur[k] * 1e-6 for k in PARAMS), verify_split=float(params.get(SPLIT, self.verify_split)),
                             kernel_scale=float(params.get(SCALE, self.kernel_scale)),
                             justifications=self.justifications, path=self.path)


def _param(doc: dict, key: str, path: Path, section: str = "overheads", unit: str = "microseconds") -> tuple[float, str]:
    entry = (doc.get(section) or {}).get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        raise CatalogError(f"{path}: {section}.{key} must be a mapping {{value: ..., justification: ...}}")
    if not str(entry.get("justification") or "").strip():
        raise CatalogError(f"{path}: {section}.{key} has no justification; every figure needs one")
    try:
        value = float(entry["value"])
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{path}: {section}.{key} must be a number of {unit}, got {entry['value']!r}") from exc
    return value, str(entry["justification"])


def load_engine_file(path: str | Path) -> EngineProfile:
    """Parse and validate one engine YAML (see ``recipes/engines/trtllm.yaml``)."""
    path = Path(path)
    doc = read_named_mapping(path, "engine file")
    db = doc.get("perf_db") or {}
    if not str(db.get("version") or "").strip() or not str(db.get("source") or "").strip():
        raise CatalogError(f"{path}: 'perf_db' needs a 'version' and a 'source'")
    values, why = {}, {}
    for key in PARAMS:
        values[key], why[key] = _param(doc, key, path)
    split, why[SPLIT] = _param(doc, SPLIT, path, "verification", "a fraction in [0, 1]")
    return EngineProfile(
        name=str(doc["name"]), display_name=str(doc.get("display_name", doc["name"])),
        perf_db_version=str(db["version"]), perf_db_overrides={str(k): str(v) for k, v in (db.get("overrides") or {}).items()},
        **{attr: values[key] * 1e-6 for key, attr in zip(PARAMS, _ATTRS)}, verify_split=split, justifications=why,
        path=str(path))


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


def save_engine_file(profile: EngineProfile, path: str | Path, justifications: dict | None = None) -> Path:
    """Write ``profile`` as an engine YAML (temp file + rename); ``justifications`` replace the current ones per
    parameter (e.g. a fit's provenance)."""
    path = Path(path)
    if profile.kernel_scale != 1.0:
        raise RecipeError(f"engine {profile.name!r}: {SCALE} {profile.kernel_scale} is a deployment calibration's "
                          "figure (trtspec calibrate); an engine file holds none")
    why = {**profile.justifications, **(justifications or {})}
    missing = [k for k in PARAMS + (SPLIT,) if not str(why.get(k) or "").strip()]
    if missing:
        raise RecipeError(f"engine {profile.name!r}: no justification for {missing}")
    values = profile.params_us()
    overrides = ", ".join(f"{k}: {v}" for k, v in sorted(profile.perf_db_overrides.items()))
    lines = [f"# {profile.display_name}: per-step costs that kernel tables do not hold (trtspec.recipes.engines). "
             "Units: microseconds; verification: a fraction.",
             "# Fitted figures are rewritten by `python benchmarks/bench_fidelity.py --fit` (every source of the corpus; "
             "its leave-one-source-out table says how they transfer).",
             f"name: {profile.name}", f"display_name: {profile.display_name}", "perf_db:",
             f'  version: "{profile.perf_db_version}"', f"  overrides: {{{overrides}}}",
             f"  source: {_quote(PERF_DB_SOURCE.format(engine=profile.name))}", "overheads:"]
    for key in PARAMS:
        lines.append(f"  {key}: {{value: {round(values[key], 1)}, justification: {_quote(why[key])}}}")
    lines += ["verification:",
              f"  {SPLIT}: {{value: {round(profile.verify_split, 3)}, justification: {_quote(why[SPLIT])}}}"]
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        load_engine_file(tmp)  # what we wrote must load
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    load_engine.cache_clear()
    return path


PERF_DB_SOURCE = ("aiconfigurator-core 0.12.0 systems/query_versions.yaml: the 'current' {engine} slot (a100_sxm is a "
                  "frozen baseline with its own)")


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
