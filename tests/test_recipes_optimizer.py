"""Acceptance parsing, schedules in engine semantics, calibration tables, trees, resolve_recipe."""
import json

import pytest

from trtspec.recipes.acceptance import AcceptanceProfile, parse_acceptance, spread_al
from trtspec.recipes.api import build_request, buckets_up_to, resolve_recipe
from trtspec.recipes.calibration import load_cost_table
from trtspec.recipes.errors import AcceptanceError, CalibrationError, RecipeError
from trtspec.recipes.optimizer import plan, tree_values
from trtspec.recipes.recipe import Recipe, derive_schedule


def test_expected_al_matches_definition():
    p = parse_acceptance("rates=0.8,0.7,0.6")
    assert p.expected_al(3) == pytest.approx(1 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.6)
    assert p.expected_al(0) == 1.0
    assert p.expected_al(5) == pytest.approx(p.expected_al(3) + 0.336 * 0.6 + 0.336 * 0.36)  # last rate reused


@pytest.mark.parametrize("al,d", [(2.4, 3), (1.0, 4), (5.0, 4), (3.2, 7)])
def test_al_spread_reproduces_measured_al(al, d):
    p = parse_acceptance(f"al={al}@{d}")
    assert p.expected_al(d) == pytest.approx(al, abs=1e-9)
    assert len(set(spread_al(al, d))) == 1


@pytest.mark.parametrize("spec,msg", [("rates=0.8,1.3", "a_2 must be"), ("al=5@3", "1 <= A <= D\\+1"),
                                      ("al=2.4", "al=A@D"), ("prior:nope", "unknown acceptance prior"),
                                      ("guess", "expected FILE")])
def test_bad_acceptance_specs(spec, msg):
    with pytest.raises(AcceptanceError, match=msg):
        parse_acceptance(spec)


def test_plan_fails_loudly_without_an_acceptance_source():
    with pytest.raises(AcceptanceError, match="no acceptance source for drafter 'ngram'"):
        build_request(model="llama-3.1-8b", gpu="h100", drafters="ngram")


def test_measured_profile_file(tmp_path):
    f = tmp_path / "acc.json"
    f.write_text(json.dumps({"format": "trtspec.acceptance/v1", "drafter": "eagle3", "draft_len": 3,
                             "rates": [0.9, 0.8, 0.7], "joint": [0.9, 0.72, 0.504], "mean_al": 3.124,
                             "num_steps": 100, "source": "unit test"}))
    p = parse_acceptance(str(f))
    assert p.expected_al(3) == pytest.approx(3.124)
    f.write_text(json.dumps({"format": "other"}))
    with pytest.raises(AcceptanceError, match="format"):
        parse_acceptance(str(f))


def test_schedule_semantics():
    rows = [{"batch": b, "draft_len": d} for b, d in [(1, 4), (2, 4), (4, 2), (8, 0), (16, 0)]]
    sched, max_len, _ = derive_schedule(rows, 16)
    assert sched == {2: 4, 4: 2} and max_len == 4
    # non-increasing cap: a larger optimum at a bigger batch cannot exceed the smallest key's value
    rows = [{"batch": b, "draft_len": d} for b, d in [(1, 3), (2, 5), (4, 1)]]
    sched, max_len, capped = derive_schedule(rows, 4)
    assert sched == {2: 3, 4: 1} and capped[2] == 3 and max_len == 3
    assert all(v <= max_len for v in sched.values())


def _recipe(pairs, max_bs):
    rows = [{"batch": b, "draft_len": d, "num_nodes": d + 1, "topk": 1} for b, d in pairs]
    return Recipe.from_rows(rows=rows, max_batch_size=max_bs, name="t", model="m", gpu="h200", tp=1, quant="none",
                            drafter="eagle3", context=1, acceptance={}, signature={}, provenance={})


def test_single_tier_becomes_max_concurrency_never_both():
    r = _recipe([(1, 3), (2, 3), (4, 3), (8, 0)], 8)
    assert r.max_concurrency == 4
    cfg = r.trtllm_speculative_config()
    assert cfg == {"max_draft_len": 3, "max_concurrency": 4}
    r2 = _recipe([(1, 3), (2, 2), (4, 0)], 4)
    cfg2 = r2.trtllm_speculative_config()
    assert "max_concurrency" not in cfg2 and cfg2["draft_len_schedule"] == {1: 3, 2: 2}
    assert cfg2["draft_len_schedule"][min(cfg2["draft_len_schedule"])] == cfg2["max_draft_len"]
    r3 = _recipe([(1, 3), (2, 3)], 2)
    assert r3.trtllm_speculative_config() == {"max_draft_len": 3} and r3.max_concurrency is None


def test_recipe_save_load_roundtrip(tmp_path):
    r = resolve_recipe("auto", model="llama-3.1-8b", gpu="h200", drafter="eagle3", max_batch_size=64)
    path = r.save(tmp_path / "r.yaml")
    back = resolve_recipe(str(path), model="ignored", gpu="h200", drafter="eagle3")
    assert back.draft_len_schedule == r.draft_len_schedule and back.rows == r.rows
    assert back.vllm_schedule == r.vllm_schedule and back.sglang == r.sglang
    assert r.sglang["speculative_num_steps"] == r.max_draft_len
    assert [row["batch"] for row in r.rows] == list(buckets_up_to(64))


def test_book_recipe_by_name():
    r = resolve_recipe("llama-3.1-8b__h100__tp1__none__eagle3", model="x", gpu="h100", drafter="eagle3")
    assert r.gpu == "h100" and r.provenance["acceptance"]
    with pytest.raises(RecipeError, match="no recipe named"):
        resolve_recipe("nope", model="x", gpu="h100", drafter="eagle3")


def _table(tmp_path, target):
    f = tmp_path / "cost.json"
    f.write_text(json.dumps({"format": "trtspec.cost_table/v1", "device": "cpu", "source": "unit test",
                             "target": target, "draft": {"1": {"1": 0.001}, "4": {"1": 0.001}}}))
    return f


def test_calibration_replaces_analytic_times(tmp_path):
    # target: 10 ms for 1 token, +1 ms per extra token; draft 1 ms per step; a = 0.9 constant: brute force below.
    table = _table(tmp_path, {"1": {"1": 0.010, "17": 0.026}, "4": {"1": 0.012, "17": 0.030}})
    req = build_request(model="llama-3.1-8b", gpu="cpu", drafters="eagle3", acceptance="rates=0.9", batches=[1],
                        calibration=table, max_draft_len=16)
    row = plan(req).rows[0]
    prof = parse_acceptance("rates=0.9")
    vals = [prof.expected_al(d) / (0.010 + 0.001 * d + 0.001 * d) for d in range(17)]
    best = min(d for d in range(17) if vals[d] >= max(vals) * (1 - 1e-3))  # documented tie rule: smallest D within 0.1%
    assert row.draft_len == best
    assert row.step_ms == pytest.approx(10 + 2 * best, rel=1e-9)
    cal = load_cost_table(table)
    assert cal.target_time(2, 1) == pytest.approx(0.010 + 0.002 * (2 - 1) / (4 - 1))  # linear in B
    with pytest.raises(CalibrationError, match="batch sizes 1..4, not 8"):
        cal.target_time(8, 1)


def test_cpu_needs_calibration():
    with pytest.raises(RecipeError, match="--calibration"):
        build_request(model="llama-3.1-8b", gpu="cpu", drafters="eagle3", acceptance="rates=0.8")


def test_tree_positional_acceptance_beats_chain_for_same_node_count():
    prof = AcceptanceProfile(rates=(0.6,) * 8, rank_weights=(1.0, 0.4, 0.2), source="test")
    vals = tree_values(prof, depth=4, topk=3, max_nodes=12)
    assert vals == sorted(vals, reverse=True)
    assert 1 + sum(vals) > prof.expected_al(11)
    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance=prof, batches=[1])
    row = plan(req).rows[0]
    assert row.num_nodes > row.draft_len + 1 and row.topk > 1
    assert row.expected_al > prof.expected_al(row.draft_len)


def test_fixed_draft_len_what_if():
    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="rates=0.7", batches=[1, 64],
                        draft_len=2)
    rows = plan(req).rows
    assert [r.draft_len for r in rows] == [2, 2] and rows[0].binding_rule.startswith("fixed")


def test_guideline5_picks_drafter_per_batch():
    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3,ngram",
                        acceptance={"eagle3": "rates=0.75", "ngram": "rates=0.3"}, batches=[1, 256])
    rows = plan(req).rows
    assert rows[0].drafter == "eagle3"
    for r in rows:
        alt = build_request(model="llama-3.1-8b", gpu="h100", drafters="ngram", acceptance="rates=0.3",
                            batches=[r.batch])
        assert r.tokens_per_s >= plan(alt).rows[0].tokens_per_s * (1 - 1e-9)


def test_monotone_schedule_is_the_best_non_increasing_choice():
    import itertools
    import math

    from trtspec.recipes.recipe import monotone_schedule

    # MoE-like: the per-batch optimum grows with B (1, 1, 4, 4); TensorRT-LLM needs a non-increasing schedule.
    curves = {1: {0: 1.0, 1: 1.20, 2: 1.15, 3: 1.05, 4: 0.95}, 2: {0: 1.0, 1: 1.10, 2: 1.08, 3: 1.0, 4: 0.9},
              4: {0: 1.0, 1: 1.2, 2: 1.4, 3: 1.5, 4: 1.6}, 8: {0: 1.0, 1: 1.2, 2: 1.35, 3: 1.45, 4: 1.55}}
    got = monotone_schedule(curves, tolerance=0.0)
    assert [got[b] for b in sorted(got)] == sorted(got.values(), reverse=True)
    brute = max((s for s in itertools.product(range(5), repeat=4) if list(s) == sorted(s, reverse=True)),
                key=lambda s: sum(math.log(curves[b][d]) for b, d in zip(sorted(curves), s)))
    assert tuple(got[b] for b in sorted(got)) == brute
    rows = [{"batch": b, "draft_len": max(c, key=c.get)} for b, c in curves.items()]
    sched, max_len, _ = derive_schedule(rows, 8, curves)
    assert sched[min(sched)] == max_len and all(v <= max_len for v in sched.values())


def _tolerance(req):
    from trtspec.recipes.optimizer import request_pricer, tie_tolerance

    return tie_tolerance(req, request_pricer(req))


def test_latency_objective_takes_any_gain():
    kw = dict(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="rates=0.75", batches=[1, 32, 128])
    req = build_request(objective="throughput", **kw)
    thr = plan(req).rows
    lat = plan(build_request(objective="latency", **kw)).rows
    tol = _tolerance(req)  # 1% with measured kernel tables, 0.1% for the analytic model
    assert tol == 1e-2
    for a, b in zip(thr, lat):
        assert b.draft_len >= a.draft_len
        assert b.tokens_per_s >= a.tokens_per_s * (1 - 1e-12)
        assert a.tokens_per_s >= b.tokens_per_s * (1 - tol)  # throughput's tie tolerance


def test_draft_model_needs_its_architecture():
    with pytest.raises(RecipeError, match="--draft-model"):
        build_request(model="llama-3.1-70b", gpu="h200", drafters="draft_model", acceptance="rates=0.8")


def test_per_category_rates():
    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3", batches=[1], category="coding")
    prof = req.acceptance["eagle3"]
    assert prof.rates == (0.7389,) and "category coding" in prof.source
    with pytest.raises(AcceptanceError, match="no rates for category 'poetry'"):
        build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3", batches=[1], category="poetry")


def test_resolve_recipe_draft_model():
    r = resolve_recipe("auto", model="llama-3.3-70b", gpu="h200", quant="fp8", drafter="draft_model",
                       draft_model="llama-3.2-1b", acceptance="rates=0.8", max_batch_size=8)
    assert r.max_draft_len >= 4 and r.rows[0]["drafter"] == "draft_model"


def _mixed_request(objective, **kw):
    from trtspec.recipes.arch import load_architecture
    from trtspec.recipes.drafters import DrafterSpec
    from trtspec.recipes.gpus import load_gpu
    from trtspec.recipes.optimizer import PlanRequest

    prof = AcceptanceProfile(rates=(0.8,) * 16, source="test: two very different categories",
                             per_category={"code": {"rates": [0.95]}, "chat": {"rates": [0.4]}})
    return PlanRequest(model=load_architecture("llama-3.1-8b"), gpu=load_gpu("h100"), drafters=(DrafterSpec("eagle3"),),
                       acceptance={"eagle3": prof}, objective=objective, batches=(1, 8, 32, 64), **kw)


def test_latency_objective_minimizes_mean_per_user_time_per_token_over_the_mix():
    """Latency = argmin over D of mean_c step/E[AL_c] (brute force); throughput = the aggregate-tokens/s choice.
    With one well-drafted and one badly-drafted category the two objectives pick different D -- here latency the
    smaller one, giving up more than the 0.1% tie tolerance of aggregate throughput to cut per-user latency."""
    from trtspec.recipes.optimizer import _Evaluator, workload_mix

    lat_req, thr_req = _mixed_request("latency"), _mixed_request("throughput")
    lat, thr = plan(lat_req).rows, plan(thr_req).rows
    mix = workload_mix(lat_req.acceptance["eagle3"])
    differ = 0
    for a, b in zip(thr, lat):
        ev = _Evaluator(lat_req, b.batch)
        per_d = {d: sum(ev.point(lat_req.drafters[0], d, 1.0, d + 1).step / m.expected_al(d) for m in mix) / len(mix)
                 for d in range(lat_req.max_draft_len + 1)}
        assert b.draft_len == min(per_d, key=per_d.get)
        assert b.latency_ms_per_token == pytest.approx(per_d[b.draft_len] * 1e3)
        assert b.latency_ms_per_token <= a.latency_ms_per_token * (1 + 1e-12)
        assert a.tokens_per_s >= b.tokens_per_s * (1 - 1e-3)
        differ += a.tokens_per_s > b.tokens_per_s * (1 + 1e-3) and b.latency_ms_per_token < a.latency_ms_per_token
        assert b.draft_len <= a.draft_len
    assert differ >= 2


def test_latency_equals_throughput_choice_up_to_the_tolerance_without_categories():
    """At a fixed batch, per-user tokens/s is aggregate / B: with one category the objectives can differ only by
    throughput's tie tolerance (then latency takes the larger D)."""
    kw = dict(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="rates=0.75", batches=[1, 32, 128])
    req = build_request(objective="throughput", **kw)
    thr = plan(req).rows
    lat = plan(build_request(objective="latency", **kw)).rows
    for a, b in zip(thr, lat):
        assert b.draft_len >= a.draft_len
        assert b.latency_ms_per_token <= a.latency_ms_per_token * (1 + 1e-12)
        assert a.tokens_per_s >= b.tokens_per_s * (1 - _tolerance(req))


def _memory_request(context, memory_fraction=None):
    import dataclasses

    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="ngram", acceptance="rates=0.95",
                        batches=[32], context=context)
    return dataclasses.replace(req, memory_fraction=memory_fraction) if memory_fraction else req


def test_draft_length_is_chosen_among_configurations_that_fit_in_memory():
    """Pick the context at which B=32 requests fit with 1+2 tokens in flight but not with 1+3: the unconstrained
    optimum (D > 2 at acceptance 0.95) is infeasible, so the row takes the best D <= 2, says why, and fits."""
    from trtspec.recipes.optimizer import memory_needed

    probe = _memory_request(4096)
    limit = probe.memory_fraction * probe.gpu.memory_bytes
    lo, hi = 1, 10_000_000
    while hi - lo > 1:  # largest context at which 3 tokens per request fit
        mid = (lo + hi) // 2
        req = _memory_request(mid)
        lo, hi = (mid, hi) if memory_needed(req, req.drafters[0], 32, 3) <= limit else (lo, mid)
    req = _memory_request(lo)
    assert memory_needed(req, req.drafters[0], 32, 4) > limit
    free = plan(_memory_request(lo, memory_fraction=100.0)).rows[0]
    row = plan(req).rows[0]
    assert free.draft_len > 2 and free.fits_memory
    assert row.draft_len <= 2 and row.fits_memory
    assert row.binding_rule.startswith(f"memory: D={free.draft_len} ") and "does not fit" in row.binding_rule
    assert row.tokens_per_s < free.tokens_per_s


def test_row_that_does_not_fit_even_without_speculation_is_flagged():
    """Llama-3.1-70B in bf16 (141 GB of weights) on one 48 GB L40S: D = 0, fits_memory False, a clear note."""
    row = plan(build_request(model="llama-3.1-70b", gpu="l40s", drafters="ngram", acceptance="rates=0.9",
                             batches=[1])).rows[0]
    assert row.draft_len == 0 and not row.fits_memory
    assert row.binding_rule.startswith("memory: does not fit even without speculation") and "GB/GPU" in row.binding_rule


def test_engine_schedule_turns_speculation_off_where_nothing_fits():
    """Llama-3.1-70B fp8 on one H200 at context 4096: B=128 does not fit even at D=0, so the schedule must not
    give it a draft length (the curves the schedule DP sees hold only feasible D)."""
    r = resolve_recipe("auto", model="llama-3.1-70b", gpu="h200", quant="fp8", drafter="eagle3",
                       acceptance="rates=0.7", max_batch_size=128, context=4096)
    rows = {row["batch"]: row for row in r.rows}
    assert not rows[128]["fits_memory"] and rows[64]["fits_memory"]
    assert r.vllm_schedule[128] == 0 and r.vllm_schedule[64] >= 1
    assert max(r.draft_len_schedule) <= 64
