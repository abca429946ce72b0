"""A deployment's own measurements and the calibration file fitted to them (``trtspec calibrate``).

The planner's engine figures (``recipes/engines/<engine>.yaml``) are fitted on the published corpus; a real
deployment differs (engine version, clocks, scheduler settings). A user who measured a few points on their own
deployment gives them here; ``trtspec.recipes.user_fit`` fits that deployment's figures, regularised toward the
corpus fit, and the result is a **calibration file** that ``trtspec plan --calibration FILE`` and
``trtspec build --calibration FILE`` use in place of the engine file.

**Input** (``read_inputs``): any mix of

* a YAML / JSON file: ``{setup: {...}, points: [{...}, ...]}`` (``format: trtspec.deployment_points/v1``
  optional);
* a CSV file with a header row naming the point columns (its setup comes from the command line);
* a ``bench.json`` written by ``trtspec bench --server`` / ``--triton`` (one point: concurrency, D, measured AL and
  tokens/s of that run; its drafter and, for a server, the engine whose metrics answered, fill the setup).

Point columns (``COLUMNS``; units in ``COLUMN_HELP``): ``batch``, ``draft_len``, ``al``, and ``tokens_per_s`` (or,
where only a ratio was measured, ``speedup``); optional ``context``, ``tree_nodes``, ``topk``. Setup fields
(``SETUP_FIELDS``): ``model``, ``gpu``, ``drafter`` (required), ``tp``, ``ep``, ``quant``, ``engine``,
``draft_model``, ``context`` (defaults: ``PlanRequest``'s). Every input is checked before anything is fitted: a
bad value stops with one line naming the file, the row and the field (``CalibrationInputError``).

**Calibration file** (``DeploymentCalibration``, YAML or JSON; ``format: trtspec.deployment_calibration/v1``):
``setup`` (what it is valid for), ``parameters`` (every engine figure: value, standard deviation, the corpus prior
and its width, whether it was fitted), ``points`` (measured, predicted before and after), ``fit`` (summary), and
``inputs``. ``read_calibration`` tells it from a ``trtspec profile`` cost table by its ``format`` key;
``DeploymentCalibration.check_request`` refuses a plan for another setup, naming each mismatch.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.recipes.errors import CalibrationError

INPUT_FORMAT = "trtspec.deployment_points/v1"
FORMAT = "trtspec.deployment_calibration/v1"
REQUIRED = ("batch", "draft_len", "al")
FIGURES = ("tokens_per_s", "speedup")  # exactly one per point
OPTIONAL = ("context", "tree_nodes", "topk")
COLUMNS = REQUIRED + FIGURES + OPTIONAL
COLUMN_HELP = {
    "batch": "requests in flight (batch size or client concurrency), integer >= 1",
    "draft_len": "D, draft tokens per step (the depth of a tree); 0 = speculation off, integer >= 0",
    "al": "measured acceptance length, tokens per target step including the bonus token: 1 <= AL <= D+1 (1 at D=0)",
    "tokens_per_s": "measured output tokens/s summed over all requests in flight, > 0",
    "speedup": "instead of tokens_per_s: measured tok/s over the same batch's tok/s at D=0, > 0 (needs D >= 1)",
    "context": "KV-cache tokens per request (prompt + half the output) [default: the setup's context]",
    "tree_nodes": "a tree's total draft tokens (TensorRT-LLM max_total_draft_tokens), >= D [default: a chain]",
    "topk": "a tree's branching per node, >= 1 [default 1]",
}
SETUP_FIELDS = ("model", "gpu", "drafter", "tp", "ep", "quant", "engine", "draft_model", "context")
BENCH_RUNNERS = ("server", "triton")


class CalibrationInputError(CalibrationError):
    """A bad measurement input; the message names the file, the row and the field."""


def _plan_default(name: str):
    from trtspec.recipes.optimizer import PlanRequest

    return PlanRequest.__dataclass_fields__[name].default


@dataclass(frozen=True)
class Setup:
    """The deployment the points were measured on (see the module docstring); ``resolve`` checks every field."""

    model: str
    gpu: str
    drafter: str
    tp: int
    ep: int
    quant: str
    engine: str
    context: int
    draft_model: str | None = None

    @classmethod
    def from_fields(cls, fields: dict, where: str = "setup") -> "Setup":
        """A setup from a mapping (missing fields: ``PlanRequest``'s defaults); names the bad field."""
        unknown = sorted(set(fields) - set(SETUP_FIELDS))
        if unknown:
            raise CalibrationInputError(f"{where}: unknown field {unknown[0]!r}; expected {', '.join(SETUP_FIELDS)}")
        missing = [k for k in ("model", "gpu", "drafter") if fields.get(k) in (None, "")]
        if missing:
            raise CalibrationInputError(f"{where}: missing {missing[0]!r} (in the file's setup or as --{missing[0]})")
        out = {}
        for key in SETUP_FIELDS:
            value = fields.get(key)
            if value is None:
                continue
            if key in ("tp", "ep", "context"):
                value = _integer(value, f"{where}.{key}", low=0 if key == "context" else 1)
            else:
                value = str(value).strip()
                if key in ("model", "draft_model") and Path(value).expanduser().exists():
                    value = str(Path(value).expanduser().resolve())  # valid wherever the calibration is used
            out[key] = value
        defaults = {k: _plan_default(k) for k in ("tp", "ep", "quant", "engine", "context")}
        return cls(**{**defaults, **out})

    def resolve(self):
        """(architecture, GPU, drafter spec): loads each named thing, or raises naming ``setup.<field>``."""
        from trtspec.recipes.arch import load_architecture
        from trtspec.recipes.costmodel import Precision
        from trtspec.recipes.drafters import DRAFTERS, DrafterSpec
        from trtspec.recipes.engines import ENGINES
        from trtspec.recipes.errors import RecipeError
        from trtspec.recipes.gpus import load_gpu

        def check(name, fn):
            try:
                return fn()
            except RecipeError as exc:
                raise CalibrationInputError(f"setup.{name}: {exc}") from exc

        if self.engine not in ENGINES:
            raise CalibrationInputError(f"setup.engine: unknown engine {self.engine!r}; expected {', '.join(ENGINES)}")
        if self.drafter not in DRAFTERS:
            raise CalibrationInputError(f"setup.drafter: unknown drafter {self.drafter!r}; expected "
                                        f"{', '.join(DRAFTERS)}")
        if self.tp % self.ep:
            raise CalibrationInputError(f"setup.ep: {self.ep} does not divide tp {self.tp}")
        arch = check("model", lambda: load_architecture(self.model))
        gpu = check("gpu", lambda: load_gpu(self.gpu))
        check("quant", lambda: Precision.of(self.quant))
        if self.drafter == "mtp" and arch.mtp_layers == 0:
            raise CalibrationInputError(f"setup.drafter: model {arch.name!r} has no MTP layers")
        draft = check("draft_model", lambda: load_architecture(self.draft_model)) if self.draft_model else None
        spec = check("draft_model", lambda: DrafterSpec(self.drafter, draft_arch=draft))
        return arch, gpu, spec

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured configuration (``COLUMN_HELP``); ``figure`` is ``tokens_per_s`` or ``speedup``, ``where`` the
    file and row it came from."""

    batch: int
    draft_len: int
    al: float
    value: float
    figure: str = "tokens_per_s"
    context: int | None = None
    tree_nodes: int | None = None
    topk: int | None = None
    where: str = ""

    def to_dict(self) -> dict:
        out = {"batch": self.batch, "draft_len": self.draft_len, "al": self.al, self.figure: self.value}
        out.update({k: getattr(self, k) for k in OPTIONAL if getattr(self, k) is not None})
        return out


@dataclass(frozen=True)
class Deployment:
    """A validated setup and its points (``read_inputs``)."""

    setup: Setup
    points: tuple
    inputs: tuple = ()


def _integer(value, where: str, low: int) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CalibrationInputError(f"{where}: expected an integer >= {low}, got {value!r}") from None
    if not math.isfinite(number) or number != int(number) or number < low:
        raise CalibrationInputError(f"{where}: expected an integer >= {low}, got {value!r}")
    return int(number)


def _number(value, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CalibrationInputError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise CalibrationInputError(f"{where}: expected a finite number, got {value!r}")
    return number


def check_point(raw: dict, where: str) -> MeasuredPoint:
    """One row (a mapping of ``COLUMNS``) as a ``MeasuredPoint``; raises naming ``where`` and the field."""
    raw = {k: v for k, v in raw.items() if v not in (None, "")}
    unknown = sorted(set(raw) - set(COLUMNS))
    if unknown:
        raise CalibrationInputError(f"{where}: unknown column {unknown[0]!r}; expected {', '.join(COLUMNS)}")
    for key in REQUIRED:
        if key not in raw and not (key == "al" and _is_zero(raw.get("draft_len"))):
            raise CalibrationInputError(f"{where}: missing column {key!r} ({COLUMN_HELP[key]})")
    given = [k for k in FIGURES if k in raw]
    if len(given) != 1:
        raise CalibrationInputError(f"{where}: {'missing column' if not given else 'both columns'} "
                                    f"'tokens_per_s'{' or' if not given else ' and'} 'speedup' (give one)")
    batch = _integer(raw["batch"], f"{where}: batch", 1)
    d = _integer(raw["draft_len"], f"{where}: draft_len", 0)
    al = _number(raw.get("al", 1.0), f"{where}: al")
    if d == 0 and al != 1.0:
        raise CalibrationInputError(f"{where}: al must be 1 at draft_len 0 (no drafts, one token per step), got {al}")
    if not 1.0 <= al <= d + 1:
        raise CalibrationInputError(f"{where}: al {al} outside [1, draft_len + 1 = {d + 1}] (AL counts the bonus "
                                    "token; a step accepts at most D drafts)")
    value = _number(raw[given[0]], f"{where}: {given[0]}")
    if value <= 0:
        raise CalibrationInputError(f"{where}: {given[0]} must be > 0, got {value}")
    if given[0] == "speedup" and d == 0:
        raise CalibrationInputError(f"{where}: speedup needs draft_len >= 1 (D = 0 is the reference itself)")
    context = _integer(raw["context"], f"{where}: context", 0) if "context" in raw else None
    nodes = _integer(raw["tree_nodes"], f"{where}: tree_nodes", max(d, 1)) if "tree_nodes" in raw else None
    if nodes is not None and d == 0:
        raise CalibrationInputError(f"{where}: tree_nodes needs draft_len >= 1")
    topk = _integer(raw["topk"], f"{where}: topk", 1) if "topk" in raw else None
    return MeasuredPoint(batch, d, al, value, given[0], context, nodes, topk, where)


def _is_zero(value) -> bool:
    try:
        return float(value) == 0.0
    except (TypeError, ValueError):
        return False


def _read_csv(path: Path) -> tuple[dict, list]:
    with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: a spreadsheet's byte-order mark
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not header:
            raise CalibrationInputError(f"{path}: empty CSV; the first line names the columns ({', '.join(COLUMNS)})")
        reader.fieldnames = header
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise CalibrationInputError(f"{path}: missing column {missing[0]!r} in the header "
                                        f"({COLUMN_HELP[missing[0]]})")
        rows = []
        for row in reader:
            if None in row:
                raise CalibrationInputError(f"{path} line {reader.line_num}: more cells than header columns")
            if any(str(v or "").strip() for v in row.values()):
                rows.append((f"{path} line {reader.line_num}", {k: (v or "").strip() for k, v in row.items()}))
    return {}, rows


def _bench_point(path: Path, doc: dict) -> tuple[dict, list]:
    """A ``trtspec bench`` report (bench.json) as one point: its concurrency, D, mean AL and tokens/s."""
    meta = doc.get("meta") or {}
    if meta.get("runner") not in BENCH_RUNNERS:
        raise CalibrationInputError(f"{path}: meta.runner {meta.get('runner')!r}: only a bench of a deployment "
                                    f"(runner {' or '.join(BENCH_RUNNERS)}: `trtspec bench --server` / --triton) "
                                    "measures its throughput")
    tput = doc.get("throughput") or {}
    if not tput.get("tokens_per_s"):
        raise CalibrationInputError(f"{path}: throughput.tokens_per_s missing (the run measured no wall time)")
    row = {"batch": meta.get("concurrency"), "draft_len": meta.get("draft_len"),
           "al": (doc.get("overall") or {}).get("mean_al"), "tokens_per_s": tput["tokens_per_s"]}
    from trtspec.recipes.engines import ENGINES

    setup = {"drafter": meta["drafter"]} if meta.get("drafter") else {}
    if meta.get("engine") in ENGINES:  # the server engine whose metrics `trtspec bench` read
        setup["engine"] = meta["engine"]
    return setup, [(f"{path} (bench.json)", row)]


def _read_mapping(path: Path) -> tuple[dict, list]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CalibrationInputError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise CalibrationInputError(f"{path}: expected a mapping with 'setup' and 'points'")
    if "meta" in doc and "overall" in doc:
        return _bench_point(path, doc)
    if doc.get("format") not in (None, INPUT_FORMAT):
        raise CalibrationInputError(f"{path}: format {doc.get('format')!r}; expected {INPUT_FORMAT!r}, a CSV or a "
                                    "bench.json")
    unknown = sorted(set(doc) - {"format", "setup", "points"})
    if unknown:
        raise CalibrationInputError(f"{path}: unknown key {unknown[0]!r}; expected setup, points")
    setup, points = doc.get("setup") or {}, doc.get("points")
    if not isinstance(setup, dict):
        raise CalibrationInputError(f"{path}: setup must be a mapping of {', '.join(SETUP_FIELDS)}")
    if not isinstance(points, list) or not points:
        raise CalibrationInputError(f"{path}: 'points' must be a non-empty list of rows ({', '.join(COLUMNS)})")
    rows = []
    for i, row in enumerate(points):
        if not isinstance(row, dict):
            raise CalibrationInputError(f"{path} points[{i}]: expected a mapping of {', '.join(COLUMNS)}")
        rows.append((f"{path} points[{i}]", row))
    return setup, rows


def read_inputs(paths, setup_options: dict | None = None) -> Deployment:
    """Read and check every input (module docstring) and the setup: fields from the files, completed by
    ``setup_options`` (e.g. the command line's; a field given both ways must agree). Nothing is fitted here."""
    if not paths:
        raise CalibrationInputError("no input: give a YAML/JSON/CSV file of points or a bench.json")
    fields: dict = {}
    origin: dict = {}
    rows = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise CalibrationInputError(f"{path}: no such file")
        setup, found = _read_csv(path) if path.suffix.lower() == ".csv" else _read_mapping(path)
        for key, value in setup.items():
            if key in fields and str(fields[key]) != str(value):
                raise CalibrationInputError(f"{path}: setup.{key} {value!r} differs from {fields[key]!r} in "
                                            f"{origin[key]}")
            fields[key], origin[key] = value, path
        rows += found
    for key, value in (setup_options or {}).items():
        if value is None:
            continue
        if key in fields and str(fields[key]) != str(value):
            raise CalibrationInputError(f"--{key.replace('_', '-')} {value!r} differs from setup.{key} "
                                        f"{fields[key]!r} in {origin[key]}")
        fields[key] = value
    setup = Setup.from_fields(fields)
    points = tuple(check_point(row, where) for where, row in rows)
    setup.resolve()
    return Deployment(setup, points, tuple(str(p) for p in paths))


# ---- the calibration file ------------------------------------------------------------------------------------------

@dataclass
class DeploymentCalibration:
    """A fitted calibration (module docstring). ``parameters``: name -> {value, sd, prior, prior_sd, space,
    fitted}; ``engine_profile()`` is what the planner prices with."""

    setup: Setup
    parameters: dict
    points: list
    fit: dict
    inputs: list = field(default_factory=list)
    created: str = ""
    generated_by: str = ""
    path: str = ""

    def values(self) -> dict:
        return {k: float(v["value"]) for k, v in self.parameters.items()}

    def engine_profile(self):
        """The setup's engine profile with every stored figure; its ``path`` is this file and each figure's
        justification says how it was fitted."""
        from trtspec.recipes.engines import PARAMS, SCALE, SPLIT, load_engine

        base = load_engine(self.setup.engine)
        known = {k: v for k, v in self.values().items() if k in (*PARAMS, SPLIT, SCALE)}
        why = {k: (f"trtspec calibrate ({self.path or 'this calibration'}): "
                   + (f"fitted on {self.fit.get('points')} measured points" if p.get("fitted")
                      else "held at the engine file's value")) for k, p in self.parameters.items()}
        profile = base.with_params(**known)
        return dataclasses.replace(profile, justifications={**base.justifications, **why},
                                   path=self.path or profile.path)

    def to_doc(self) -> dict:
        return {"format": FORMAT, "created": self.created, "generated_by": self.generated_by,
                "setup": self.setup.to_dict(), "parameters": self.parameters, "fit": self.fit,
                "points": self.points, "inputs": list(self.inputs)}

    def save(self, path) -> Path:
        """Write YAML (or JSON for a ``.json`` path) to a temp file and rename it onto ``path``."""
        import yaml

        path = Path(path)
        text = json.dumps(self.to_doc(), indent=2) + "\n" if path.suffix.lower() == ".json" else \
            yaml.safe_dump(self.to_doc(), sort_keys=False, width=110)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.path = str(path)
        return path

    def check_request(self, req) -> None:
        """Raise ``CalibrationError`` naming every field where the plan ``req`` is not the calibrated setup."""
        from trtspec.recipes.costmodel import Precision

        arch, gpu, spec = self.setup.resolve()
        bad = []
        if _anonymous(arch) != _anonymous(req.model):
            bad.append(f"model {req.model.name!r} (calibrated: {self.setup.model!r})")
        for name, mine, theirs in (("gpu", gpu.name, req.gpu.name), ("engine", self.setup.engine, req.engine),
                                   ("tp", self.setup.tp, req.tp), ("ep", self.setup.ep, req.ep),
                                   ("quant", Precision.of(self.setup.quant).quant, Precision.of(req.quant).quant)):
            if mine != theirs:
                bad.append(f"{name} {theirs!r} (calibrated: {mine!r})")
        others = sorted({d.kind for d in req.drafters} - {spec.kind})
        if others:
            bad.append(f"drafter {', '.join(others)} (calibrated: {spec.kind!r}; its draft costs were not measured)")
        if req.pricing != "perf-db":
            bad.append(f"pricing {req.pricing!r} (a calibration adjusts the perf-db pricing)")
        else:
            from trtspec.recipes.pricing import make_pricer

            kernels = make_pricer(req.gpu, req.engine, req.pricing).label
            if self.fit.get("kernels") and not bad and kernels != self.fit["kernels"]:
                bad.append(f"kernel tables {kernels!r} (calibrated against {self.fit['kernels']!r}: its kernel_scale "
                           "is relative to those; rerun trtspec calibrate)")
        if bad:
            raise CalibrationError(f"calibration {self.path}: fitted for another setup: " + "; ".join(bad))


def _anonymous(arch):
    return dataclasses.replace(arch, name="", source="")


def _read_doc(path: Path) -> dict:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise CalibrationError(f"cannot read calibration {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path}: expected a mapping with a 'format' key")
    return doc


def load_deployment_calibration(path) -> DeploymentCalibration:
    """Read a calibration file written by ``trtspec calibrate``."""
    path = Path(path)
    doc = _read_doc(path)
    if doc.get("format") != FORMAT:
        raise CalibrationError(f"{path}: format {doc.get('format')!r}; expected {FORMAT!r}")
    try:
        setup = Setup.from_fields(doc["setup"], where=f"{path}: setup")
        params = {str(k): dict(v) for k, v in doc["parameters"].items()}
        for k, v in params.items():
            float(v["value"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CalibrationError(f"{path}: malformed calibration ({exc!r}); rerun trtspec calibrate") from exc
    return DeploymentCalibration(setup, params, list(doc.get("points") or []), dict(doc.get("fit") or {}),
                                 list(doc.get("inputs") or []), str(doc.get("created", "")),
                                 str(doc.get("generated_by", "")), str(path))


def read_calibration(path):
    """``--calibration FILE`` of plan and build: a ``trtspec profile`` cost table (``CostTable``) or a
    ``trtspec calibrate`` file (``DeploymentCalibration``), told apart by the file's ``format`` key."""
    from trtspec.recipes.calibration import FORMAT as COST_TABLE, load_cost_table

    path = Path(path)
    fmt = _read_doc(path).get("format")
    if fmt == COST_TABLE:
        return load_cost_table(path)
    if fmt == FORMAT:
        return load_deployment_calibration(path)
    raise CalibrationError(f"{path}: format {fmt!r}; expected {COST_TABLE!r} (trtspec profile) or {FORMAT!r} "
                           "(trtspec calibrate)")
