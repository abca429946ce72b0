"""What the runtime's adaptive speculation needs (see :mod:`trtspec.runtime.controller`): the
device's step costs and an acceptance prior, found or measured for a loaded pipeline.

Step costs, first found: a given ``cost_table.json`` (``trtspec profile --verify greedy,sample``),
the bundle's ``cost_table.json``, else measured now on the pipeline's device
(:func:`measure_costs`: greedy and sampled engine steps at B = 1, 4, 16; seconds on a CPU).
Prior, first found: an ``acceptance.json`` of the bundle, of the draft's directory or beside the
target (the demo pair's) for the same drafter, the bundle recipe's acceptance profile for the
drafter (``recipe.yaml``), else the controller's default; each request's estimates then follow its
own steps.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("trtspec")

#: batch sizes of a cost table measured on the spot (the controller extends past the largest linearly)
MEASURE_BATCHES = (1, 4, 16)


def find_prior(drafter: str, *, bundle: Path | None = None, target: Path | None = None,
               draft: Path | None = None) -> tuple[tuple[float, ...] | None, str]:
    """(per-position acceptance a_1.. or None, where it came from); see the module docstring."""
    from trtspec.runtime.controller import prior_from_profile

    for folder in (bundle, draft, None if target is None else Path(target).resolve().parent):
        path = None if folder is None else Path(folder) / "acceptance.json"
        if path is not None and path.is_file():
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("drafter", drafter) == drafter and doc.get("rates"):
                return prior_from_profile(doc), str(path)
    recipe = None if bundle is None else Path(bundle) / "recipe.yaml"
    if recipe is not None and recipe.is_file():
        import yaml

        prof = ((yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}).get("acceptance") or {}).get(drafter)
        if isinstance(prof, dict) and prof.get("rates"):
            return prior_from_profile(prof), f"{recipe} (acceptance of {drafter})"
    return None, "the controller's default"


def measure_costs(pipeline: Any, max_depth: int, batches=MEASURE_BATCHES, repeats: int = 7, clock: str = "wall",
                  progress: Callable[[], None] | None = None) -> dict:
    """A cost table (as a dict) of ``pipeline`` on its device: engine steps at ``batches`` x D =
    0..max_depth, greedy and sampled, 2 warm-up and ``repeats`` timed steps per cell, the cells
    taking turns (``trtspec.bench.profile``), on the wall clock with this process's torch threads:
    what serving from this process pays (a CPU's thread scaling differs between small and large
    steps, so single-thread CPU time would misprice a multi-threaded server). ``clock='cpu'``: this
    process's CPU time instead, for a server measured the same way on one thread (see
    ``benchmarks/bench_serve.py --clock cpu``)."""
    from trtspec.bench.profile import CostTable, ProfileConfig, device_name, profile_pipeline

    device = "cuda" if str(pipeline.target.lm_head.weight.device).startswith("cuda") else "cpu"
    cfg = ProfileConfig(batch_sizes=batches, tokens=tuple(range(1, max(max_depth, 1) + 2)), draft_tokens=(1,),
                        device=device, verify=("greedy", "sample"), warmup=2, repeats=repeats, context_len=96,
                        clock=clock)
    target, draft, extra = profile_pipeline(pipeline, cfg, progress=progress)
    return CostTable(device_name(device), target, draft, source=f"measured for adaptive speculation: engine steps "
                     f"at B={','.join(map(str, batches))}, D=0..{max_depth}, greedy and sampled, {cfg.clock} clock",
                     extra={**extra, "clock": cfg.clock, "context_len": cfg.context_len}).to_dict()


def adaptive_config(pipeline: Any, drafter: str, *, cost_table: Path | None = None, bundle: Path | None = None,
                    target: Path | None = None, draft: Path | None = None):
    """The :class:`~trtspec.runtime.controller.AdaptiveConfig` for ``pipeline`` (see module docstring);
    logs where its costs and prior came from."""
    from trtspec.runtime.controller import AdaptiveConfig, StepCosts

    path = cost_table if cost_table is not None else (None if bundle is None else Path(bundle) / "cost_table.json")
    if path is not None and Path(path).is_file():
        table, where = json.loads(Path(path).read_text(encoding="utf-8")), str(path)
    elif cost_table is not None:
        raise FileNotFoundError(f"cost_table: {cost_table} does not exist")
    else:
        t0 = time.perf_counter()
        table = measure_costs(pipeline, pipeline.spec.max_depth)
        where = f"measured now in {time.perf_counter() - t0:.1f} s"
    costs = StepCosts(table)
    prior, prior_where = find_prior(drafter, bundle=bundle, target=target, draft=draft)
    log.info("adaptive speculation: step costs %s (%s%s), acceptance prior %s", where, costs.device,
             "" if costs.priced_sampled else "; sampled steps priced as greedy", prior_where)
    return AdaptiveConfig(costs, prior=prior) if prior else AdaptiveConfig(costs)
