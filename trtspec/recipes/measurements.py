"""Published speculative-decoding measurements: the corpus the planner is calibrated and judged against.

``recipes/measurements/<source>.yaml`` holds one published source (a blog post, a pull request, a model card, a
paper): its address, title, date and the cases read from it. Each case is one measured configuration (model, GPU,
parallelism, quantization, engine, drafter, batch, draft length) with what was published for it: acceptance length
(AL, tokens per target step *including* the bonus token), the no-speculation baseline and the speculative figure
at the same batch, and the exact quote the figures come from. Nothing is guessed: a field the source does not
state is ``null``, and a figure computed from published ones (a speedup from two tok/s, a point read off a vector
figure) says so in ``notes``.

Performance figures, by ``metric``:

* ``output_tps_total`` / ``output_tps_per_user`` -- ``baseline_tokens_per_s`` and ``spec_tokens_per_s`` (tok/s);
* ``tpot_ms`` -- ``baseline_tpot_ms`` and ``spec_tpot_ms`` (ms per output token);
* ``speedup`` = spec / baseline throughput (= baseline / spec TPOT). The loader computes it when both figures are
  given and checks it (within 2%) when all three are.

Every case carries ``split`` (``train`` | ``heldout``), fixed in the data before anything is fitted. The rule
(:func:`split_for`) works on whole sweeps, so a published sweep never straddles the split: the unit is
``"<source>#<sweep>"`` for a case in a sweep and ``"<source>#<id>"`` for a case on its own, and a unit is held out
iff ``int(sha256(unit).hexdigest(), 16) % 3 == 0``.

Nothing is read at import time; :func:`load_measurements` reads the files when called.
"""
from __future__ import annotations

import datetime
import hashlib
import re
from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trtspec.recipes.errors import CatalogError
from trtspec.recipes.paths import book_dir

ENGINES = ("trtllm", "vllm", "sglang")
DRAFTERS = ("draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark", "peagle", "pard", "ngram", "sa", "medusa")
# "none" = bf16/fp16; "native" = the checkpoint as its publisher ships it (mixed formats; the case's notes say what)
QUANTS = ("none", "fp8", "mxfp8", "nvfp4", "mxfp4", "int4_awq", "w4a8_awq", "int8_sq", "native")
METRICS = ("output_tps_total", "output_tps_per_user", "tpot_ms")
SPLITS = ("train", "heldout")
SPEEDUP_TOLERANCE = 0.02  # relative: a stated speedup must match spec / baseline within 2%
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SOURCE = re.compile(r"^(https?://\S+|[\w.-]+/[\w.-]+#\d+|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+)$")


class MeasurementError(CatalogError):
    """A measurement file is malformed; the message names the file, the case id and the field."""


def split_unit(source: str, sweep: str | None, case_id: str) -> str:
    """The unit the split rule assigns: ``"<source>#<sweep>"``, or ``"<source>#<case id>"`` for a lone case."""
    return f"{source}#{sweep if sweep is not None else case_id}"


def split_for(unit: str) -> str:
    """``heldout`` iff ``int(sha256(unit), 16) % 3 == 0``, else ``train`` (``unit`` from :func:`split_unit`).

    Whole sweeps stay on one side; about a third of the units are held out. A unit's split depends on its own
    key only, so adding sources or sweeps never moves an existing case."""
    return "heldout" if int(hashlib.sha256(unit.encode("utf-8")).hexdigest(), 16) % 3 == 0 else "train"


def _gpu_names() -> tuple[str, ...]:
    from trtspec.recipes.gpus import gpu_names

    return tuple(n for n in gpu_names() if n != "cpu")


class Measurement(BaseModel):
    """One published measurement (see the module docstring for units and the speedup rule).

    ``num_gpus`` / ``tp`` / ``ep`` are ``None`` where the source does not state them. ``batch`` is a batch size or a
    client concurrency (``batch_kind``); ``draft_len`` is D for a chain or the depth of a tree (``tree_nodes`` =
    total draft tokens of the tree, ``topk`` its branching); ``al`` includes the bonus token; ``al_scope``:
    ``case`` (measured in this run, the default) or ``source`` (stated elsewhere in the same source for this
    configuration, quoted in ``al_quote``); ``acceptance_curve`` is [AL at D=1, D=2, ...] where a sweep publishes
    it. ``priced_quant``: for ``quant: native``, the trtspec ``--quant`` the checkpoint's published formats amount
    to (e.g. ``fp4:attn=fp8``), the notes saying where the formats are stated. ``sweep`` is shared by the cases of
    one published sweep (over D or over batch) and never spans two sources. ``best_of_tested``: the source calls
    this D the best of the draft lengths it tried at this batch (the others need not be published).
    ``draft_layers``: the decoder layers of a block drafter's draft (``dflash`` / ``dspark``) where the source
    states them (the planner's default is 5).

    How the figure was served (``trtspec.recipes.serving`` prices these; ``None``: not stated):
    ``includes_prefill`` -- the published figure is over a run in which every request's prefill also ran on the same
    GPUs (a serving benchmark's output tok/s or TPOT over whole requests; needs ``isl`` and ``osl``), ``False``: the
    decode phase alone (a decode rank of a prefill-decode disaggregated deployment, a server-side decode counter);
    ``pd_disaggregated`` -- prefill runs on other GPUs (then ``includes_prefill`` cannot be true); ``dp_attention``
    -- the attention data-parallel size (SGLang / vLLM ``--enable-dp-attention``): each of that many attention
    groups holds its own requests, so attention sees batch / dp_attention requests per GPU; it must divide the GPUs
    (``tp``, else ``num_gpus``); ``max_num_seqs`` -- the engine's cap on running requests (vLLM ``--max-num-seqs``,
    SGLang ``--max-running-requests``); ``kv_cache_tokens`` / ``spec_kv_cache_tokens`` -- the KV-cache capacity in
    tokens that the engine logged for the no-speculation and the speculative server of this case (vLLM ``GPU KV
    cache size: N tokens``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    title: str
    published: Optional[datetime.date] = None
    id: str
    quote: str = Field(min_length=1)
    model: str = Field(min_length=1)
    gpu: str
    num_gpus: Optional[int] = Field(default=None, ge=1)
    tp: Optional[int] = Field(default=None, ge=1)
    ep: Optional[int] = Field(default=None, ge=1)
    quant: Literal[QUANTS]
    engine: Literal[ENGINES]
    engine_version: Optional[str] = None
    drafter: Literal[DRAFTERS]
    draft_model: Optional[str] = None
    draft_layers: Optional[int] = Field(default=None, ge=1)
    batch: int = Field(ge=1)
    batch_kind: Literal["batch", "concurrency"]
    isl: Optional[int] = Field(default=None, ge=1)
    osl: Optional[int] = Field(default=None, ge=1)
    draft_len: Optional[int] = Field(default=None, ge=1)
    tree_nodes: Optional[int] = Field(default=None, ge=1)
    topk: Optional[int] = Field(default=None, ge=1)
    al: Optional[float] = Field(default=None, ge=1.0)
    al_scope: Literal["case", "source"] = "case"
    al_quote: Optional[str] = None
    priced_quant: Optional[str] = None
    acceptance_curve: Optional[list[float]] = None
    baseline_tokens_per_s: Optional[float] = Field(default=None, gt=0)
    spec_tokens_per_s: Optional[float] = Field(default=None, gt=0)
    baseline_tpot_ms: Optional[float] = Field(default=None, gt=0)
    spec_tpot_ms: Optional[float] = Field(default=None, gt=0)
    speedup: Optional[float] = Field(default=None, gt=0)
    metric: Literal[METRICS]
    sweep: Optional[str] = None
    best_of_tested: bool = False
    dataset: Optional[str] = None
    includes_prefill: Optional[bool] = None
    pd_disaggregated: bool = False
    dp_attention: Optional[int] = Field(default=None, ge=1)
    max_num_seqs: Optional[int] = Field(default=None, ge=1)
    kv_cache_tokens: Optional[int] = Field(default=None, ge=1)
    spec_kv_cache_tokens: Optional[int] = Field(default=None, ge=1)
    split: Literal[SPLITS]
    notes: Optional[str] = None

    @field_validator("id", "sweep")
    @classmethod
    def _slug(cls, v):
        if v is not None and not _ID.match(v):
            raise ValueError(f"must be lower-case letters, digits, '.', '_' or '-', got {v!r}")
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v):
        if not _SOURCE.match(v):
            raise ValueError(f"must be a URL, owner/repo#N or owner/repo@commit:path, got {v!r}")
        return v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v):
        names = _gpu_names()
        if v not in names:
            raise ValueError(f"unknown GPU {v!r}; expected one of {', '.join(names)}")
        return v

    @field_validator("priced_quant")
    @classmethod
    def _priced_quant(cls, v):
        if v is not None:
            from trtspec.recipes.costmodel import Precision
            from trtspec.recipes.errors import RecipeError

            try:
                Precision.of(v)
            except RecipeError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("acceptance_curve")
    @classmethod
    def _curve(cls, v):
        if v is not None and (not v or any(not 1.0 <= x <= k + 2 for k, x in enumerate(v))):
            raise ValueError(f"must list AL at D=1, 2, ... with 1 <= AL(D) <= D+1, got {v!r}")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        self._check_shape()
        self._check_figures()
        return self

    def _check_shape(self):
        if self.tp is not None and self.num_gpus is not None and self.tp > self.num_gpus:
            raise ValueError(f"tp: {self.tp} exceeds num_gpus={self.num_gpus}")
        if self.al is not None and self.draft_len is not None and self.al > self.draft_len + 1 + 1e-9:
            raise ValueError(f"al: {self.al} exceeds draft_len + 1 = {self.draft_len + 1} (AL includes the bonus token)")
        if self.al_scope == "source" and (self.al is None or not (self.al_quote or "").strip()):
            raise ValueError("al_quote: an AL stated elsewhere in the source (al_scope: source) needs al and the "
                             "sentence it comes from")
        if self.al_quote is not None and self.al_scope != "source":
            raise ValueError("al_scope: al_quote is for an AL stated elsewhere in the source; set al_scope: source")
        if self.priced_quant is not None and self.quant != "native":
            raise ValueError(f"priced_quant: only for quant: native (the checkpoint as shipped), got quant {self.quant!r}")
        if self.tree_nodes is not None and (self.draft_len is None or self.tree_nodes < self.draft_len):
            raise ValueError(f"tree_nodes: {self.tree_nodes} needs a draft_len (tree depth) <= tree_nodes")
        if self.includes_prefill and self.pd_disaggregated:
            raise ValueError("includes_prefill: a prefill-decode disaggregated deployment prefills on other GPUs")
        if self.includes_prefill and (self.isl is None or self.osl is None):
            raise ValueError("includes_prefill: pricing the prefill in the figure needs isl and osl")
        gpus = self.tp or self.num_gpus
        if self.dp_attention is not None and (gpus is None or gpus % self.dp_attention):
            raise ValueError(f"dp_attention: {self.dp_attention} must divide the GPUs (tp, else num_gpus), got {gpus}")
        if self.spec_kv_cache_tokens is not None and self.draft_len is None:
            raise ValueError("spec_kv_cache_tokens: the speculative server's capacity needs the case's draft_len")

    def _check_figures(self):
        tps = (self.baseline_tokens_per_s, self.spec_tokens_per_s)
        tpot = (self.baseline_tpot_ms, self.spec_tpot_ms)
        if self.metric == "tpot_ms" and any(x is not None for x in tps):
            raise ValueError("metric: tpot_ms takes baseline_tpot_ms / spec_tpot_ms, not *_tokens_per_s")
        if self.metric != "tpot_ms" and any(x is not None for x in tpot):
            raise ValueError(f"metric: {self.metric} takes *_tokens_per_s, not *_tpot_ms")
        computed = None
        if None not in tps:
            computed = tps[1] / tps[0]
        elif None not in tpot:
            computed = tpot[0] / tpot[1]
        if computed is not None and self.speedup is not None:
            if abs(self.speedup - computed) > SPEEDUP_TOLERANCE * computed:
                raise ValueError(f"speedup: {self.speedup} disagrees with spec/baseline = {computed:.4f} "
                                 f"(tolerance {SPEEDUP_TOLERANCE:.0%})")
        if computed is not None and self.speedup is None:
            object.__setattr__(self, "speedup", round(computed, 4))
        if self.speedup is None and self.spec_tokens_per_s is None and self.spec_tpot_ms is None:
            raise ValueError("speedup: needs a performance figure: speedup, or spec_tokens_per_s / spec_tpot_ms")

    @property
    def is_tree(self) -> bool:
        return self.tree_nodes is not None

    @property
    def split_unit(self) -> str:
        """The key the split rule hashes (see :func:`split_unit`)."""
        return split_unit(self.source, self.sweep, self.id)


def _case_error(path: Path, case_id: str, exc: ValidationError) -> MeasurementError:
    parts = []
    for err in exc.errors():
        field = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if not field:  # a cross-field check: its message starts with the field it blames
            field, _, msg = msg.partition(": ")
        parts.append(f"field '{field}': {msg}")
    return MeasurementError(f"{path}: case {case_id!r}: " + "; ".join(parts))


def _load_file(path: Path) -> list[Measurement]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise MeasurementError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise MeasurementError(f"{path}: expected a mapping with source, title, published, cases")
    unknown = set(doc) - {"source", "title", "published", "cases"}
    if unknown:
        raise MeasurementError(f"{path}: unknown top-level field(s) {sorted(unknown)}; expected source, title, "
                               "published, cases")
    for key in ("source", "title"):
        if not isinstance(doc.get(key), str) or not doc[key].strip():
            raise MeasurementError(f"{path}: field '{key}' is required (a non-empty string)")
    cases = doc.get("cases")
    if not isinstance(cases, list) or not cases:
        raise MeasurementError(f"{path}: field 'cases' must be a non-empty list")
    out = []
    for i, case in enumerate(cases):
        case_id = case.get("id", f"#{i}") if isinstance(case, dict) else f"#{i}"
        if not isinstance(case, dict):
            raise MeasurementError(f"{path}: case {case_id!r}: expected a mapping")
        clash = {"source", "title", "published"} & set(case)
        if clash:
            raise MeasurementError(f"{path}: case {case_id!r}: field(s) {sorted(clash)} belong to the file, not a case")
        try:
            out.append(Measurement(source=doc["source"], title=doc["title"], published=doc.get("published"), **case))
        except ValidationError as exc:
            raise _case_error(path, case_id, exc) from None
    by_sweep: dict[str, set] = {}
    for m in out:
        if m.sweep is not None:
            by_sweep.setdefault(m.sweep, set()).add(m.split)
            if len(by_sweep[m.sweep]) > 1:
                raise MeasurementError(f"{path}: case {m.id!r}: field 'split': all cases of sweep {m.sweep!r} must "
                                       f"share a split, got {sorted(by_sweep[m.sweep])}")
    return out


def measurement_files() -> list[Path]:
    """The shipped corpus files (``recipes/measurements/*.yaml`` in the recipe book), sorted by name."""
    return sorted((book_dir() / "measurements").glob("*.yaml"))


def load_measurements(paths=None) -> list[Measurement]:
    """Read and validate measurement files (default: the shipped corpus), in file order.

    Raises ``MeasurementError`` naming the file, the case id and the field for a malformed case, a duplicate id
    (across all files read), or a sweep id used by two sources."""
    files = [Path(p) for p in paths] if paths is not None else measurement_files()
    if not files:
        raise MeasurementError(f"no measurement files found under {book_dir() / 'measurements'}")
    seen: dict[str, Path] = {}
    sweeps: dict[str, str] = {}
    out: list[Measurement] = []
    for path in files:
        for m in _load_file(path):
            if m.id in seen:
                raise MeasurementError(f"{path}: case {m.id!r}: field 'id': duplicate id, already used in {seen[m.id]}")
            seen[m.id] = path
            if m.sweep is not None and sweeps.setdefault(m.sweep, m.source) != m.source:
                raise MeasurementError(f"{path}: case {m.id!r}: field 'sweep': sweep {m.sweep!r} is already used "
                                       f"by source {sweeps[m.sweep]}")
            out.append(m)
    return out


def sweeps(measurements) -> dict[str, list[Measurement]]:
    """The published sweeps: ``{sweep id: its cases in file order}`` (cases without a sweep are left out)."""
    out: dict[str, list[Measurement]] = {}
    for m in measurements:
        if m.sweep is not None:
            out.setdefault(m.sweep, []).append(m)
    return out
