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


def test_tracer_counts_only_full_batches_with_full_drafts_as_steady():
    t = Tally()
    tr = _Tracer(2, 2, {0: "a", 1: "b"}, t)
    tr.record([_Out(0, 2, 2, 1), _Out(1, 1, 2, 0)], None)          # first step: untimed
    tr.record([_Out(0, 3, 4, 3), _Out(1, 2, 4, 1)], 0.5)           # steady: 5 tokens, AL 2.5
    tr.record([_Out(0, 2, 5, 4), _Out(1, 1, 6, 1)], 0.25)          # request 0 capped at 1 draft: not steady
    tr.record([_Out(1, 3, 8, 3)], 0.125)                           # batch drained to 1: not steady
    assert (t.steady_steps, t.steady_request_steps, t.steady_tokens, t.steady_s) == (1, 2, 5, 0.5)
    assert t.steady_al == pytest.approx(2.5) and t.steady_tokens_per_s == 10.0
    assert t.all_tokens == 5 + 3 + 3 and t.total_tokens == 3 + 11 and t.all_s == pytest.approx(0.875)
    assert t.positions.reached == [7, 4] and t.positions.accepted == [5, 2]
    assert t.by_category["b"].reached == [4, 2]
    assert (t.full_request_steps, t.full_accepted, t.full_al) == (6, 6, 2.0)  # every step with 2 drafts


def test_paired_pass_matches_plain_generation_and_shares_models(tmp_path):
    import time

    from trtspec.runtime import load_pipeline

    target = make_model(tmp_path / "t", seed=0, init=0.3)
    draft = make_model(tmp_path / "d", seed=1, from_model=target, noise=0.02, layers=1)
    pipe = load_pipeline(str(target), str(draft), draft_len=3)
    pipes = {d: with_draft_len(pipe, d) for d in (0, 1, 3)}
    assert pipes[1].target is pipe.target and pipes[3].spec.draft_len == 3 and pipe.spec.draft_len == 3
    gen = random.Random(1)
    ids = [[gen.randrange(1, 60) for _ in range(n)] for n in (5, 9, 7, 6)]
    tallies = paired_pass(pipes, ids, ["x"] * 4, 2, 12, time.perf_counter)
    ref = pipe.without_speculation().generate_ids(ids, max_new_tokens=12)
    plain = sum(len(t) for t, _ in ref)
    for d, t in tallies.items():
        assert t.total_tokens == plain and t.all_tokens < plain  # same greedy output; first steps untimed
        assert t.steady_steps > 0 and t.steady_al >= 1.0
        if d == 0:
            assert t.positions.reached == [] and t.steady_al == 1.0
        else:
            assert len(t.positions.reached) <= d and t.positions.reached[0] > 0
    with pytest.raises(ValueError, match="draft_len=-1"):
        with_draft_len(pipe, -1)


def test_workload_contexts_mean_longest_prompt_per_batch():
    from trtspec.bench.sweep import workload_contexts

    ids = [[0] * n for n in (10, 30, 20, 40, 50)]
    got = dict(workload_contexts(ids, (1, 2, 4), 8, 512, 10))
    assert got[1] == round(150 / 5) + 4                   # every prompt is its own batch
    assert got[2] == round((30 + 40) / 2) + 4             # full batches only: (10, 30), (20, 40)
    assert got[4] == 40 + 4
    assert dict(workload_contexts(ids, (4,), 8, 40, 10))[4] == 30   # capped at context - reserve


def test_profile_batch_contexts_validation_and_lookup():
    from trtspec.bench.profile import ProfileConfig

    cfg = ProfileConfig(batch_sizes=(1, 4), context_len=64, batch_contexts=((4, 300),))
    assert (cfg.context_for(1), cfg.context_for(4)) == (64, 300)
    with pytest.raises(ValueError, match="batch_contexts"):
        ProfileConfig(batch_sizes=(1, 4), batch_contexts=((2, 300),))
    with pytest.raises(ValueError, match="batch_contexts"):
        ProfileConfig(batch_sizes=(1, 4), batch_contexts=((1, 0),))


def test_sweep_acceptance_max_d_versus_pooled_and_counts_in_profile(tmp_path):
    import json

    from trtspec.bench.sweep import SweepConfig, sweep_acceptance
    from trtspec.recipes.acceptance import load_profile_file

    counts = {0: PositionCounts(), 1: PositionCounts([100], [80]), 2: PositionCounts([50, 40], [30, 20])}
    by_cat = {d: {"coding": c} for d, c in counts.items()}
    cfg = SweepConfig(draft_lens=(0, 1, 2))
    prof = sweep_acceptance(counts, by_cat, cfg, drafter="draft_model", source="test")
    assert prof.overall.rates == pytest.approx((30 / 50, 20 / 40)) and prof.draft_len == 2
    pooled = sweep_acceptance(counts, by_cat, SweepConfig(draft_lens=(0, 1, 2), acceptance="pooled"),
                              drafter="draft_model", source="test")
    assert pooled.overall.rates == pytest.approx((110 / 150, 20 / 40))
    path = prof.save(tmp_path / "acc.json")
    doc = json.loads(path.read_text())
    assert doc["counts"] == {"reached": [50, 40], "accepted": [30, 20]} and "censoring-aware" in doc["source"]
    assert load_profile_file(path).rates == pytest.approx((0.6, 0.5))  # what the planner reads
    assert M.load_profile(path)["per_category"]["coding"]["rates"] == pytest.approx([0.6, 0.5])
    with pytest.raises(ValueError, match="acceptance='mean'"):
        SweepConfig(acceptance="mean")


def test_format_detail_puts_prediction_next_to_measurement():
    from trtspec.bench.sweep import Point, compare, format_detail

    class Cost:
        def target_time(self, b, k):
            return 0.010 + 0.001 * k

        def draft_step_time(self, b, w):
            return 0.002

    pts = [Point(1, 0, 100, 1.0, 90.0, 1.0, 0.011, 10, 90.0, 1.0, 1 / 0.011),
           Point(1, 2, 100, 1.0, 120.0, 1.7, 0.017, 10, 110.0, 1.6, 1.6 / 0.017)]
    (v,) = compare(pts, [0.5, 0.5], Cost(), None)
    assert v.cb_ratios["model"] == 1.0 and v.cb_ratios["fixed3"] is None
    assert v.predicted_step_s == pytest.approx({0: 0.011, 2: 0.017})
    assert v.predicted_al == pytest.approx({0: 1.0, 2: 1.75})
    assert v.predicted_tokens_per_s[2] == pytest.approx(1.75 / 0.017)
    rows = format_detail([v], pts).splitlines()
    assert rows[3].split() == ["1", "2", "|", "17.00", "17.00", "1.00", "|", "1.70", "1.75", "1.60", "|", "120.0",
                               "102.9", "0.86", "|", "94.1"]


def test_engine_profile_cell_rebuilds_before_the_budget_caps_drafts(tmp_path):
    """Near the context limit a cell's requests exhaust their budget within a few steps: it rebuilds
    (untimed) instead of timing capped steps, and every timed step drafted the full D."""
    from trtspec.bench.profile import ProfileConfig, _EngineCell
    from trtspec.runtime import load_pipeline

    target = make_model(tmp_path / "t", seed=0, init=0.3, max_pos=64)
    draft = make_model(tmp_path / "d", seed=1, from_model=target, noise=0.02, layers=1, max_pos=64)
    pipe = with_draft_len(load_pipeline(str(target), str(draft), draft_len=3), 3)
    cfg = ProfileConfig(batch_sizes=(2,), tokens=(4,), context_len=40)
    cell = _EngineCell(pipe, 2, 3, 40, cfg)
    assert (cell.prompt_len, cell.max_len) == (40 - 8, 40 + 8)  # lengths kept centred on the context
    assert cell.budget == 64 - cell.prompt_len - 1
    orig = pipe.drafter.propose
    for _ in range(40):
        rest, dd = cell.step()
        assert rest > 0 and dd > 0 and min(cell.left.values()) >= 1  # no request ran out of budget
        assert cell.prompt_len + cell.budget - min(cell.left.values()) <= cell.max_len
    assert cell.builds >= 2 and min(cell.left.values()) >= 1
    with pytest.raises(ValueError, match="too few for steps of D=3"):
        _EngineCell(pipe, 2, 3, 60, cfg)
    assert pipe.drafter.propose == orig  # the timing hook lives on each engine's own drafter
