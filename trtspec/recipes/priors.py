"""The closest published acceptance prior for a drafter and a model nobody has measured.

A plan needs acceptance; without ``--acceptance`` it takes, in order: the prior whose ``applies_to`` names the model
(``acceptance.default_prior``), else the **closest published prior for that drafter** (``closest_prior``): among
``recipes/priors/*.yaml`` of the same drafter (leaving out priors marked ``closest_match: false`` -- workload-specific
ones such as n-gram on code edits), the one whose model is of the same family (``model_family``: llama, qwen,
deepseek, ...) and nearest in size (|log(total params / prior's total params)|, then active params); a prior of
another family only when the drafter has none of the model's family, and the output says so. The plan names the
prior, why it was chosen and its source, and its interval carries the published spread of that drafter's
acceptance (``trtspec.recipes.intervals``, ``acceptance_spread``).

A prior's model is the first name in its ``applies_to``, else its ``model`` field (a built-in name or an HF id).
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from trtspec.recipes.errors import RecipeError

FAMILIES = ("gpt-oss", "llama", "qwen", "deepseek", "kimi", "glm", "minimax", "gemma", "mixtral", "mistral",
            "nemotron", "mimo", "step", "phi")
_MODEL_TYPES = {"llama4": "llama", "llama": "llama", "qwen3_moe": "qwen", "qwen3": "qwen", "qwen2": "qwen",
                "qwen3_next": "qwen", "qwen3_5_moe": "qwen", "qwen3_5": "qwen", "deepseek_v3": "deepseek",
                "deepseek_v32": "deepseek", "deepseek_v4": "deepseek", "kimi_k2": "kimi", "glm_moe_dsa": "glm",
                "minimax_m2": "minimax", "gpt_oss": "gpt-oss", "gemma3": "gemma", "gemma4": "gemma",
                "mixtral": "mixtral", "nemotron_h": "nemotron"}


def model_family(arch) -> str | None:
    """The model family of an ``Architecture`` (its name, else its config's ``model_type``), or None."""
    name = re.sub(r"[^a-z0-9]+", "-", str(arch.name).lower())
    for fam in FAMILIES:
        if fam in name:
            return fam
    return _MODEL_TYPES.get(str((arch.extra or {}).get("model_type", "")).lower())


@dataclass(frozen=True)
class PriorMatch:
    """A chosen prior: its profile (source text saying why it was chosen), its name and model, and whether the
    families matched."""

    profile: object
    name: str
    model: str
    family_match: bool
    reason: str


def _prior_model(doc: dict) -> str | None:
    applies = doc.get("applies_to") or []
    return str(applies[0]) if applies else (str(doc["model"]) if doc.get("model") else None)


def _architecture(model: str):
    from trtspec.recipes.arch import builtin_names, load_architecture

    if model in builtin_names():
        return load_architecture(model)
    from trtspec.recipes.fidelity import architecture_for

    return architecture_for(model)


def candidates(drafter: str, exclude_sources=()) -> list:
    """``[(name, doc, Architecture)]`` of the priors of ``drafter`` eligible as closest priors; ``exclude_sources``:
    leave out priors whose source text names any of these (validation: a prior never predicts its own source)."""
    from trtspec.recipes.acceptance import _prior_docs

    out = []
    for name, (_, doc) in _prior_docs().items():
        if doc.get("drafter") != drafter or doc.get("closest_match") is False:
            continue
        if any(src and src in str(doc.get("source", "")) for src in exclude_sources):
            continue
        model = _prior_model(doc)
        if model is None:
            continue
        try:
            out.append((name, doc, _architecture(model)))
        except RecipeError:
            continue
    return out


def closest_prior(drafter: str, arch, exclude_sources=()) -> PriorMatch | None:
    """The closest published prior of ``drafter`` for ``arch`` (see the module docstring), or None if the drafter
    has no eligible prior."""
    from trtspec.recipes.acceptance import load_prior

    fam = model_family(arch)
    size, active = arch.total_params(), arch.active_params()

    def key(c):
        _, _, a = c
        return (model_family(a) != fam or fam is None, abs(math.log(size / a.total_params())),
                abs(math.log(active / a.active_params())))

    pool = candidates(drafter, exclude_sources)
    if not pool:
        return None
    name, doc, parch = min(pool, key=key)
    same = fam is not None and model_family(parch) == fam
    why = (f"closest published {drafter} prior for {arch.name} ({fam or 'family unknown'}, "
           f"{size / 1e9:.0f}B): prior:{name}, measured on {_prior_model(doc)} ({model_family(parch) or '?'}, "
           f"{parch.total_params() / 1e9:.0f}B)" + ("" if same else "; no prior of the same family"))
    profile = load_prior(name)
    profile = dataclasses.replace(profile, source=f"{why} -- {profile.source}")
    return PriorMatch(profile, name, _prior_model(doc), same, why)


def prior_al(drafter: str, arch, draft_len: int, exclude_sources=()) -> float | None:
    """The closest prior's expected AL at ``draft_len`` (None without a prior)."""
    match = closest_prior(drafter, arch, exclude_sources)
    return None if match is None else match.profile.expected_al(draft_len)
