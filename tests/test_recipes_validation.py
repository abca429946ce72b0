"""Leave-one-source-out validation (trtspec.recipes.validation): honesty of the folds, the closed forms it predicts
with, interval coverage, regret, and the fit it calls."""
import dataclasses
import math

import pytest

from trtspec.recipes import validation as V
from trtspec.recipes.fidelity_fit import FITTED, fit_items


def item(mode="speedup", id="a", source="s1", engine="sglang", published=2.0, al=3.0, k0=0.010, kd=0.014,
         c_step=1e-6, batch=1, sweep=None, draft_len=3, config=None, cls="sequential", scale=1.0):
    """An item whose steps are kernels + c_step * step_us (the other figures' coefficients 0)."""
    t0 = (k0, c_step, 0.0, 0.0, 0.0, 0.0)
    td = (kd, c_step, 0.0, 0.0, 0.0, 0.0)
    return V.Item(mode, id, source, engine, "train", sweep, draft_len, batch, published, al, ((t0, td),),
                  scale=scale, tags=(("drafter_class", cls), ("drafter", "eagle3")),
                  config=config or f"D={draft_len}")


def test_item_predictions_are_the_closed_forms():
    x = [500.0, 0.0, 0.0, 0.0, 0.0]
    s0, sd = 0.010 + 500e-6, 0.014 + 500e-6
    assert item().predict(x) == pytest.approx(3.0 * s0 / sd)
    assert item(mode="baseline", scale=8.0).predict(x) == pytest.approx(8.0 / s0)
    ref, case = item().terms[0], item(k0=0.02, kd=0.03).terms[0]
    ratio = V.Item("batch-ratio", "r", "s", "sglang", "train", None, 3, 8, 0.8, 1.0, (ref, case))
    assert ratio.predict(x) == pytest.approx(((0.02 + 500e-6) / (0.03 + 500e-6)) / (s0 / sd))


def test_loso_never_fits_on_the_source_it_predicts():
    items = [item(id=f"{s}{i}", source=s) for s in ("s1", "s2", "s3") for i in range(3)]
    seen = []

    def spy(train):
        seen.append({it.source for it in train})
        return {"sglang": {"params": dict.fromkeys(FITTED, 0.0)}}

    preds = V.loso(items, fit=spy)
    assert sorted(p.item.id for p in preds) == sorted(it.id for it in items)  # each predicted exactly once
    assert seen == [{"s2", "s3"}, {"s1", "s3"}, {"s1", "s2"}]  # sorted sources, each fold without its own


def test_fit_recovers_a_step_cost_from_baselines():
    """Baselines published as B / (kernels + step): the 1-D fit finds the step cost that produced them."""
    true = 700.0
    base = [item(mode="baseline", id=f"b{i}", source=f"s{i}", k0=k, c_step=1e-6, scale=1.0,
                 published=1.0 / (k + true * 1e-6)) for i, k in enumerate((0.004, 0.006, 0.009))]
    fitted = fit_items(base)
    assert fitted["sglang"]["params"]["step_us"] == pytest.approx(true, rel=1e-3)


def _pred(source, published, predicted, cls="sequential", mode="speedup"):
    return V.Prediction(item(source=source, published=published, cls=cls, mode=mode), predicted)


def test_interval_table_is_a_percentile_of_absolute_log_errors_per_class():
    preds = [_pred(f"s{i}", 2.0, 2.0 * math.exp(r)) for i, r in enumerate((-0.3, -0.1, 0.0, 0.1, 0.2))]
    preds += [_pred("p", 2.0, 2.2, cls="parallel")]
    table = V.interval_table(preds, level=0.75, min_cases=3)
    assert table["sequential"]["log_residual_q"] == pytest.approx([-0.2, 0.2])  # |r| = 0, .1, .1, .2, .3
    assert table["parallel"]["pooled"] is True  # one case: the pooled percentile
    lo, hi = V.interval(1.5, table["sequential"])
    assert (lo, hi) == pytest.approx((1.5 * math.exp(-0.2), 1.5 * math.exp(0.2)))


def test_nested_coverage_leaves_each_source_out_of_its_own_interval():
    """A source whose error is far from everyone else's is not covered: its own residual never widens its interval."""
    preds = [_pred(f"s{i}", 2.0, 2.0 * math.exp(r)) for i, r in enumerate((-0.05, 0.0, 0.05, 0.02, -0.02))]
    preds.append(_pred("outlier", 2.0, 4.0))
    cov = V.nested_coverage(preds)
    rows = {p.item.source: hit for p, _, _, hit in cov["rows"]}
    assert rows["outlier"] is False
    assert cov["cases"] == 6 and cov["covered"] == sum(rows.values())


def test_wrong_side_outside_counts_only_intervals_that_do_not_straddle_one():
    preds = [_pred(f"s{i}", 1.3, 1.3 * math.exp(r)) for i, r in enumerate((-0.05, 0.0, 0.05, 0.02))]
    preds.append(_pred("loses", 0.8, 1.3))  # predicted to win, published to lose
    cov = V.nested_coverage(preds)
    assert cov["wrong_side_outside"] == 1  # the others' residuals are tight: its interval stays above 1


def test_regret_follows_the_planners_tie_rule():
    """The pick is the smallest D within the tie tolerance of the best predicted speedup."""
    def p(d, pub, pred):
        return V.Prediction(item(id=f"d{d}", sweep="w", draft_len=d, published=pub, batch=8), pred)

    out = V.regret([p(3, 2.0, 2.30), p(5, 2.5, 2.31), p(7, 2.4, 2.0)], tie=0.01)
    assert out["w @B=8"]["pick"] == "D=3"  # 2.30 is within 1% of 2.31: the smaller D
    assert out["w @B=8"]["regret"] == pytest.approx(1 - 2.0 / 2.5)
    assert V.regret([p(3, 2.0, 2.2), p(5, 2.5, 2.4)], tie=0.0)["w @B=8"]["regret"] == 0.0


def test_corpus_items_carry_their_tags_and_the_roofline():
    from trtspec.recipes.measurements import Measurement

    base = dict(source="https://example.org/post", title="t", quote="q", model="meta-llama/Llama-3.1-8B-Instruct",
                gpu="h200", num_gpus=1, tp=1, quant="none", engine="sglang", drafter="eagle3", batch_kind="batch",
                draft_len=3, al=2.9, metric="output_tps_total", split="train")
    ms = [Measurement(id="a", batch=1, baseline_tokens_per_s=190.0, spec_tokens_per_s=404.0, **base),
          Measurement(id="b", batch=16, baseline_tokens_per_s=2000.0, spec_tokens_per_s=3400.0, **base)]
    items, skipped = V.price_corpus(ms, roofline=True)
    modes = sorted(it.mode for it in items)
    assert modes == ["baseline", "baseline", "batch-ratio", "speedup", "speedup", "speedup-prior", "speedup-prior"]
    sp = next(it for it in items if it.mode == "speedup" and it.id == "a")
    assert sp.tag("drafter_class") == "sequential" and sp.tag("gpu_family") == "hopper" and sp.tag("batch_band") == "1"
    assert sp.roofline is not None and all(it.roofline is None for it in items if it.mode == "speedup-prior")
    prior = next(it for it in items if it.mode == "speedup-prior" and it.id == "a")
    assert prior.tag("prior") == "llama3.1-8b-eagle3" and prior.al != pytest.approx(2.9)
    assert not skipped.get("speedup")


def test_a_served_cases_prior_prediction_prices_the_prefill_at_the_priors_al():
    """With the prefill inside the measured time, the speculative round's prefill grows with AL: the speedup-prior
    item must be priced at the prior's AL, not at the AL of 1 its D-only setup carries."""
    import dataclasses

    from trtspec.recipes.engines import load_engine
    from trtspec.recipes.fidelity import predict, setup_case
    from trtspec.recipes.fidelity_fit import FITTED
    from trtspec.recipes.measurements import Measurement

    m = Measurement(id="a", source="https://example.org/post", title="t", quote="q", gpu="h200", num_gpus=1, tp=1,
                    model="meta-llama/Llama-3.1-8B-Instruct", quant="none", engine="vllm", drafter="eagle3",
                    batch=64, batch_kind="concurrency", draft_len=3, al=None, isl=2048, osl=64,
                    includes_prefill=True, baseline_tokens_per_s=4000.0, spec_tokens_per_s=4400.0,
                    metric="output_tps_total", split="train")
    items, _ = V.price_corpus([m])
    prior = next(it for it in items if it.mode == "speedup-prior")
    engine = load_engine("vllm")
    x = [{**engine.params_us(), "verify_split": engine.verify_split}[k] for k in FITTED]
    direct = predict(dataclasses.replace(setup_case(m, need_al=False), al=prior.al))
    assert prior.predict(x) == pytest.approx(direct, rel=1e-6)
    at_one = predict(setup_case(m, need_al=False)) * prior.al  # the old pricing: prefill at AL 1
    assert prior.predict(x) < at_one


def test_interval_table_groups_by_interval_class_and_nested_coverage_uses_it():
    """Items tagged with an interval class ('sequential+moe') get that class's percentile; items without the tag
    keep their drafter class; nested coverage reads each item's own class."""
    small, large = [0.01 * (i - 4) for i in range(9)], [0.1 * (i - 4) for i in range(9)]
    preds = [_pred(f"d{i}", 2.0, 2.0 * math.exp(r)) for i, r in enumerate(small)]
    tags = (("drafter_class", "sequential"), ("interval_class", "sequential+moe"), ("drafter", "eagle3"))
    moe = [V.Prediction(dataclasses.replace(item(source=f"m{i}", published=2.0), tags=tags), 2.0 * math.exp(r))
           for i, r in enumerate(large)]
    table = V.interval_table(preds + moe, level=1.0, min_cases=3)
    assert table["sequential"]["log_residual_q"] == pytest.approx([-0.04, 0.04])
    assert table["sequential+moe"]["log_residual_q"] == pytest.approx([-0.4, 0.4])
    rows = V.nested_coverage(preds + moe, level=1.0)["rows"]
    widths = {p.item.source: hi / lo for p, lo, hi, _ in rows}
    assert widths["m0"] > 2 * widths["d0"]
