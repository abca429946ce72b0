"""Acceptance metric math on synthetic traces with known answers."""
import json
import math

import numpy as np
import pytest

from trtspec.bench import metrics as m
from trtspec.bench.metrics import RequestRecord


def _trace_record(qid, category, accepted_per_step, draft_len, out_tokens=0, latency=0.0):
    """A request from per-step accepted counts (chain: position k accepted iff count >= k)."""
    per_pos = [sum(1 for a in accepted_per_step if a >= k) for k in range(1, draft_len + 1)]
    return RequestRecord(qid, category, len(accepted_per_step), sum(accepted_per_step), tuple(per_pos),
                         out_tokens, latency)


def test_per_position_counts_al_and_histogram_known_answer():
    # D=3; steps accept 3, 0, 1, 2, 3 drafts -> AL = 4,1,2,3,4 (bonus included): mean 14/5
    r = _trace_record("a", "qa", [3, 0, 1, 2, 3], 3)
    assert r.accepted_per_pos == (4, 3, 2)
    s = m.summarize([r], draft_len=3)
    assert s.mean_al == pytest.approx(14 / 5)
    assert s.joint == pytest.approx((4 / 5, 3 / 5, 2 / 5))
    assert s.rates == pytest.approx((4 / 5, 3 / 4, 2 / 3))
    assert s.histogram == (1, 1, 1, 2)  # AL=1,2,3,4
    # the profile identity E[AL] = 1 + sum_k prod_{i<=k} a_i holds exactly on the counts
    assert m.expected_al(s.rates) == pytest.approx(s.mean_al)


def test_al_counts_bonus_even_when_nothing_accepted():
    s = m.summarize([_trace_record("a", "qa", [0, 0, 0], 4)], draft_len=4)
    assert s.mean_al == 1.0 and s.rates == (0.0, 0.0, 0.0, 0.0) and s.histogram == (3, 0, 0, 0, 0)


def test_summary_pools_requests_by_steps_not_by_request_mean():
    r1 = _trace_record("a", "qa", [2, 2], 2)        # AL 3 on 2 steps
    r2 = _trace_record("b", "qa", [0] * 6, 2)       # AL 1 on 6 steps
    s = m.summarize([r1, r2], draft_len=2)
    assert s.mean_al == pytest.approx(1 + 4 / 8)
    assert s.num_steps == 8 and s.accepted_tokens == 4


def test_record_validation():
    with pytest.raises(ValueError, match="non-increasing"):
        RequestRecord("a", "qa", 5, 5, (2, 3))
    with pytest.raises(ValueError, match="sums to"):
        RequestRecord("a", "qa", 5, 4, (2, 1))
    with pytest.raises(ValueError, match="starting at most at num_drafts"):
        RequestRecord("a", "qa", 1, 3, (2, 1))


def test_fitted_rates_without_per_position_counts():
    a = 0.7
    al = m.expected_al([a] * 4)
    steps = 1000
    rec = RequestRecord("t", "qa", steps, round((al - 1) * steps))
    s = m.summarize([rec], draft_len=4)
    assert s.rates_fitted and s.histogram == ()
    assert s.rates[0] == pytest.approx(a, abs=1e-3)
    assert m.fit_constant_rate(1.0, 3) == pytest.approx(0.0, abs=1e-9)
    assert m.fit_constant_rate(4.0, 3) == pytest.approx(1.0, abs=1e-9)


def test_normal_interval_matches_hand_computation():
    recs = [RequestRecord("a", "qa", 10, 10), RequestRecord("b", "qa", 10, 20), RequestRecord("c", "qa", 20, 30)]
    ci = m.al_interval(recs, method="normal", level=0.95)
    r = 60 / 40
    resid = np.array([10 - r * 10, 20 - r * 10, 30 - r * 20])
    se = math.sqrt((resid ** 2).sum() / (3 * 2)) / (40 / 3)
    assert ci.low == pytest.approx(1 + r - 1.959963985 * se)
    assert ci.high == pytest.approx(1 + r + 1.959963985 * se)


def test_identical_requests_give_zero_width_intervals():
    recs = [_trace_record(str(i), "qa", [1, 2, 0, 3], 3) for i in range(5)]
    for method in m.CI_METHODS:
        ci = m.al_interval(recs, method=method)
        assert ci.low == pytest.approx(ci.high) == pytest.approx(m.summarize(recs, draft_len=3).mean_al)


def test_bootstrap_interval_is_seeded_and_covers_the_true_mean():
    rng = np.random.default_rng(123)
    a, D = 0.6, 4
    true_al = m.expected_al([a] * D)
    covered = 0
    trials = 40
    for t in range(trials):
        recs = []
        for i in range(30):
            steps = []
            for _ in range(20):
                k = 0
                while k < D and rng.random() < a:
                    k += 1
                steps.append(k)
            recs.append(_trace_record(f"{t}-{i}", "qa", steps, D))
        ci = m.al_interval(recs, method="bootstrap", seed=0)
        assert ci == m.al_interval(recs, method="bootstrap", seed=0)  # fixed seed: reproducible
        covered += ci.low <= true_al <= ci.high
    assert covered >= 33  # nominal 95 % of 40 = 38; allow sampling slack


def test_throughput_and_per_user():
    recs = [RequestRecord("a", "qa", 1, 0, output_tokens=100, latency_s=2.0),
            RequestRecord("b", "qa", 1, 0, output_tokens=50, latency_s=0.5)]
    t = m.throughput(recs, wall_s=2.5)
    assert t.tokens_per_s == pytest.approx(60.0)
    assert t.per_user_tokens_per_s == pytest.approx((50 + 100) / 2)
    with pytest.raises(ValueError, match="wall_s"):
        m.throughput(recs, 0)


def test_profile_json_format(tmp_path):
    recs = [_trace_record("a", "coding", [3, 3, 2], 3), _trace_record("b", "qa", [0, 1, 0], 3),
            _trace_record("c", "qa", [1, 1], 3)]
    prof = m.build_profile(recs, drafter="draft_model", draft_len=3, source="unit test")
    path = prof.save(tmp_path / "acceptance.json")
    data = m.load_profile(path)
    assert data["format"] == "trtspec.acceptance/v1"
    assert data["draft_len"] == 3 and len(data["rates"]) == 3 and len(data["joint"]) == 3
    assert data["num_steps"] == 8
    assert data["mean_al"] == pytest.approx(1 + 11 / 8)
    assert set(data["per_category"]) == {"coding", "qa"}
    assert data["per_category"]["coding"]["mean_al"] == pytest.approx(1 + 8 / 3)
    assert data["per_category"]["coding"]["rates"] == pytest.approx([1.0, 1.0, 2 / 3])
    bad = dict(data, rates=[0.5])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="differs from draft_len"):
        m.load_profile(tmp_path / "bad.json")
