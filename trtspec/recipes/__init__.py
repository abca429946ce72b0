"""Recipe layer: predict the best draft length per GPU x batch x attention variant before running anything.

Modules (data flows down this list):

* ``gpus`` -- GPU catalog (``recipes/gpus/*.yaml``, every figure with a source) -> ``GPU``;
* ``arch`` -- HF ``config.json`` (or a built-in name from ``trtspec/recipes/models``) -> ``Architecture``;
* ``drafters`` -- cost and memory of each drafter (draft_model, eagle3, mtp, dflash, dspark, ngram, sa);
* ``acceptance`` -- acceptance profiles a_k and their sources (measured file, inline, published priors);
* ``costmodel`` -- roofline step time per op class (co-design guidelines 1-4);
* ``perfdb`` -- measured kernel latencies per GPU and engine version (aiconfigurator-core's query API);
* ``engines`` -- per-engine fixed costs (``recipes/engines/*.yaml``) that kernel tables do not hold;
* ``pricing`` -- refines the roofline op class by op class from ``perfdb``, the rules for unmeasured shapes;
* ``calibration`` -- measured cost tables (``trtspec profile``) that replace the step times on a device;
* ``fidelity`` -- predictions against the published corpus (``measurements``) in its scoring modes;
  ``fidelity_fit`` -- the engines' figures fitted on it; ``validation`` -- leave-one-source-out predictions,
  intervals, regret; ``aic_step`` -- aiconfigurator-core's own whole decode step, the baseline's comparison;
* ``intervals`` -- the shipped intervals of predicted speedups (``recipes/validation/intervals.yaml``);
  ``priors`` -- the closest published acceptance prior for a model nobody measured;
  ``jumps`` -- the named rule of a speedup that jumps between neighbouring batch sizes;
* ``optimizer`` -- per-batch argmax over drafter, D and tree (guideline 5);
* ``recipe`` / ``book`` -- engine schedules (TensorRT-LLM, vLLM, SGLang), YAML recipes, the stored book;
* ``api`` -- ``resolve_recipe(...) -> Recipe`` for the builder, ``build_request`` for the CLI.

Nothing is loaded at import time.
"""
from __future__ import annotations

__all__ = ["resolve_recipe", "Recipe"]


def __getattr__(name):
    if name == "resolve_recipe":
        from trtspec.recipes.api import resolve_recipe

        return resolve_recipe
    if name == "Recipe":
        from trtspec.recipes.recipe import Recipe

        return Recipe
    raise AttributeError(name)
