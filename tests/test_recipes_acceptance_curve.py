"""Acceptance curves (AL at D = 1, 2, ...): parsing, conversions to and from a_k / joint rates, falling curves,
file and prior formats, and what the optimizer does with a curve."""
import json
import math
import random

import pytest

from trtspec.recipes.acceptance import (FORMAT, AcceptanceProfile, curve_from_rates, joint_from_curve,
                                        joint_from_rates, load_prior, load_profile_file, parse_acceptance,
                                        prior_names, rates_from_curve, rates_from_joint)
from trtspec.recipes.errors import AcceptanceError

# InferenceX golden AL curves (recipes/priors/minimax-m3-eagle3.yaml, deepseek-v4-pro-dspark.yaml)
MINIMAX = (1.78, 2.38, 2.83, 3.11, 3.35, 3.45, 3.53, 3.74)
DSPARK = (1.86, 2.55, 3.08, 3.43, 3.74, 3.82, 3.86, 3.75)


def _random_rates(rng, n):
    return tuple(rng.uniform(0.05, 1.0) for _ in range(n))


def test_rates_to_curve_to_rates_round_trip():
    rng = random.Random(13)
    for _ in range(200):
        rates = _random_rates(rng, rng.randint(1, 12))
        back = rates_from_curve(curve_from_rates(rates))
        assert back == pytest.approx(rates, abs=1e-9)


def test_concave_curve_to_rates_to_curve_round_trip():
    rng = random.Random(7)
    for _ in range(200):
        joint = sorted((rng.uniform(0.01, 1.0) for _ in range(rng.randint(1, 10))), reverse=True)
        curve = tuple(1.0 + sum(joint[:k]) for k in range(1, len(joint) + 1))
        prof = AcceptanceProfile(curve=curve, source="test: concave curve")
        assert prof.chain_consistent
        assert curve_from_rates(prof.rates) == pytest.approx(curve, abs=1e-9)
        assert joint_from_curve(curve) == pytest.approx(joint, abs=1e-9)


def test_joint_and_rates_are_inverse():
    rng = random.Random(3)
    for _ in range(100):
        rates = _random_rates(rng, rng.randint(1, 9))
        assert rates_from_joint(joint_from_rates(rates)) == pytest.approx(rates, abs=1e-12)
    # the ngram prior's published per-token figures are joint rates: a_k = J_k / J_(k-1)
    assert rates_from_joint([0.81, 0.74, 0.70, 0.68, 0.66]) == pytest.approx(
        (0.81, 0.74 / 0.81, 0.70 / 0.74, 0.68 / 0.70, 0.66 / 0.68))
    assert rates_from_joint([0.5, 0.0, 0.0]) == (0.5, 0.0, 0.0)  # nothing reaches position 3: a_3 = 0, not 0/0
    with pytest.raises(AcceptanceError, match=r"J_2 = 0.6 must be in \[0, J_1 = 0.5\]"):
        rates_from_joint([0.5, 0.6])


def test_zero_rate_stops_the_chain():
    assert curve_from_rates((0.5, 0.0, 0.7)) == (1.5, 1.5, 1.5)
    assert rates_from_curve((1.5, 1.5, 1.5)) == (0.5, 0.0, 0.0)


def test_curve_profile_answers_the_curve_exactly():
    p = parse_acceptance("curve=" + ",".join(map(str, MINIMAX)))
    assert p.expected_al(0) == 1.0
    assert [p.expected_al(d) for d in range(1, 9)] == list(MINIMAX)
    assert p.al_curve(8) == [1.0, *MINIMAX]
    # past the curve: held flat, no gain credited, no node placed
    assert [p.expected_al(d) for d in (9, 12, 40)] == [3.74] * 3
    assert p.al_curve(11)[9:] == [3.74] * 3
    assert p.rate(9) == 0.0 and p.joint(9) == 0.0
    assert "held flat" in p.source and "held flat" in p.extrapolation


def test_curve_rates_are_the_least_concave_majorant():
    p = AcceptanceProfile(curve=MINIMAX, source="test")
    assert all(0.0 <= a <= 1.0 for a in p.rates) and len(p.rates) == 8
    for k in range(1, 9):
        assert p.joint(k) == pytest.approx(math.prod(p.rate(i) for i in range(1, k + 1)), abs=1e-15)
    # +0.21 at D=8 after +0.08 is not concave: the hull runs 3.35 -> 3.74 in one slope of 0.13 over D = 6..8
    assert curve_from_rates(p.rates) == pytest.approx((1.78, 2.38, 2.83, 3.11, 3.35, 3.48, 3.61, 3.74), abs=1e-9)
    assert not p.chain_consistent
    assert all(m >= c - 1e-12 for m, c in zip(curve_from_rates(p.rates), MINIMAX))


def test_falling_curve_has_no_negative_rate_and_keeps_its_values():
    p = load_prior("deepseek-v4-pro-dspark")
    assert p.curve == DSPARK and p.drafter == "dspark"
    assert p.expected_al(8) == 3.75 < p.expected_al(7) == 3.86
    assert all(0.0 <= a <= 1.0 for a in p.rates)
    assert p.rate(8) == 0.0
    running_max = tuple(max(DSPARK[:k]) for k in range(1, 9))
    assert curve_from_rates(p.rates) == pytest.approx(running_max, abs=1e-9)


@pytest.mark.parametrize("spec,message", [
    ("curve=", "needs at least one value"),
    ("curve=2.5", r"AL at D=1 must be in \[1, 2\]"),
    ("curve=1.8,0.9", r"AL at D=2 must be in \[1, 3\]"),
    ("curve=1.8,x", "expected curve=... with numbers"),
    ("curve=1.8,nan", "finite number"),
    ("measure", "trtspec build"),
])
def test_bad_curve_specs_are_refused(spec, message):
    with pytest.raises(AcceptanceError, match=message):
        parse_acceptance(spec)


def test_curve_and_rates_given_together_must_agree():
    rates = rates_from_curve(MINIMAX)
    AcceptanceProfile(rates=tuple(round(a, 6) for a in rates), curve=MINIMAX, source="test")
    with pytest.raises(AcceptanceError, match="disagree with the rates of curve"):
        AcceptanceProfile(rates=(0.8,) * 8, curve=MINIMAX, source="test")


def test_profile_files_with_curve_rates_or_both(tmp_path):
    only_curve = tmp_path / "curve.json"
    only_curve.write_text(json.dumps({"format": FORMAT, "drafter": "eagle3", "curve": list(MINIMAX),
                                      "per_category": {"coding": {"curve": [1.9, 2.6]}}, "source": "published"}))
    p = parse_acceptance(str(only_curve))
    assert p.curve == MINIMAX and p.expected_al(3) == 2.83
    assert p.for_category("coding").expected_al(2) == 2.6 and p.for_category("coding").expected_al(5) == 2.6
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"format": FORMAT, **p.to_dict()}))
    assert load_profile_file(both).curve == MINIMAX
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": FORMAT, "rates": [0.9] * 8, "curve": list(MINIMAX), "source": "x"}))
    with pytest.raises(AcceptanceError, match="disagree"):
        load_profile_file(bad)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": FORMAT, "source": "x"}))
    with pytest.raises(AcceptanceError, match="needs 'rates'.*or 'curve'"):
        load_profile_file(empty)


def test_rates_files_and_priors_read_as_before():
    from trtspec.zoo import demo_acceptance_path

    path = demo_acceptance_path("draft_model")
    doc = json.loads(path.read_text())
    p = load_profile_file(path)
    assert p.curve is None and p.rates == tuple(doc["rates"])
    assert p.expected_al(8) == pytest.approx(1 + sum(doc["joint"]), abs=1e-5)
    assert load_prior("llama3.1-8b-eagle3").rates == (0.6506,) * 7
    for name in prior_names():  # every shipped prior loads, with rates or a curve
        prof = load_prior(name)
        assert prof.rates and prof.source.startswith(f"prior:{name} -- ")


def test_to_dict_round_trips():
    for prof in (parse_acceptance("curve=1.78,2.38,2.83"), load_prior("deepseek-v4-pro-dspark"),
                 parse_acceptance("rates=0.8,0.7,0.6")):
        back = parse_acceptance(prof.to_dict())
        assert back.curve == prof.curve
        assert [back.expected_al(d) for d in range(12)] == pytest.approx([prof.expected_al(d) for d in range(12)])


def test_tree_values_of_a_curve_stop_at_its_end():
    from trtspec.recipes.optimizer import tree_values

    curve = curve_from_rates((0.7, 0.6, 0.5, 0.4))
    p = AcceptanceProfile(curve=curve, rank_weights=(1.0, 0.3), source="test")
    chain = tree_values(p, depth=12, topk=1, max_nodes=13)
    assert [1 + sum(chain[:k]) for k in range(1, 5)] == pytest.approx(curve, abs=1e-12)
    assert chain[4:] == [0.0] * 8  # no node deeper than the curve is worth anything
    wide = tree_values(p, depth=12, topk=2, max_nodes=40)
    assert len([v for v in wide if v > 0]) == 2 + 4 + 8 + 16  # full binary tree of depth 4, nothing below


def test_rank_weights_on_a_plateau_of_the_majorant_are_refused():
    # MINIMAX's majorant has one slope over D = 6..8, i.e. a_7 = a_8 = 1: no room for a second sibling
    with pytest.raises(AcceptanceError, match=r"reach a_7 = 1.000"):
        AcceptanceProfile(curve=MINIMAX, rank_weights=(1.0, 0.2), source="test")


def _plan(curve, batches=(1, 4, 32)):
    from trtspec.recipes.api import build_request
    from trtspec.recipes.optimizer import plan

    req = build_request(model="llama-3.1-8b", gpu="h200", drafters="dflash", acceptance=curve, batches=list(batches))
    return plan(req)


def test_optimizer_never_picks_the_falling_part_of_a_curve():
    curve = (1.9, 2.7, 3.4, 3.9, 3.2, 2.5)
    prof = parse_acceptance("curve=" + ",".join(map(str, curve)))
    result = _plan(prof)
    for row in result.rows:
        d = row.draft_len
        assert d <= 4, row
        if d:
            assert row.expected_al == curve[d - 1]  # the curve itself, no independence assumption
            assert all(curve[d - 1] >= c for c in curve[:d])
    assert result.rows[0].draft_len == 4  # batch 1: the peak


def test_optimizer_never_drafts_past_the_curve():
    result = _plan("curve=1.95,2.9,3.85")
    assert max(r.draft_len for r in result.rows) <= 3
    assert result.rows[0].draft_len == 3
