"""Entry points used by the CLI and the builder.

``resolve_recipe(spec, *, model, gpu, tp=1, quant="none", drafter, acceptance=None, max_batch_size=256,
context=4096, calibration=None, draft_model=None, draft_quant=None, engine=None) -> Recipe``:

* ``calibration``: a path to a ``trtspec profile`` cost table (its step times replace the priced ones) or to a
  ``trtspec calibrate`` deployment calibration (its fitted engine figures replace the engine file's; the plan must
  be for the setup it was fitted on, and ``engine`` defaults to its engine), told apart by the file's ``format``;

* ``spec="auto"`` plans now (acceptance: the given source, else the prior that lists this (drafter, model) in its
  ``applies_to``; with neither it raises ``AcceptanceError`` -- it never assumes one);
* ``spec`` = a path to a recipe YAML loads it; any other string is a recipe-book name (``trtspec recipes list``).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from trtspec import __version__
from trtspec.recipes.acceptance import AcceptanceProfile, default_prior, parse_acceptance
from trtspec.recipes.arch import Architecture, load_architecture
from trtspec.recipes.calibration import CostTable
from trtspec.recipes.drafters import DRAFTERS, DrafterSpec
from trtspec.recipes.errors import AcceptanceError, RecipeError
from trtspec.recipes.gpus import load_gpu
from trtspec.recipes.optimizer import DEFAULT_BATCHES, Plan, PlanRequest, plan
from trtspec.recipes.recipe import Recipe, now_utc


def buckets_up_to(max_batch_size: int) -> tuple:
    """1, 2, 4, ... up to and including ``max_batch_size`` (added if not a power of two)."""
    if max_batch_size < 1:
        raise RecipeError(f"max_batch_size must be >= 1, got {max_batch_size}")
    out = [b for b in DEFAULT_BATCHES if b <= max_batch_size] or [1]
    b = out[-1]
    while b * 2 <= max_batch_size:
        b *= 2
        out.append(b)
    if out[-1] != max_batch_size:
        out.append(max_batch_size)
    return tuple(out)


def resolve_acceptance(drafter: str, arch: Architecture, acceptance, category: str | None = None) -> AcceptanceProfile:
    """The given source, else the prior naming (drafter, model), else the closest published prior for the drafter
    (``trtspec.recipes.priors.closest_prior``: same family, nearest size; its source says which and why);
    ``category`` selects per-category rates."""
    if acceptance is not None:
        profile = parse_acceptance(acceptance)
    else:
        profile = default_prior(drafter, arch.name)
        if profile is None:
            from trtspec.recipes.priors import closest_prior

            match = closest_prior(drafter, arch)
            if match is None:
                raise AcceptanceError(
                    f"no acceptance source for drafter {drafter!r} on model {arch.name!r} and no published prior "
                    f"for {drafter}: pass --acceptance FILE (from `trtspec bench`), prior:NAME, rates=a1,a2,... or "
                    "al=A@D")
            profile = match.profile
    return profile.for_category(category) if category else profile


def build_request(*, model, gpu, drafters, acceptance=None, tp=1, quant="none", batches=None, context=4096,
                  max_draft_len=16, objective="throughput", draft_len=None, calibration=None, draft_model=None,
                  max_batch_size=256, draft_quant=None, category=None, engine=None, pricing="perf-db",
                  ep=1) -> PlanRequest:
    """Resolve names/paths into a validated ``PlanRequest``. ``drafters``: a name, comma list or list of names;
    ``acceptance``: one spec for all drafters, or a dict drafter -> spec; ``calibration``: see the module docstring;
    ``engine`` (default: a deployment calibration's, else ``PlanRequest``'s) / ``pricing`` / ``ep``: see
    ``PlanRequest``."""
    arch = load_architecture(model)
    names = [d.strip() for d in (drafters.split(",") if isinstance(drafters, str) else drafters) if d.strip()]
    for n in names:
        if n not in DRAFTERS:
            raise RecipeError(f"unknown --drafter {n!r}; expected one of {', '.join(DRAFTERS)}")
    specs, profiles = [], {}
    for n in names:
        if n == "mtp" and arch.mtp_layers == 0:
            raise RecipeError(f"--drafter mtp: model {arch.name!r} has no MTP layers (config num_nextn_predict_layers / "
                              "mtp_num_hidden_layers); use eagle3, draft_model, dflash or ngram")
        draft_arch = load_architecture(draft_model) if n == "draft_model" and draft_model else None
        specs.append(DrafterSpec(n, draft_arch=draft_arch, quant=draft_quant))
        src = acceptance.get(n) if isinstance(acceptance, dict) else acceptance
        profiles[n] = resolve_acceptance(n, arch, src, category)
    cal, deployed = _calibration(calibration)
    engine = engine or (deployed.setup.engine if deployed else PlanRequest.__dataclass_fields__["engine"].default)
    req = PlanRequest(model=arch, gpu=load_gpu(gpu), drafters=tuple(specs), acceptance=profiles, tp=int(tp),
                      quant=quant, batches=tuple(batches) if batches else buckets_up_to(max_batch_size),
                      context=int(context), max_draft_len=int(max_draft_len), objective=objective,
                      draft_len=draft_len, calibration=cal, engine=engine, pricing=pricing, ep=int(ep))
    if deployed is None:
        return req
    deployed.check_request(req)
    return dataclasses.replace(req, engine_profile=deployed.engine_profile())


def _calibration(calibration):
    """(cost table, deployment calibration) from ``--calibration``: a path, or either object; one is None."""
    from trtspec.recipes.user_calibration import DeploymentCalibration, read_calibration

    if not calibration:
        return None, None
    loaded = calibration if isinstance(calibration, (CostTable, DeploymentCalibration)) else \
        read_calibration(calibration)
    return (loaded, None) if isinstance(loaded, CostTable) else (None, loaded)


def signature(arch: Architecture) -> dict:
    """What ``recipes match`` compares: attention variant, G, size class, MoE sparsity."""
    s = arch.summary()
    return {"attention": s["attention"], "group_size": s["group_size"], "params_b": s["params_b"],
            "active_params_b": s["active_params_b"], "moe_sparsity": s["moe"]["sparsity"] if s["moe"] else 1.0}


def cost_model_provenance(req: PlanRequest):
    """What priced the steps: the cost table, the analytic roofline, or per op class the measured sources."""
    from trtspec.recipes.optimizer import request_pricer

    if req.calibration is not None:
        return f"calibration: {req.calibration.path} ({req.calibration.source})"
    pricer = request_pricer(req)
    if pricer is None:
        return "analytic roofline (trtspec.recipes.costmodel; GPU-file fixed costs)"
    deployed = {"calibration": req.engine_profile.path} if req.engine_profile is not None else {}
    return {"engine": req.engine, **pricer.describe(), **deployed}


def _interval_provenance(p: Plan) -> str:
    """Where the rows' speedup intervals come from, and which rows may lose."""
    from trtspec.recipes.intervals import load_intervals

    low = [r.batch for r in p.rows if r.draft_len > 0 and r.interval and r.interval[0] < 1.0]
    table = load_intervals()
    text = f"recipes/validation/intervals.yaml: {table.describe()}"
    return text + (f"; the lower end is below 1 (speculation may lose) at batch {', '.join(map(str, low))}"
                   if low else "")


def recipe_from_plan(p: Plan, *, model_label: str, max_batch_size: int, name: str | None = None) -> Recipe:
    req = p.request
    drafter = ",".join(d.kind for d in req.drafters)
    name = name or f"{model_label}__{req.gpu.name}__tp{req.tp}__{req.quant.replace(':', '-')}__{drafter.replace(',', '+')}"
    prov = {
        "generated_by": f"trtspec {__version__} plan", "generated_at": now_utc(),
        "gpu_figures": f"recipes/gpus/{req.gpu.name}.yaml",
        "cost_model": cost_model_provenance(req),
        "acceptance": {k: v.source for k, v in req.acceptance.items()},
        "acceptance_extrapolated": {k: len(v.rates) < req.max_draft_len for k, v in req.acceptance.items()},
        "objective": req.objective, "max_draft_len_searched": req.max_draft_len,
        "intervals": _interval_provenance(p),
    }
    curves = None
    if req.draft_len is None:
        kinds = [r.drafter for r in p.rows if r.drafter != "none"] or [req.drafters[0].kind]
        main = max(set(kinds), key=kinds.count)
        curves = {b: by_drafter[main] for b, by_drafter in p.curves.items()}
        if len(set(kinds)) > 1:
            prov["schedule_note"] = f"rows mix drafters {sorted(set(kinds))}; engine schedules use {main!r}"
    return Recipe.from_rows(
        rows=[r.to_dict() for r in p.rows], max_batch_size=max_batch_size, curves=curves, name=name, model=model_label,
        gpu=req.gpu.name, tp=req.tp, quant=req.quant, drafter=drafter, context=req.context,
        acceptance={k: v.to_dict() for k, v in req.acceptance.items()}, signature=signature(req.model), provenance=prov)


def resolve_recipe(spec: str, *, model, gpu, tp: int = 1, quant: str = "none", drafter, acceptance=None,
                   max_batch_size: int = 256, context: int = 4096, calibration=None, draft_model=None,
                   draft_quant=None, engine: str | None = None) -> Recipe:
    """See module docstring. ``draft_model`` (name|dir) is needed for ``drafter="draft_model"``; ``draft_quant``
    is the drafter weights' quantization (default: ``quant``); ``engine`` prices the steps (``PlanRequest``)."""
    text = str(spec)
    if text == "auto":
        req = build_request(model=model, gpu=gpu, drafters=drafter, acceptance=acceptance, tp=tp, quant=quant,
                            context=context, calibration=calibration, max_batch_size=max_batch_size,
                            draft_model=draft_model, draft_quant=draft_quant, engine=engine)
        label = req.model.name if not Path(str(model)).exists() else Path(str(model)).name
        return recipe_from_plan(plan(req), model_label=label, max_batch_size=max_batch_size)
    if text.endswith((".yaml", ".yml")) and Path(text).is_file():
        return Recipe.load(text)
    from trtspec.recipes.book import load_book_recipe

    return load_book_recipe(text)
