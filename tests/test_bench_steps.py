"""Traced engine steps (steady-state throughput, censoring-aware acceptance) and the sweep's inputs to the planner."""
from __future__ import annotations

import random

import pytest

from runtime_fixtures import make_model
from trtspec.bench import metrics as M
from trtspec.bench.steps import PositionCounts, Tally, _Tracer, paired_pass, with_draft_len


def test_position_counts_censoring_known_answer():
    pc = PositionCounts()
    pc.add(4, 4)   # all accepted: positions 1..4 reached and accepted
    pc.add(4, 1)   # reached 1, 2; accepted 1
    pc.add(2, 2)   # capped at 2 drafts: reached and accepted 1, 2; position 3 NOT reached
    pc.add(3, 0)   # reached 1 only
    pc.add(0, 0)   # no drafts: nothing
    assert pc.reached == [4, 3, 1, 1] and pc.accepted == [3, 2, 1, 1]
    s = M.summarize_positions(pc.reached, pc.accepted, draft_len=4)
    assert s.rates == pytest.approx((3 / 4, 2 / 3, 1.0, 1.0))
    # the uncensored estimator (accepted_per_pos / drafts) counts the capped step against position 3
    naive = M.rates_from_counts(4, [3, 2, 1, 1])[0]
    assert naive[2] == pytest.approx(1 / 2) and s.rates[2] == 1.0
    assert s.mean_al == pytest.approx(1 + 7 / 4) and s.num_steps == 4 and s.accepted_tokens == 7
    with pytest.raises(ValueError, match="accepted=5"):
        pc.add(4, 5)


def test_censored_rates_recover_a_known_chain_under_budget_caps():
    """Seeded simulation: i.i.d. a_k = (0.8, 0.6, 0.9, 0.5) with random caps on the chain length;
    the censoring-aware estimate recovers every a_k, the naive one is biased low at deep positions."""
    rng = random.Random(0)
    a = (0.8, 0.6, 0.9, 0.5)
    pc, naive_steps, naive_acc = PositionCounts(), 0, [0] * 4
    for _ in range(40000):
        drafted = rng.choice((4, 4, 4, 2, 1))
        acc = 0
        while acc < drafted and rng.random() < a[acc]:
            acc += 1
        pc.add(drafted, acc)
        naive_steps += 1
        for k in range(acc):
            naive_acc[k] += 1
    est = M.summarize_positions(pc.reached, pc.accepted, draft_len=4).rates
    assert est == pytest.approx(a, abs=0.02)
    naive = M.rates_from_counts(naive_steps, naive_acc)[0]
    assert naive[2] < a[2] - 0.1


def test_shrinkage_pulls_sparse_positions_to_the_pooled_rate():
    reached, accepted = [1000, 500, 4], [500, 250, 4]
    pooled = 754 / 1504
    s = M.summarize_positions(reached, accepted, draft_len=3, prior_steps=8)
    assert s.rates[2] == pytest.approx((4 + 8 * pooled) / 12)
    assert s.rates[0] == pytest.approx((500 + 8 * pooled) / 1008)
    assert M.summarize_positions(reached, accepted, draft_len=3).rates[2] == 1.0
    assert M.summarize_positions([10], [5], draft_len=3).rates == (0.5, 0.0, 0.0)  # unreached positions: 0
    with pytest.raises(ValueError, match="prior_steps"):
        M.summarize_positions(reached, accepted, draft_len=3, prior_steps=-1)
    with pytest.raises(ValueError, match="each must be in 0..reached"):
        M.summarize_positions([3], [4], draft_len=1)


class _Out:
    def __init__(self, rid, new, drafts, acc):
        self.request_id, self.new_token_ids, self.finished = rid, [0] * new, False
        self.stats = type("S", (), {"draft_tokens": drafts, "accepted_tokens": acc})()


def test_tracer_counts_full_batches_as_steady_capped_steps_included():
    t = Tally()
    tr = _Tracer(2, 2, {0: "a", 1: "b"}, t)
    tr.record([_Out(0, 2, 2, 1), _Out(1, 1, 2, 0)], 0.25, 40)         # steady: 3 tokens
    tr.record([_Out(0, 3, 4, 3), _Out(1, 2, 4, 1)], 0.5, 44)          # steady: 5 tokens, AL 2.5
    tr.record([_Out(0, 2, 5, 4), _Out(1, 1, 6, 1)], 0.25, 46)         # request 0 capped at 1 draft: still steady
    tr.record([_Out(1, 3, 8, 3)], 0.125, 50)                          # batch drained to 1: not steady
    tr.record([_Out(1, 1, 8, 3)], None)                               # untimed: counted, not timed
    assert (t.steady_steps, t.steady_request_steps, t.steady_tokens, t.steady_s) == (3, 6, 11, 1.0)
    assert t.steady_al == pytest.approx(1 + 5 / 6) and t.steady_tokens_per_s == 11.0
    assert t.mean_context == pytest.approx((40 + 44 + 46) / 3)
    assert t.all_tokens == 11 + 3 and t.total_tokens == 11 + 3 + 1 and t.all_s == pytest.approx(1.125)
    assert t.positions.reached == [7, 4] and t.positions.accepted == [5, 2]
    assert t.by_category["b"].reached == [4, 2]
    assert (t.full_request_steps, t.full_accepted, t.full_al) == (6, 6, 2.0)  # every step with 2 drafts


def test_refilling_pass_matches_plain_generation_and_keeps_the_batch_full(tmp_path):
    import time

    from trtspec.runtime import load_pipeline

    target = make_model(tmp_path / "t", seed=0, init=0.3)
    draft = make_model(tmp_path / "d", seed=1, from_model=target, noise=0.02, layers=1)
    pipe = load_pipeline(str(target), str(draft), draft_len=3)
    pipes = {d: with_draft_len(pipe, d) for d in (0, 1, 3)}
    assert pipes[1].target is pipe.target and pipes[3].spec.draft_len == 3 and pipe.spec.draft_len == 3
    gen = random.Random(1)
    ids = [[gen.randrange(1, 60) for _ in range(n)] for n in (5, 9, 7, 6, 30, 4, 8)]
    tallies = paired_pass(pipes, ids, ["x"] * 7, 2, 12, time.perf_counter)
    ref = pipe.without_speculation().generate_ids(ids, max_new_tokens=12)
    plain = sum(len(t) for t, _ in ref)
    for d, t in tallies.items():
        assert t.total_tokens == t.all_tokens == plain                 # same greedy output; every step timed
        # refill: two rows stay busy until the queue runs dry (only the last request drains alone)
        assert t.steady_tokens >= plain - 12 and t.steady_steps > 0
        assert 5 < t.mean_context < 30 + 12
        if d == 0:
            assert t.positions.reached == [] and t.steady_al == 1.0
        else:
            assert len(t.positions.reached) <= d and t.positions.reached[0] > 0
    with pytest.raises(ValueError, match="draft_len=-1"):
        with_draft_len(pipe, -1)


def test_prefill_of_a_joining_request_runs_in_admit_not_in_the_step(tmp_path):
    """The drafter is prefilled at admission (prompt but root), so the timed step feeds it one token."""
    from trtspec.runtime import load_pipeline
    from trtspec.runtime.params import SamplingParams

    target = make_model(tmp_path / "t", seed=0, init=0.3)
    draft = make_model(tmp_path / "d", seed=1, from_model=target, noise=0.02, layers=1)
    eng = load_pipeline(str(target), str(draft), draft_len=2).engine(max_batch_size=2)
    eng.add_request("a", list(range(1, 20)), SamplingParams(max_new_tokens=4))
    assert eng.admit() == 1 and eng.admit() == 0
    r = eng.running[0]
    assert r.cache_len == 18 and eng.drafter.seen[r.row] == 18
    widths = []
    model = eng.drafter.model
    real = model.forward

    def spy(tokens, *args, **kw):
        widths.append(tokens.shape[1])
        return real(tokens, *args, **kw)

    model.forward = spy
    eng.step()
    assert widths and max(widths) == 1


def test_measured_contexts_average_the_steady_context_per_batch():
    from trtspec.bench.sweep import Point, measured_contexts

    pts = [Point(1, 0, 0, 1.0, 1.0, 1.0, context=100.0), Point(1, 2, 0, 1.0, 1.0, 1.0, context=110.0),
           Point(4, 0, 0, 1.0, 1.0, 1.0, context=300.0), Point(4, 2, 0, 1.0, 1.0, 1.0, context=0.0)]
    assert measured_contexts(pts, 512, 10) == ((1, 105), (4, 300))
    assert measured_contexts(pts, 256, 10) == ((1, 105), (4, 246))
