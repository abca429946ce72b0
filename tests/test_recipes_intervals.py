"""Intervals on predicted speedups (trtspec.recipes.intervals), shipped as data, and a plan for a user who measured
nothing (trtspec.recipes.priors): the closest published prior, named with its source, and a wider interval."""
import math

import pytest
from click.testing import CliRunner

from trtspec.cli import main
from trtspec.recipes.api import build_request
from trtspec.recipes.errors import AcceptanceError, CatalogError
from trtspec.recipes.intervals import load_intervals, parse_interval_doc, uncertain
from trtspec.recipes.optimizer import plan
from trtspec.recipes.priors import closest_prior, model_family


def doc(**over):
    d = {"format": "trtspec.intervals/v1", "how": "test", "corpus": {"speedups_scored": 10},
         "cost_model": {"all": {"log_residual_q": [-0.2, 0.1]}, "sequential": {"log_residual_q": [-0.3, 0.2]}},
         "acceptance_spread": {"eagle3": {"log_ratio_q": [-0.25, 0.3]}, "all": {"log_ratio_q": [-0.1, 0.1]}}}
    d.update(over)
    return d


def test_interval_of_a_speedup_and_its_widening_by_the_acceptance_spread():
    t = parse_interval_doc(doc())
    assert t.interval(1.5, "eagle3") == pytest.approx((1.5 * math.exp(-0.2), 1.5 * math.exp(0.3)))
    lo, hi = t.interval(1.5, "eagle3", prior=True)
    assert (lo, hi) == pytest.approx((1.5 * math.exp(-0.2 - 0.25), 1.5 * math.exp(0.3 + 0.3)))
    assert t.interval(1.5, "ngram") == pytest.approx((1.5 * math.exp(-0.1), 1.5 * math.exp(0.2)))  # class -> all
    assert uncertain(0.9, 1.2) and not uncertain(1.05, 1.4) and not uncertain(0.7, 0.95)


@pytest.mark.parametrize("bad, field", [({"cost_model": {"sequential": {"log_residual_q": [0, 1]}}}, "'all'"),
                                        ({"cost_model": {"all": {"log_residual_q": [0.2, -0.1]}}}, "log_residual_q"),
                                        ({"how": ""}, "'how'"), ({"format": "x"}, "format")])
def test_a_bad_interval_file_is_refused_naming_the_field(bad, field):
    with pytest.raises(CatalogError, match=field):
        parse_interval_doc(doc(**bad))


def test_the_shipped_intervals_cover_every_drafter_class():
    t = load_intervals()
    assert {"all", "sequential", "parallel"} <= set(t.cost_model)
    assert t.corpus_cases > 0 and "leave-one-source-out" in t.how
    for lo, hi in t.cost_model.values():
        assert lo == pytest.approx(-hi) and hi > 0  # symmetric: a source's bias can have either sign
    assert 0.5 <= t.level < 1.0


def test_plan_rows_carry_intervals_and_uncertain_rows_name_the_measurement():
    req = build_request(model="llama-3.1-8b", gpu="h200", drafters="eagle3", acceptance="rates=0.7",
                        batches=[1, 8, 64, 256], context=2048, engine="vllm")
    rows = plan(req).rows
    t = load_intervals()
    for r in rows:
        if r.draft_len:
            assert r.interval == pytest.approx(t.interval(r.speedup, "eagle3"))
            assert r.uncertain == uncertain(*r.interval)
        else:
            assert r.interval == (1.0, 1.0)
        assert bool(r.settle) == r.uncertain
        if r.uncertain:
            assert "trtspec bench" in r.settle and "uncertain" in r.binding_rule


def test_plan_json_carries_the_interval_per_row_and_the_table_prints_it():
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3", "--acceptance", "rates=0.7",
            "--batch", "1,16", "--engine", "sglang"]
    out = CliRunner().invoke(main, args + ["--json"])
    assert out.exit_code == 0, out.output
    import json

    rows = json.loads(out.output)["rows"]
    assert all(len(r["interval"]) == 2 and "uncertain" in r for r in rows)
    text = CliRunner().invoke(main, args).output
    r = rows[0]
    assert f"{r['speedup']:.2f}x ({r['interval'][0]:.2f}-{r['interval'][1]:.2f})" in text
    assert "leave-one-source-out" in " ".join(text.split())


def test_bundle_readme_says_where_the_lower_end_is_below_one():
    from trtspec.builder.emit import _uncertainty_lines

    class R:
        rows = [{"batch": 1, "draft_len": 3, "speedup": 1.8, "interval": [1.3, 2.2]},
                {"batch": 64, "draft_len": 1, "speedup": 1.1, "interval": [0.9, 1.4], "settle": "`trtspec bench X`"}]
    lines = _uncertainty_lines(R())
    assert "## Uncertainty" in lines and any("batch 64: D=1 1.10x (0.90-1.40)" in x for x in lines)
    assert any("`trtspec bench X`" in x for x in lines) and not any("batch 1:" in x for x in lines)
    R.rows = R.rows[:1]
    assert _uncertainty_lines(R()) == []


# ---- a user who measured nothing -----------------------------------------------------------------------------------


def test_the_closest_prior_is_the_same_family_nearest_in_size():
    from trtspec.recipes.arch import load_architecture

    match = closest_prior("eagle3", load_architecture("qwen3-32b"))
    assert match.name == "qwen3-30b-a3b-eagle3" and match.family_match
    assert "closest published eagle3 prior for qwen3-32b (qwen" in match.profile.source
    assert "SpecBundle" in match.profile.source  # the prior's own source is carried along
    assert model_family(load_architecture("llama-3.1-70b")) == "llama"


def test_a_prior_of_another_family_says_so_and_workload_priors_are_never_guessed():
    from trtspec.recipes.arch import load_architecture

    match = closest_prior("dspark", load_architecture("llama-3.1-8b"))
    assert match.name == "deepseek-v4-pro-dspark" and not match.family_match
    assert "no prior of the same family" in match.profile.source
    assert closest_prior("ngram", load_architecture("llama-3.1-8b")) is None  # code-edit n-gram: opt-in only
    with pytest.raises(AcceptanceError, match="no published prior for ngram"):
        build_request(model="llama-3.1-8b", gpu="h200", drafters="ngram", batches=[1])


def test_a_prior_never_comes_from_an_excluded_source():
    from trtspec.recipes.arch import load_architecture

    arch = load_architecture("qwen3-32b")
    spec_bundle = "sgl-project/SpecForge@a6b6b0230009d15ec2a97a57384e6f53f0f96946"
    match = closest_prior("eagle3", arch, exclude_sources=(spec_bundle,))
    assert match is not None and spec_bundle not in match.profile.source


def test_a_plan_without_acceptance_uses_the_prior_and_a_wider_interval():
    kw = dict(model="qwen3-32b", gpu="h200", drafters="eagle3", batches=[1], context=2048, tp=1, quant="fp8")
    prior = plan(build_request(**kw)).rows[0]
    measured = plan(build_request(acceptance="prior:qwen3-30b-a3b-eagle3", **kw)).rows[0]
    assert prior.speedup == pytest.approx(measured.speedup)
    rates = build_request(acceptance="rates=0.68", **kw)
    own = plan(rates).rows[0]
    width = lambda r: math.log(r.interval[1] / r.interval[0])  # noqa: E731
    assert width(prior) > width(own)  # a prior's interval carries the published spread of acceptance
    out = CliRunner().invoke(main, ["plan", "--model", "qwen3-32b", "--gpu", "h200", "--drafter", "eagle3",
                                    "--batch", "1", "--quant", "fp8"])
    assert out.exit_code == 0, out.output
    assert "closest published eagle3 prior for qwen3-32b" in " ".join(out.output.split())


def test_moe_targets_have_their_own_interval_class_falling_back_to_the_drafter_class():
    """A target with routed experts takes its drafter class's '+moe' residual percentile; a table without that class
    falls back to the drafter class, then to 'all'; dense targets keep the drafter class."""
    from trtspec.recipes.arch import load_architecture
    from trtspec.recipes.intervals import interval_class

    moe, dense = load_architecture("qwen3-30b-a3b"), load_architecture("llama-3.1-8b")
    assert interval_class("eagle3", moe) == "sequential+moe" and interval_class("eagle3", dense) == "sequential"
    assert interval_class("dflash", moe) == "parallel+moe" and interval_class("eagle3") == "sequential"
    cost = doc()["cost_model"] | {"sequential+moe": {"log_residual_q": [-0.4, 0.4]}}
    t = parse_interval_doc(doc(cost_model=cost))
    assert t.interval(1.5, "eagle3", arch=moe) == pytest.approx((1.5 * math.exp(-0.4), 1.5 * math.exp(0.4)))
    assert t.interval(1.5, "eagle3", arch=dense) == pytest.approx((1.5 * math.exp(-0.2), 1.5 * math.exp(0.3)))
    assert parse_interval_doc(doc()).interval(1.5, "eagle3", arch=moe) == pytest.approx(t.interval(1.5, "eagle3"))
