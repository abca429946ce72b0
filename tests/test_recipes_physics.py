"""Physics as properties of the planner, over the real configs aiconfigurator-core ships x GPUs x engines.

* a step never gets cheaper when the batch B or the draft length D grows (measured tables are read through a
  monotone ladder, ``trtspec.recipes.perfdb``);
* a plan's predicted speedup never jumps more than 10% between neighbouring batch sizes unless a named rule
  causes it, and the row prints that rule (``trtspec.recipes.jumps``).

The configs are sampled deterministically: every ``STRIDE``-th config in the default run, rotating through GPUs and
engines; the ``slow`` tier runs every config (each on one GPU and engine of the rotation).
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

aic = pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed; it ships the configs")

from hypothesis import given, settings, strategies as st  # noqa: E402

from trtspec.recipes.api import build_request  # noqa: E402
from trtspec.recipes.errors import RecipeError  # noqa: E402
from trtspec.recipes.jumps import JUMP, RowState, jump_rule  # noqa: E402
from trtspec.recipes.optimizer import _Evaluator, plan, request_pricer  # noqa: E402

CONFIG_DIR = Path(aic.__file__).parent / "model_configs"
CONFIGS = sorted(p for p in CONFIG_DIR.glob("*_config.json") if not p.name.endswith("_hf_quant_config.json"))
GPUS = ("h200", "b200", "h100", "rtx-pro-6000", "gb200", "a100")
ENGINES = ("trtllm", "vllm", "sglang")
# neighbouring batch sizes: consecutive sizes at most 1.25x apart past 4 (a doubling below)
LADDER = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256)
STRIDE = 22
MAX_D = 8


def setup_of(i: int):
    """Config i on its rotation's GPU and engine, at the smallest TP where batch 1-8 fits (None: refused)."""
    path, gpu, engine = CONFIGS[i], GPUS[i % len(GPUS)], ENGINES[i % len(ENGINES)]
    quant = "none" if gpu == "a100" else "fp8"
    for tp in (1, 2, 4, 8, 16, 32, 64):
        try:
            req = build_request(model=path, gpu=gpu, drafters="eagle3", acceptance="rates=0.75", quant=quant, tp=tp,
                                batches=LADDER, engine=engine, context=2048, max_draft_len=MAX_D)
        except RecipeError:
            return None
        result = _plan(req)
        if all(r.fits_memory for r in result.rows[:8]):
            return req, result
    return None


@functools.lru_cache(maxsize=None)
def _setup(i: int):
    return setup_of(i)


def _plan(req):
    return plan(req)


def _ids(indices):
    return [f"{CONFIGS[i].name[:-len('_config.json')]}-{GPUS[i % len(GPUS)]}-{ENGINES[i % len(ENGINES)]}"
            for i in indices]


FAST = tuple(range(0, len(CONFIGS), STRIDE))
ALL = tuple(range(len(CONFIGS)))


def _steps(req, batch: int) -> list:
    ev = _Evaluator(req, batch, request_pricer(req))
    spec = req.drafters[0]
    return [ev.point(spec, d, 1.0, d + 1).step for d in range(MAX_D + 1)]


def check_monotone(i: int):
    found = _setup(i)
    if found is None:
        pytest.skip("the config is refused (one line naming a field; test_recipes_real_configs checks it)")
    req, _ = found
    prev = None
    for b in LADDER:
        steps = _steps(req, b)
        assert all(b2 >= a2 for a2, b2 in zip(steps, steps[1:])), f"B={b}: a step falls when D grows: {steps}"
        if prev is not None:
            assert all(s >= p for p, s in zip(prev, steps)), f"B={b}: a step falls when B grows from the last size"
        prev = steps


def check_jumps(i: int):
    found = _setup(i)
    if found is None:
        pytest.skip("the config is refused (one line naming a field; test_recipes_real_configs checks it)")
    _, result = found
    for a, b in zip(result.rows, result.rows[1:]):
        if abs(b.speedup / a.speedup - 1.0) > JUMP:
            assert f"jump {a.speedup:.2f}x -> {b.speedup:.2f}x from batch {a.batch}" in b.binding_rule, \
                f"B={a.batch}->{b.batch}: {a.speedup:.2f}x -> {b.speedup:.2f}x with no named rule: {b.binding_rule}"
            assert "unexplained" not in b.binding_rule, b.binding_rule


@pytest.mark.parametrize("i", FAST, ids=_ids(FAST))
def test_step_time_never_falls_when_batch_or_draft_grows(i):
    check_monotone(i)


@pytest.mark.parametrize("i", FAST, ids=_ids(FAST))
def test_speedup_jumps_between_neighbouring_batches_name_their_rule(i):
    check_jumps(i)


@pytest.mark.slow
@pytest.mark.parametrize("i", ALL, ids=_ids(ALL))
def test_every_config_steps_are_monotone_and_jumps_named(i):
    check_monotone(i)
    check_jumps(i)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(i=st.sampled_from(FAST[:4]), b=st.integers(1, 300), extra=st.integers(1, 40), d=st.integers(0, MAX_D - 1))
def test_any_larger_batch_or_longer_draft_costs_at_least_as_much(i, b, extra, d):
    """Between arbitrary sizes (not only the ladder): step(B + k, D) >= step(B, D) and step(B, D + 1) >= step(B, D)."""
    found = _setup(i)
    if found is None:
        return
    req, _ = found
    pr = request_pricer(req)
    spec = req.drafters[0]
    small, big = _Evaluator(req, b, pr), _Evaluator(req, b + extra, pr)
    assert big.point(spec, d, 1.0, d + 1).step >= small.point(spec, d, 1.0, d + 1).step
    assert small.point(spec, d + 1, 1.0, d + 2).step >= small.point(spec, d, 1.0, d + 1).step


# ---- the jump rules themselves, on hand-built rows ------------------------------------------------------------------


class _Cost:
    def __init__(self, **parts):
        self.parts = {k: parts.get(k, 0.0) for k in ("linear", "attention", "moe", "comm", "overhead", "engine")}

    def as_dict(self):
        return dict(self.parts)

    @property
    def total(self):
        return sum(self.parts.values())


class _Point:
    def __init__(self, d, al, verify, draft=0.0):
        self.draft_len, self.num_nodes, self.topk, self.drafter = d, d + 1, 1, "eagle3"
        self.expected_al, self.verify, self.draft = al, verify, _Cost(linear=draft)
        self.tokens_per_s = 0.0


def _state(batch, base, spec, al=2.5, fits=True, capped=False, drafter="eagle3"):
    p = _Point(3, al, spec, draft=1.0)
    b = _Point(0, 1.0, base)
    return RowState(batch, al * base.total / (spec.total + 1.0), None, p, b, fits, capped, drafter)


def test_a_jump_driven_by_moe_names_expert_loading():
    prev = _state(8, _Cost(linear=10, moe=5), _Cost(linear=10, moe=9))
    cur = _state(16, _Cost(linear=10, moe=5.5), _Cost(linear=10, moe=16))
    rule = jump_rule(None, prev, cur)
    assert rule.startswith(f"jump {prev.speedup:.2f}x -> {cur.speedup:.2f}x from batch 8")
    assert "MoE expert loading" in rule


def test_a_jump_driven_by_fixed_costs_is_unexplained():
    prev = _state(8, _Cost(linear=10, engine=1), _Cost(linear=10, engine=1))
    cur = _state(16, _Cost(linear=10, engine=1), _Cost(linear=10, engine=4))
    assert "unexplained" in jump_rule(None, prev, cur)


def test_memory_and_small_changes():
    prev = _state(8, _Cost(linear=10), _Cost(linear=10))
    assert jump_rule(None, prev, _state(16, _Cost(linear=10), _Cost(linear=10.5))) is None  # < 10%: no rule
    capped = _state(16, _Cost(linear=10), _Cost(linear=16), capped=True)
    assert "memory" in jump_rule(None, prev, capped)
