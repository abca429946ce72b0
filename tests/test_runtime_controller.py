"""The adaptive-speculation controller on synthetic cost tables and acceptance streams (no models)."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from trtspec.runtime.controller import (AdaptiveConfig, Controller, CostTableError, StepCosts, prior_from_profile)


def table(target, draft, sample=None):
    doc = {"format": "trtspec.cost_table/v1", "device": "synthetic",
           "target": {str(b): {str(t): s for t, s in row.items()} for b, row in target.items()},
           "draft": {str(b): {"1": s} for b, s in draft.items()}}
    if sample is not None:
        doc["sample"] = {"target": {str(b): {str(t): s for t, s in row.items()} for b, row in sample[0].items()},
                         "draft": {str(b): {"1": s} for b, s in sample[1].items()}}
    return doc


def random_table(rng, batches=(1, 2, 4, 8), tokens=range(1, 10)):
    """A cost table of no particular shape: rising in tokens with random kinks, random draft steps."""
    target = {}
    for b in batches:
        s, row = rng.uniform(5, 10) * (1 + 0.3 * b), {}
        for t in tokens:
            s += rng.choice((0.0, 0.2, 1.0, 3.0)) * b * rng.random()
            row[t] = s
        target[b] = row
    return table(target, {b: rng.uniform(0.3, 4.0) * (1 + 0.1 * b) for b in batches})


def rate_of(costs, gains, depths, packed, branching=1, margin=0.0):
    """Brute-force objective: sum of E_i(d_i) over the step's cost (drafting anything: over 1 + ``margin``)."""
    from trtspec.runtime.params import tree_size

    B = len(depths)
    tokens = B + math.fsum(sum(g[:d]) for g, d in zip(gains, depths))
    M = max(depths)
    per = sum(tree_size(branching, d) for d in depths) / B if packed else tree_size(branching, M)
    return tokens / costs.seconds("greedy", B, per, M) / (1.0 + margin if M else 1.0)


def controller_with(rng, costs, batch, max_depth, hysteresis=0.0):
    ctl = Controller(AdaptiveConfig(costs, prior=(0.5,), hysteresis=hysteresis, min_dwell=0, evidence=0), max_depth)
    ids = [f"req{i}" for i in range(batch)]
    for rid in ids:   # each request its own acceptance estimates
        ctl.seed(rid, [rng.choice((0.0, 0.05, 0.3, 0.6, 0.9, 0.99, 1.0)) for _ in range(max_depth)])
    return ctl, ids


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_choice_equals_brute_force_argmax(packed):
    rng = random.Random(7)
    checked = zero = 0
    for trial in range(120):
        costs = StepCosts(random_table(rng), packed=packed)
        B, D = rng.choice((1, 2, 3)), rng.choice((2, 3, 4))
        ctl, ids = controller_with(rng, costs, B, D)
        caps = [rng.choice((0, 1, D, D, D)) for _ in range(B)]
        gains = [ctl.gains(r) for r in ids]
        choice = ctl.choose(ids, caps)
        margin = ctl.cfg.draft_margin   # the stated rule: drafting must beat drafting nothing by it
        best = max(rate_of(costs, gains, list(d), packed, margin=margin)
                   for d in itertools.product(*(range(c + 1) for c in caps)))
        got = rate_of(costs, gains, choice.depths, packed, margin=margin)
        assert got == pytest.approx(best, rel=1e-12), (trial, caps, choice.depths)
        assert all(0 <= d <= c for d, c in zip(choice.depths, caps))
        checked += 1
        zero += max(choice.depths) == 0
    assert checked == 120 and 0 < zero < 120   # drafting nothing is chosen where it wins, not always


def test_a_near_tie_with_drafting_nothing_goes_to_drafting_nothing():
    """Drafting one token promises 3% more tokens/s than drafting nothing: inside the 5% margin, the
    controller drafts nothing; with no margin it drafts; at 8% it drafts either way."""
    for gain, margin, drafts in ((1.03, 0.05, False), (1.03, 0.0, True), (1.08, 0.05, True)):
        a = 1.25 * gain - 1.0   # rate(1) / rate(0) = (1 + a) / 1.25 on a table where D = 1 costs 1.25x D = 0
        costs = StepCosts(table({1: {1: 1.0, 2: 1.0}}, {1: 0.25}))
        ctl = Controller(AdaptiveConfig(costs, prior=(a,), draft_margin=margin, evidence=0), 1)
        choice = ctl.choose(["r"], [1])
        assert choice.rates[1] / choice.rates[0] == pytest.approx(gain)
        assert (choice.depth == 1) == drafts, (gain, margin)
    with pytest.raises(ValueError, match="draft_margin"):
        AdaptiveConfig(costs, draft_margin=1.0)


def test_tree_node_budget_priced_by_tree_size():
    """A top-2 tree of depth d verifies 1 + 2 + 4 (d - 1) nodes: the padded rate prices that."""
    rng = random.Random(3)
    costs = StepCosts(random_table(rng, tokens=range(1, 16)))
    ctl = Controller(AdaptiveConfig(costs, prior=(0.8,), hysteresis=0.0), 3, branching=2)
    ids = ["a", "b"]
    gains = [ctl.gains(r) for r in ids]
    choice = ctl.choose(ids, [3, 3])
    best = max(range(4), key=lambda M: rate_of(costs, gains, [M, M], False, branching=2, margin=ctl.cfg.draft_margin))
    assert choice.depth == best and choice.depths == [best, best]


def test_expensive_drafting_drafts_nothing_and_cheap_drafting_drafts_everything():
    flat = {b: {t: 10.0 * b for t in range(1, 10)} for b in (1, 4, 16)}
    cheap = StepCosts(table(flat, {1: 0.01, 4: 0.04, 16: 0.16}))
    dear = StepCosts(table(flat, {1: 30.0, 4: 120.0, 16: 480.0}))
    for costs, want in ((cheap, 8), (dear, 0)):
        ctl = Controller(AdaptiveConfig(costs, prior=(0.8,)), 8)
        assert ctl.choose(list(range(4)), [8, 8, 8, 8]).depths == [want] * 4


def test_sampled_steps_priced_from_the_sample_table():
    """A step verified by sampling pays the sample section's costs: dear there, the controller stops drafting."""
    greedy = {b: {t: 10.0 + t for t in range(1, 10)} for b in (1, 8)}
    sample = {b: {t: 10.0 + 40.0 * (t - 1) for t in range(1, 10)} for b in (1, 8)}
    costs = StepCosts(table(greedy, {1: 0.5, 8: 0.5}, sample=(sample, {1: 0.5, 8: 0.5})))
    assert costs.priced_sampled
    for method, positive in (("greedy", True), ("sample", False), ("block", False)):
        ctl = Controller(AdaptiveConfig(costs, prior=(0.7,)), 6)
        assert (ctl.choose(["x"], [6], method).depth > 0) is positive
    unpriced = StepCosts(table(greedy, {1: 0.5, 8: 0.5}))
    assert not unpriced.priced_sampled
    assert unpriced.seconds("sample", 3, 4, 2) == unpriced.seconds("greedy", 3, 4, 2)


def test_permuted_batch_gets_permuted_depths():
    rng = random.Random(11)
    for _ in range(40):
        costs = StepCosts(random_table(rng), packed=True)
        ctl, ids = controller_with(rng, costs, 3, 4)
        for rid in ids[1:]:   # exact ties between requests: order must still not matter
            ctl.seed(rid, ctl.estimates[ids[0]].rates)
        caps = [4, 4, 4]
        want = dict(zip(ids, ctl.choose(ids, caps).depths))
        for perm in itertools.permutations(range(3)):
            ctl2 = Controller(ctl.cfg, 4)
            for r, v in ctl.estimates.items():
                ctl2.seed(r, v.rates)
            order = [ids[i] for i in perm]
            assert dict(zip(order, ctl2.choose(order, caps).depths)) == want


def bernoulli_step(rng, rates, drafted):
    a = 0
    while a < drafted and rng.random() < rates[min(a, len(rates) - 1)]:
        a += 1
    return a


def run_stream(costs, rates_of, steps, batch=8, seed=0, **cfg):
    """Requests with fixed true acceptance (``rates_of(i)``) decoding forever; returns the controller and depths."""
    rng = random.Random(seed)
    ctl = Controller(AdaptiveConfig(costs, prior=(0.7,), **cfg), 8)
    ids = list(range(batch))
    seen = []
    for _ in range(steps):
        choice = ctl.choose(ids, [8] * batch)
        seen.append(choice.depth)
        ctl.observe(ids, choice.depths, [bernoulli_step(rng, rates_of(i), d) for i, d in zip(ids, choice.depths)])
    return ctl, seen


def near_tie_table():
    """A step costs 10 + 2.28 D per request: at a_k = 0.7, D = 2 and D = 3 tie (E[AL] 2.19 vs 2.533
    for 14.56 vs 16.84), the rest is worse -- where a controller without hysteresis flaps."""
    target = {b: {t: b * (10.0 + 2.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}
    return StepCosts(table(target, {1: 0.28, 8: 8 * 0.28}))


def test_stationary_stream_switches_are_bounded():
    costs = near_tie_table()
    ctl, seen = run_stream(costs, lambda i: (0.7,), 3000)
    assert ctl.switches <= 6, ctl.switches
    assert len(set(seen[500:])) <= 2
    # the same stream without hysteresis or dwell flaps between the near-tied depths
    loose, _ = run_stream(costs, lambda i: (0.7,), 3000, hysteresis=0.0, min_dwell=0)
    assert loose.switches > 10 * max(ctl.switches, 1)


def test_stationary_stream_where_speculation_loses_stays_off():
    """Low acceptance: the batch stops drafting; relaxation toward the prior may retry, but rarely."""
    target = {b: {t: b * (10.0 + 4.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}
    costs = StepCosts(table(target, {1: 1.0, 8: 8.0}))
    ctl, seen = run_stream(costs, lambda i: (0.1,), 3000)
    assert seen[-1] == 0 and sum(d == 0 for d in seen) > 0.9 * len(seen)
    assert ctl.switches <= 3000 // 100, ctl.switches


def test_controller_follows_a_change_of_acceptance():
    costs = near_tie_table()
    rng = random.Random(5)
    ctl = Controller(AdaptiveConfig(costs, prior=(0.7,)), 8)
    ids, phase = list(range(8)), {"rates": (0.95,)}
    depths = []
    for step in range(1200):
        if step == 600:
            phase["rates"] = (0.2,)
        c = ctl.choose(ids, [8] * 8)
        depths.append(c.depth)
        ctl.observe(ids, c.depths, [bernoulli_step(rng, phase["rates"], d) for d in c.depths])
    assert min(depths[400:600]) >= 5 and max(depths[1000:]) <= 1


def test_newcomers_start_from_the_pooled_estimate():
    """Requests that accepted everything leave; the next one starts near their rates, not at the prior."""
    costs = near_tie_table()
    ctl = Controller(AdaptiveConfig(costs, prior=(0.3,), pool=0.05), 4)
    for step in range(200):
        ids = [f"s{step}-{i}" for i in range(4)]   # every step a new batch of short-lived requests
        c = ctl.choose(ids, [4] * 4)
        ctl.observe(ids, c.depths, c.depths)     # all drafts accepted
    assert min(ctl.pool[:1]) > 0.9
    assert ctl.gains("newcomer")[0] > 0.9 and ctl.estimates["newcomer"].prior == ctl.pool[:4]
    # the pool folds a step in from counts: the same whatever the batch order
    a, b = Controller(ctl.cfg, 4), Controller(ctl.cfg, 4)
    a.observe(["x", "y", "z"], [4, 2, 3], [1, 2, 0])
    b.observe(["z", "x", "y"], [3, 4, 2], [0, 1, 2])
    assert a.pool == b.pool


def test_estimates_are_censoring_aware_and_forgotten_when_requests_leave():
    costs = near_tie_table()
    ctl = Controller(AdaptiveConfig(costs, prior=(0.5,), ema=0.5, relax=0.0), 4)
    ctl.choose(["a", "b"], [4, 4])
    ctl.observe(["a", "b"], [3, 1], [1, 1])      # a: 1 accepted, 2 rejected, 3 not reached; b: capped at 1
    a, b = ctl.estimates["a"], ctl.estimates["b"]
    assert a.rates[:2] == [0.75, 0.25] and a.observed == [True, True, False, False]
    assert a.offset == pytest.approx(0.0) and a.rates[2:] == pytest.approx([0.5, 0.5])   # logit(.75) + logit(.25) = 0
    assert b.rates[0] == 0.75 and b.observed == [True, False, False, False]
    assert b.rates[1:] == pytest.approx([0.75] * 3)   # unreached positions follow the request's level
    ctl.choose(["b"], [3])
    assert set(ctl.estimates) == {"b"}
    with pytest.raises(ValueError, match="accepted=2 must be in 0..drafted=1"):
        ctl.observe(["b"], [1], [2])


def test_cost_table_errors_name_the_field():
    good = table({1: {1: 1.0, 2: 2.0}}, {1: 0.1})
    StepCosts(good)
    with pytest.raises(CostTableError, match="field 'format'"):
        StepCosts({**good, "format": "v0"})
    with pytest.raises(CostTableError, match="'target'"):
        StepCosts({**good, "target": {"1": {"2": -1.0}}})
    with pytest.raises(CostTableError, match="'draft'"):
        StepCosts({k: v for k, v in good.items() if k != "draft"})
    with pytest.raises(CostTableError, match="'sample.target'"):
        StepCosts({**good, "sample": {"target": {}, "draft": {"1": {"1": 0.1}}}})
    with pytest.raises(CostTableError, match="'catch_up'"):
        StepCosts({**good, "catch_up": {"1": {"8": 0.0}}})
    with pytest.raises(ValueError, match="prior"):
        AdaptiveConfig(StepCosts(good), prior=(1.2,))
    with pytest.raises(ValueError, match="ema"):
        AdaptiveConfig(StepCosts(good), ema=0.0)
    assert prior_from_profile({"rates": [0.8, 0.6]}) == (0.8, 0.6)
    with pytest.raises(ValueError, match="'rates'"):
        prior_from_profile({"mean_al": 2.0})


def test_costs_interpolate_inside_and_extend_past_the_grid():
    costs = StepCosts(table({1: {1: 1.0, 3: 3.0}, 4: {1: 2.0, 3: 6.0}}, {1: 0.5, 4: 1.0}))
    assert costs.seconds("greedy", 1, 2, 0) == pytest.approx(2.0)
    assert costs.seconds("greedy", 4, 5, 0) == pytest.approx(10.0)        # tokens past the grid: last slope
    assert costs.seconds("greedy", 7, 1, 0) == pytest.approx(3.0)         # batch past the grid: last slope
    assert costs.seconds("greedy", 1, 1, 2) == pytest.approx(1.0 + 2 * 0.5)


def test_probes_recover_from_a_pessimistic_prior():
    """Prior a = 0.2 says draft nothing; the requests accept 0.9: one-token probes find that out."""
    costs = near_tie_table()
    rng = random.Random(9)
    ctl = Controller(AdaptiveConfig(costs, prior=(0.2,), probe_every=16, evidence=0), 8)
    ids, depths = list(range(8)), []
    for _ in range(400):
        c = ctl.choose(ids, [8] * 8)
        depths.append(c.depth)
        ctl.observe(ids, c.depths, [bernoulli_step(rng, (0.9,), d) for d in c.depths])
    assert depths[0] == 0 and ctl.probes >= 1 and min(depths[-100:]) >= 4
    never = Controller(AdaptiveConfig(costs, prior=(0.2,), evidence=0), 8)   # probes are off by default
    assert all(never.choose(ids, [8] * 8).depth == 0 for _ in range(100)) and never.probes == 0


def test_evidence_probes_recover_from_a_pessimistic_prior_by_default():
    """Prior a = 0.2 says draft nothing; the requests accept 0.9. With no evidence in the pool a batch
    that would draft nothing drafts one token per request until the pool has seen ``evidence``
    request-steps at position 1 -- then the estimates, not the prior, decide: it drafts for good."""
    costs = near_tie_table()
    rng = random.Random(9)
    ctl = Controller(AdaptiveConfig(costs, prior=(0.2,)), 8)
    assert ctl.cfg.evidence == 16 and ctl.cfg.probe_every == 0
    ids, seen = list(range(8)), []
    for _ in range(200):
        c = ctl.choose(ids, [8] * 8)
        seen.append((c.depth, c.probe))
        ctl.observe(ids, c.depths, [bernoulli_step(rng, (0.9,), d) for d in c.depths])
    assert seen[:2] == [(1, True), (1, True)]          # 2 steps x 8 requests = 16 request-steps
    assert ctl.probes == 2 and not ctl.needs_evidence("greedy")
    assert min(d for d, _ in seen[-100:]) >= 4 and not any(p for _, p in seen[2:])
    # the same start where the requests really accept 0.2: two probes, then drafting nothing for good
    rng = random.Random(9)
    ctl = Controller(AdaptiveConfig(costs, prior=(0.2,)), 8)
    seen = []
    for _ in range(200):
        c = ctl.choose(ids, [8] * 8)
        seen.append(c.depth)
        ctl.observe(ids, c.depths, [bernoulli_step(rng, (0.2,), d) for d in c.depths])
    assert seen[:2] == [1, 1] and set(seen[2:]) == {0} and ctl.probes == 2


def test_the_pool_is_a_running_mean_over_the_prior_until_the_ema_takes_over():
    """The prior counts as ``prior_weight`` request-steps: after n request-steps with h accepted at
    position 1 the pool holds (prior_weight * prior + h) / (prior_weight + n), in one step or many."""
    costs = near_tie_table()
    for steps in ([(4, 3)], [(1, 1), (1, 0), (2, 2)]):   # (request-steps, accepted) per step
        ctl = Controller(AdaptiveConfig(costs, prior=(0.5,), prior_weight=4.0, evidence=0), 1)
        for n, h in steps:
            ids = [f"r{len(ctl.pool_n.get('greedy', [0]))}-{i}" for i in range(n)]
            ctl.observe(ids, [1] * n, [1] * h + [0] * (n - h))
        assert ctl.pool[0] == pytest.approx((4.0 * 0.5 + 3) / (4.0 + 4))
    ctl = Controller(AdaptiveConfig(costs, prior=(0.5,), prior_weight=4.0, pool=0.05, evidence=0), 1)
    for i in range(200):                                   # long after: the EMA's weight, not 1 / n
        ctl.observe([i], [1], [1])
    before = ctl.pool[0]
    ctl.observe(["x"], [1], [0])
    assert ctl.pool[0] == pytest.approx(before * 0.95)
    with pytest.raises(ValueError, match="prior_weight"):
        AdaptiveConfig(costs, prior_weight=0.0)
    with pytest.raises(ValueError, match="evidence"):
        AdaptiveConfig(costs, evidence=-1)


def test_no_probe_where_even_full_acceptance_cannot_pay():
    """Each draft position costs more than a whole plain step: speculation is hopeless, never probed."""
    target = {b: {t: b * 10.0 * t * 1.5 for t in range(1, 10)} for b in (1, 8)}
    costs = StepCosts(table(target, {1: 1.0, 8: 8.0}))
    ctl, seen = run_stream(costs, lambda i: (0.99,), 500, probe_every=16)
    assert set(seen) == {0} and ctl.probes == 0 and ctl.needs_evidence("greedy")   # nor for evidence


def test_probes_are_rare_and_not_switches_on_a_losing_stream():
    target = {b: {t: b * (10.0 + 4.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}
    costs = StepCosts(table(target, {1: 1.0, 8: 8.0}))
    ctl, seen = run_stream(costs, lambda i: (0.1,), 3200, probe_every=16)
    assert 0 < ctl.probes <= 3200 // 16 and sum(d > 0 for d in seen[100:]) <= 3100 // 16 + 4 * ctl.switches


def churning_stream(ctl, rng, steps, batch=6, method="greedy", fresh=False, catch_up=False):
    """Requests of random acceptance joining and leaving; returns every step's (depth, depths).
    ``fresh``: forget the last choice before every step (the uncached path); ``catch_up``: pass each
    request's drafter backlog (its prompt of 20 tokens, then one more per step it drafts nothing) and
    remaining tokens (200 at first)."""
    ids, nxt, out = list(range(batch)), batch, []
    truth = {i: rng.choice((0.1, 0.5, 0.9)) for i in ids}
    backlog, left = {i: 20 for i in ids}, {i: 200 for i in ids}
    for _ in range(steps):
        if rng.random() < 0.2:   # one request leaves, another joins
            ids.remove(rng.choice(ids))
            ids.append(nxt)
            truth[nxt], backlog[nxt], left[nxt], nxt = rng.choice((0.1, 0.5, 0.9)), 20, 200, nxt + 1
        if fresh:
            ctl._last = None
        caps = [rng.choice((3, 4, 4, 4)) if rng.random() < 0.1 else 4 for _ in ids]
        extra = dict(backlog=[backlog[i] for i in ids], remaining=[left[i] for i in ids]) if catch_up else {}
        c = ctl.choose(ids, caps, method, **extra)
        for i, d in zip(ids, c.depths):
            backlog[i], left[i] = (1 if c.depth else backlog[i] + 1), max(left[i] - 1 - d, 1)
        out.append((c.depth, c.depths))
        ctl.observe(ids, c.depths, [bernoulli_step(rng, (truth[i],), d) for i, d in zip(ids, c.depths)], method)
    return out


@pytest.mark.parametrize("draft_s", [0.28, 10.0], ids=["drafting", "idle"])
def test_reused_choice_equals_a_fresh_one(draft_s):
    """The controller reuses its last evaluation while nothing it depends on changed; every step's
    choice equals the one a controller evaluating afresh makes on the same stream."""
    target = {b: {t: b * (10.0 + 2.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}
    costs = StepCosts(table(target, {1: draft_s, 8: 8 * draft_s}))
    cached, fresh = (Controller(AdaptiveConfig(costs, prior=(0.7,), min_dwell=2), 4) for _ in range(2))
    a = churning_stream(cached, random.Random(3), 600)
    b = churning_stream(fresh, random.Random(3), 600, fresh=True)
    assert a == b
    assert fresh.reused == 0
    if draft_s > 1:   # a batch drafting nothing learns nothing: most steps reuse the last evaluation
        assert sum(d == 0 for d, _ in a) > 550 and cached.reused > 150


@pytest.mark.parametrize("draft_s", [0.28, 1.2, 10.0], ids=["drafting", "near", "idle"])
def test_reused_choice_equals_a_fresh_one_while_the_catch_up_grows(draft_s):
    """An idle batch's backlog grows every step, and with it the catch-up charge: the last evaluation is
    reused while it chose drafting nothing (a larger charge only lowers drafting's rates), and every
    choice still equals a fresh controller's."""
    doc = catch_up_table(feed_per_token=0.3)
    doc["draft"] = {b: {"1": float(b) * draft_s} for b in doc["draft"]}
    costs = StepCosts(doc)
    cached, fresh = (Controller(AdaptiveConfig(costs, prior=(0.7,), min_dwell=2), 4) for _ in range(2))
    a = churning_stream(cached, random.Random(8), 600, catch_up=True)
    b = churning_stream(fresh, random.Random(8), 600, fresh=True, catch_up=True)
    assert a == b and fresh.reused == 0
    if draft_s > 5:
        assert sum(d == 0 for d, _ in a) > 550 and cached.reused > 150


def test_sampled_and_greedy_steps_keep_separate_pools():
    """Greedy and sampled verification accept different drafts: a sampled stream that accepts
    everything leaves the greedy pool (what greedy newcomers start from) at the prior."""
    costs = near_tie_table()
    ctl = Controller(AdaptiveConfig(costs, prior=(0.1,), pool=0.05, hysteresis=0.0, min_dwell=0, evidence=0), 4)
    for step in range(100):
        ids = [f"s{step}-{i}" for i in range(4)]
        ctl.choose(ids, [4] * 4, "sample")
        ctl.observe(ids, [4] * 4, [4] * 4, "sample")
    assert min(ctl.pools["sample"]) > 0.9 and ctl.pool == [0.1] * 4
    assert ctl.choose(["g"], [4], "greedy").depths == [0]          # the greedy newcomer starts at the prior
    assert ctl.estimates["g"].rates == [0.1] * 4
    assert ctl.choose(["s"], [4], "sample").depths == [4]          # the sampled one at the sampled pool
    assert ctl.estimates["s"].rates == ctl.pools["sample"]



def clocked(doc, clock="cpu"):
    """A synthetic table stamped with the clock it was 'measured' on: the controller then learns from steps."""
    return StepCosts({**doc, "clock": clock})


def served_step(ctl, depth, extra):
    """Seconds of a step at ``depth`` on a machine running the table's steps as timed, but each
    proposal ``extra(depth)`` seconds dearer."""
    return ctl.cfg.costs.seconds("greedy", 8, depth + 1, depth) + extra(depth)


def test_measured_steps_correct_a_table_that_underprices_drafting():
    """The table says drafting pays at a = 0.7; served steps cost 2x the table whenever the batch
    drafts (a catch-up the table does not see). The controller measures that and stops drafting;
    from the table alone it keeps drafting."""
    target = {b: {t: b * (10.0 + 1.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}
    doc = table(target, {1: 0.5, 8: 4.0})
    rng = random.Random(4)
    for learn, drafts in ((0.1, False), (0.0, True)):
        ctl = Controller(AdaptiveConfig(clocked(doc), prior=(0.7,), learn=learn), 4)
        ids, seen = list(range(8)), []
        costs = ctl.cfg.costs
        for _ in range(300):
            c = ctl.choose(ids, [4] * 8)
            seen.append(c.depth)
            ctl.observe(ids, c.depths, [bernoulli_step(rng, (0.7,), d) for d in c.depths])
            ctl.observe_cost("greedy", 8, c.depth, served_step(
                ctl, c.depth, lambda d: costs.seconds("greedy", 8, d + 1, d) if d else 0.0))
        assert max(seen[:10]) > 0 and (min(seen[-100:]) > 0) == drafts, seen[-100:]   # drafts first, then learns
        assert (ctl.served is None) == (learn == 0)
        if learn:
            served, table3 = ctl.served, costs.seconds("greedy", 8, 4, 3)
            assert served.published[("greedy", 4, 0)] == pytest.approx(1.0, rel=0.03)   # published within 2%
            assert served.price("greedy", 8, 3, table3) > 1.7 * table3


def test_served_depth_prices_find_the_depth_the_table_misprices():
    """The table says D = 4 pays best at a = 0.8; served proposals of 3 or more tokens cost 30 s more
    (a kernel the table's timing did not catch). Exploring one step in ``explore_every`` measures the
    shallower depths too, and the controller settles on the best served one, D = 2 (the brute-force
    argmax of the served rates); from the table alone it stays at 4."""
    target = {b: {t: b * (10.0 + 1.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}
    doc, extra = table(target, {1: 0.5, 8: 4.0}), (lambda d: 30.0 if d >= 3 else 0.0)
    gain = lambda d: 8 * sum(0.8 ** k for k in range(d + 1))  # noqa: E731
    served = {d: gain(d) / (8 * (10.0 + d) + 4.0 * d + extra(d)) for d in range(5)}
    assert max(served, key=served.get) == 2
    for learn, settled in ((0.1, 2), (0.0, 4)):
        rng = random.Random(5)
        ctl = Controller(AdaptiveConfig(clocked(doc), prior=(0.8,), learn=learn), 4)
        ids, seen = list(range(8)), []
        for _ in range(400):
            c = ctl.choose(ids, [4] * 8)
            seen.append(c.depth)
            ctl.observe(ids, c.depths, [bernoulli_step(rng, (0.8,), d) for d in c.depths])
            ctl.observe_cost("greedy", 8, c.depth, served_step(ctl, c.depth, extra))
        assert seen[0] == 4 and ctl.current == settled
        if learn:   # explored: every depth measured, exploring steps one in explore_every (two for depth 0)
            assert {("greedy", 4, d) for d in range(5)} <= set(ctl.served.published)
            runs0 = sum(1 for a, b in zip(seen, seen[1:]) if a > 0 and b == 0)
            assert 4 <= ctl.probes <= 400 // 16 + runs0 and ctl.switches <= 3, (ctl.probes, ctl.switches)   # probes are not switches
            assert seen[-100:].count(2) >= 100 - 100 // 16 - 100 // 64 - 2


def test_served_costs_are_a_factor_per_depth_borrowed_where_unmeasured_and_ignore_unclocked_tables():
    from trtspec.runtime.controller import ServedCosts

    c = ServedCosts(0.1)
    assert c.price("greedy", 8, 3, 10.0) == 10.0                      # nothing measured: the table
    c.observe("greedy", 8, 0, 15.0, 10.0)                             # the section's first step sets the scale
    assert c.factor("greedy", 4, 0) == pytest.approx(1.5)
    assert c.price("greedy", 8, 3, 20.0) == pytest.approx(30.0)       # a drafting depth borrows the band's only one
    c.observe("greedy", 8, 2, 45.0, 10.0)                             # 4.5x: clipped to 2x the 1.5 it borrowed, meaned
    assert c.factor("greedy", 4, 2) == pytest.approx(2.25)
    assert c.price("greedy", 12, 4, 10.0) == pytest.approx(22.5)      # the nearest drafting depth of the band
    assert c.price("greedy", 8, 0, 10.0) == pytest.approx(15.0)       # drafting nothing keeps its own
    assert c.price("greedy", 1, 2, 10.0) == pytest.approx(22.5)       # another band: the nearest band's, same depth
    assert c.price("greedy", 1, 0, 10.0) == pytest.approx(15.0)
    assert c.price("sample", 8, 1, 10.0) == 10.0                      # another table section learns its own
    assert c.age("greedy", 8, 0, 10) == 10 and c.age("greedy", 1, 2, 10) == math.inf
    before = c.price("greedy", 8, 0, 10.0)
    for _ in range(3):
        c.observe("greedy", 8, 0, 1e6, 10.0)                          # an outlier step moves it at most x2 per step
    assert before < c.price("greedy", 8, 0, 10.0) < before * 2 ** 3
    plain = Controller(AdaptiveConfig(StepCosts(table({1: {1: 1.0, 2: 2.0}}, {1: 0.1})), learn=0.1), 1)
    assert plain.served is None and plain.clock is None               # a table without its clock is not learned
    with pytest.raises(CostTableError, match="field 'clock'"):
        StepCosts({**table({1: {1: 1.0}}, {1: 0.1}), "clock": "gpu"})
    with pytest.raises(ValueError, match="learn"):
        AdaptiveConfig(plain.cfg.costs, learn=1.5)
    with pytest.raises(ValueError, match="explore_every"):
        AdaptiveConfig(plain.cfg.costs, explore_every=-1)


def test_pool_positions_not_reached_follow_the_pools_level():
    """Steps that draft two positions of a workload accepting 0.9 (prior 0.5): the pool's positions
    3-4 rise with its level, so newcomers are expected to accept deeper too."""
    costs = near_tie_table()
    ctl = Controller(AdaptiveConfig(costs, prior=(0.5,), pool=0.05), 4)
    for step in range(200):
        ids = [f"s{step}-{i}" for i in range(4)]
        ctl.choose(ids, [4] * 4)
        ctl.observe(ids, [2] * 4, [2] * 4)
    assert ctl.pool_seen["greedy"] == [True, True, False, False]
    assert min(ctl.pool[:2]) > 0.95
    assert ctl.pool[2] == pytest.approx(ctl.pool[3]) and ctl.pool[2] > 0.9


def catch_up_table(feed_per_token=0.5):
    """A step costs 10 + 2 (T - 1) per request plus 1 per draft step; the drafter feeds a backlog of U
    tokens per request for ``feed_per_token`` * U per request (from 2 tokens on)."""
    doc = table({b: {t: b * (10.0 + 2.0 * (t - 1)) for t in range(1, 10)} for b in (1, 8)}, {1: 1.0, 8: 8.0})
    doc["catch_up"] = {str(b): {str(u): b * feed_per_token * u for u in (2, 8, 32, 128)} for b in (1, 8)}
    return doc


def test_the_drafters_catch_up_is_charged_to_the_batchs_remaining_tokens():
    """The stated rule: a drafting step's rate is sum E / (cost + sum E * C / sum remaining), C the feed
    of the largest backlog beyond two tokens; an exact argmax of it, and drafting starts only where the
    remaining tokens repay the one-off."""
    costs = StepCosts(catch_up_table())
    rng = random.Random(3)
    for trial in range(60):
        B, D = rng.choice((1, 2, 3)), 4
        ctl, ids = controller_with(rng, costs, B, D)
        backlog = [rng.choice((1, 2, 9, 40, 100)) for _ in ids]
        remaining = [rng.choice((2, 6, 30, 300)) for _ in ids]
        choice = ctl.choose(ids, [D] * B, backlog=backlog, remaining=remaining)
        C = costs.catch_up(B, max(backlog))
        assert C == (0.0 if max(backlog) <= 2 else pytest.approx(B * 0.5 * (max(backlog) - 2)))
        gains = [ctl.gains(r) for r in ids]

        def rate(d):
            tokens = B + math.fsum(sum(g[:k]) for g, k in zip(gains, d))
            extra = tokens * C / sum(remaining) if max(d) else 0.0
            return tokens / (costs.seconds("greedy", B, max(d) + 1, max(d)) + extra) / (1.05 if max(d) else 1.0)

        best = max(rate([M] * B) for M in range(D + 1))
        assert rate(choice.depths) == pytest.approx(best, rel=1e-12), trial
        assert choice.catch_up == (C if choice.depth else 0.0)
    ctl = Controller(AdaptiveConfig(costs, prior=(0.9,), min_dwell=0, evidence=0), 4)
    far, near = ctl.choose(["a"], [4], backlog=[100], remaining=[400]), None
    ctl = Controller(AdaptiveConfig(costs, prior=(0.9,), min_dwell=0, evidence=0), 4)
    near = ctl.choose(["a"], [4], backlog=[100], remaining=[6])
    assert far.depth > 0 and near.depth == 0   # the same backlog: repaid over 400 tokens, not over 6
    steady = Controller(AdaptiveConfig(costs, prior=(0.9,), evidence=0), 4).choose(["a"], [4], backlog=[2], remaining=[6])
    plain = Controller(AdaptiveConfig(costs, prior=(0.9,), evidence=0), 4).choose(["a"], [4])
    assert steady.depth == plain.depth > 0 and steady.catch_up == 0.0   # a steady step's feed is in the table
    with pytest.raises(ValueError, match="backlog and remaining"):
        ctl.choose(["a"], [4], backlog=[3])


def test_a_new_batch_size_lifts_the_dwell():
    """The dwell holds a depth against wandering estimates at the same batch size, not against a
    batch that grew: a depth chosen at B = 1 goes at B = 8, where drafting loses, at once."""
    target = {1: {t: 10.0 for t in range(1, 10)}, 8: {t: 8 * (10.0 + 8.0 * (t - 1)) for t in range(1, 10)}}
    costs = StepCosts(table(target, {1: 0.5, 8: 8.0}))
    ctl = Controller(AdaptiveConfig(costs, prior=(0.8,), min_dwell=1000, evidence=0), 4)
    assert ctl.choose(["a"], [4]).depth > 0
    ids = ["a"] + [f"n{i}" for i in range(7)]
    assert ctl.choose(ids, [4] * 8).depth == 0 and ctl.switches == 1
    for _ in range(3):   # the same batch: within the dwell, nothing moves, even where the estimates say so
        ctl.observe(ids, [0] * 8, [0] * 8)
        assert ctl.choose(ids[:1] + ids[1:], [4] * 8).depth == 0
    ctl.seed("a", [1.0] * 4)
    assert ctl.choose(["a"], [4]).depth > 0 and ctl.switches == 2   # back to B = 1: a new batch again


def test_exploring_measures_drafting_nothing_first():
    """Until its band has measured a step that drafts nothing, the price of drafting nothing borrows a
    drafting depth's factor (the other kind): the first exploring step serves depth 0."""
    costs = clocked(table({1: {t: 10.0 + t for t in range(1, 10)}}, {1: 0.5}))
    ctl = Controller(AdaptiveConfig(costs, prior=(0.9,), explore_every=4, min_dwell=0), 4)
    served = []
    for _ in range(8):
        c = ctl.choose(["a"], [4])
        served.append((c.depth, c.probe))
        ctl.observe_cost("greedy", 1, c.depth, 0.5 * costs.seconds("greedy", 1, c.depth + 1, c.depth))
    assert served[0][0] > 0 and served[3] == served[4] == (0, True), served   # a run of two: the second learned
    assert ctl.served.counts[("greedy", 1, 0)] == 1


def test_a_step_after_one_of_the_other_kind_is_not_learned():
    """Switching between drafting and drafting nothing costs (caches, a catch-up): the step after a
    switch is not what its depth costs, so it is not learned; the next one of the same kind is."""
    costs = clocked(table({1: {t: 10.0 + t for t in range(1, 10)}}, {1: 0.5}))
    ctl = Controller(AdaptiveConfig(costs, prior=(0.9,)), 4)
    for depth, learned in ((2, None), (2, 2), (0, None), (0, 0), (3, None), (1, 1)):
        before = dict(ctl.served.counts)
        ctl.observe_cost("greedy", 1, depth, 5.0)
        grown = {k[2] for k, n in ctl.served.counts.items() if n != before.get(k, 0)}
        assert grown == ({learned} if learned is not None else set()), (depth, grown)


def flat_table():
    """A GPU-like step: its cost hardly depends on the batch (a fixed 10 per step plus 0.1 per token),
    a draft step 5.3: at a_k = 0.7 and B = 4, D = 1 beats drafting nothing by about 10% per step."""
    target = {b: {t: 10.0 + 0.1 * b * t for t in range(1, 10)} for b in (1, 2, 4, 8)}
    return StepCosts(table(target, {b: 5.3 for b in (1, 2, 4, 8)}))


def test_turnover_share_is_a_running_mean_over_finished_requests_then_an_ema():
    ctl = Controller(AdaptiveConfig(flat_table(), evidence=0), 4)
    ctl.observe_turnover(2, 0)                       # both slots stayed empty
    ctl.observe_turnover(2, 1)                       # one of two
    assert ctl._vacancy == [pytest.approx(0.75), 4] and ctl.vacancy == pytest.approx(0.75)
    version = ctl._version
    ctl.observe_turnover(1, 1)                       # 0.75 -> 0.6: published, the reuse key moves
    assert ctl.vacancy == pytest.approx(0.6) and ctl._version == version + 1
    for _ in range(100):
        ctl.observe_turnover(1, 1)
    before = ctl._vacancy[0]
    ctl.observe_turnover(1, 0)                       # long after: weight 0.1 per finished request
    assert ctl._vacancy[0] == pytest.approx(before + 0.1 * (1.0 - before))
    assert ctl.vacancy == 0.0 or abs(ctl.vacancy - ctl._vacancy[0]) <= 0.05
    off = Controller(AdaptiveConfig(flat_table(), evidence=0, turnover=False), 4)
    off.observe_turnover(4, 0)
    assert off.vacancy == 0.0


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_turnover_choice_equals_brute_force_argmax(packed):
    """The stated rule: every step, drafting nothing too, is charged v / length * L(B, M) per token yielded,
    L(B, M) = cost(B, M) / B - (cost(B, M) - cost(B - 1, M)) (0 at B = 1); an exact argmax of it."""
    rng = random.Random(11)
    for trial in range(80):
        costs = StepCosts(random_table(rng), packed=packed)
        B, D = rng.choice((1, 2, 3, 4)), rng.choice((2, 3))
        ctl, ids = controller_with(rng, costs, B, D)
        ctl.observe_turnover(1, rng.choice((0, 1)))
        lengths = [rng.choice((8, 16, 200)) for _ in ids]
        caps = [rng.choice((0, 1, D, D)) for _ in range(B)]
        choice = ctl.choose(ids, caps, lengths=lengths)
        gains = [ctl.gains(r) for r in ids]
        per_len = ctl.vacancy * math.fsum(1.0 / n for n in lengths) / B

        def rate(d):
            M = max(d)
            full = costs.seconds("greedy", B, M + 1, M)
            loss = max(full / B - (full - costs.seconds("greedy", B - 1, M + 1, M)), 0.0) if B > 1 else 0.0
            tokens = B + math.fsum(sum(g[:k]) for g, k in zip(gains, d))
            per = sum(k + 1 for k in d) / B if packed else M + 1
            return tokens / (costs.seconds("greedy", B, per, M) + tokens * per_len * loss) / (1.05 if M else 1.0)

        best = max(rate(list(d)) for d in itertools.product(*(range(c + 1) for c in caps)))
        assert rate(choice.depths) == pytest.approx(best, rel=1e-12), (trial, caps, choice.depths)


def test_short_requests_whose_slots_stay_empty_draft_nothing_where_a_queue_would_draft():
    """On a flat step D = 1 wins per step; requests of 8 tokens finish so often while drafting that
    the slots they leave empty (v = 1: nothing waits) cost more than it wins. With a queue refilling
    every slot (v = 0), or at B = 1 (no step runs while the slot is empty), it drafts."""
    costs = flat_table()
    ids = ["a", "b", "c", "d"]
    base = AdaptiveConfig(costs, prior=(0.7,), evidence=0)
    assert Controller(base, 4).choose(ids, [4] * 4, lengths=[8] * 4).depth == 1
    closed = Controller(base, 4)
    closed.observe_turnover(1, 0)
    assert closed.vacancy == 1.0 and closed.choose(ids, [4] * 4, lengths=[8] * 4).depth == 0
    assert Controller(base, 4).choose(ids, [4] * 4).depth == 1              # no lengths: no charge
    long = Controller(base, 4)
    long.observe_turnover(1, 0)
    assert long.choose(ids, [4] * 4, lengths=[400] * 4).depth == 1          # long requests: rare turnover
    queued = Controller(base, 4)
    queued.observe_turnover(1, 1)
    assert queued.vacancy == 0.0 and queued.choose(ids, [4] * 4, lengths=[8] * 4).depth == 1
    single = Controller(base, 4)
    single.observe_turnover(1, 0)
    assert single.choose(["a"], [4], lengths=[8]).depth == 1
    with pytest.raises(ValueError, match="lengths"):
        closed.choose(ids, [4] * 4, lengths=[8, 8])


def test_a_budget_running_out_serves_the_best_depth_within_it_and_keeps_the_batchs_depth():
    """Near its end a request may draft 1 at most, where drafting 1 loses: that step drafts nothing,
    but the batch's depth stays, so the next request drafts at once -- no switch, no dwell."""
    costs = StepCosts(table({1: {1: 10.0, **{t: 18.0 + 0.1 * (t - 2) for t in range(2, 10)}}}, {1: 1.5}))
    ctl = Controller(AdaptiveConfig(costs, prior=(0.9,), evidence=0), 4)
    assert ctl.choose(["a"], [4]).depth == 4 and ctl.current == 4
    last = ctl.choose(["a"], [1])
    assert last.depth == 0 and last.rates[1] < last.rates[0] and not last.switched
    assert ctl.current == 4 and ctl.switches == 0
    assert ctl.choose(["b"], [4]).depth == 4


def test_a_batch_sharing_no_request_with_the_last_choice_lifts_the_dwell():
    """The dwell holds a depth against the same requests' wandering estimates, not for the next request."""
    costs = near_tie_table()
    ctl = Controller(AdaptiveConfig(costs, prior=(0.7,), min_dwell=1000, evidence=0), 8)
    ctl.seed("a", [0.05] * 8)
    assert ctl.choose(["a"], [8]).depth == 0
    ctl.seed("a", [0.95] * 8)                     # the same request: the dwell holds
    assert ctl.choose(["a"], [8]).depth == 0 and ctl.switches == 0
    ctl.seed("b", [0.95] * 8)                     # its successor: a fresh choice
    assert ctl.choose(["b"], [8]).depth > 0 and ctl.switches == 1
