"""Scoring the planner against the published corpus, and the linear structure the engine fit relies on."""
import pytest

from trtspec.recipes.engines import load_engine
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.fidelity import (FITTED, Score, architecture_for, batch_pairs, linear_terms, predict, setup_case,
                                      summary, sweep_best_d)
from trtspec.recipes.measurements import Measurement, load_measurements


def case(**kw):
    base = dict(source="https://example.org/post", title="t", id="c1", quote="q", model="meta-llama/Llama-3.1-8B-Instruct",
                gpu="h200", num_gpus=1, tp=1, quant="none", engine="sglang", drafter="eagle3", batch=1,
                batch_kind="batch", draft_len=3, al=2.9, baseline_tokens_per_s=190.0, spec_tokens_per_s=404.0,
                metric="output_tps_total", split="train")
    base.update(kw)
    return Measurement(**base)


def test_architectures_resolve_builtins_model_configs_and_variants():
    assert architecture_for("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert architecture_for("Qwen/Qwen3-30B-A3B-Instruct-2507").name == "qwen3-30b-a3b"  # variant suffix dropped
    kimi = architecture_for("moonshotai/Kimi-K2-Instruct")  # aiconfigurator-core model_configs/
    assert kimi.moe.num_experts == 384 and kimi.mla is not None
    with pytest.raises(RecipeError, match="no built-in model or aiconfigurator-core model config"):
        architecture_for("nobody/NoSuchModel-7B")


def test_setup_refuses_what_it_cannot_score():
    with pytest.raises(RecipeError, match="no acceptance length published"):
        setup_case(case(al=None))
    with pytest.raises(RecipeError, match="no draft length published"):
        setup_case(case(draft_len=None))
    with pytest.raises(RecipeError, match="quant 'native'"):
        setup_case(case(quant="native"))
    s = setup_case(case(tree_nodes=5, draft_len=5, topk=3, al=3.0))
    assert (s.nodes, s.topk, s.draft_len) == (6, 3, 5)  # the root counts
    assert setup_case(case(al=None), need_al=False).al == 1.0


def test_unstated_tp_is_the_smallest_that_holds_the_weights():
    assert setup_case(case(model="meta-llama/Llama-3.3-70B-Instruct", num_gpus=None, tp=None)).request.tp == 2
    assert setup_case(case(num_gpus=None, tp=None)).request.tp == 1


def test_prediction_is_linear_in_the_engine_overheads():
    """The fit prices each case once plus once per parameter: check that decomposition against a direct plan."""
    s = setup_case(case(draft_len=5, al=3.5, batch=8))
    (k0, *c0), (kd, *cd) = linear_terms(s)
    params = {"step_us": 300.0, "spec_layer_us": 20.0, "spec_request_us": 5.0, "draft_forward_us": 80.0}
    x = [params[k] for k in FITTED]
    expected = s.al * (k0 + sum(a * b for a, b in zip(c0, x))) / (kd + sum(a * b for a, b in zip(cd, x)))
    assert predict(s, load_engine("sglang").with_params(**params)) == pytest.approx(expected, rel=1e-9)
    assert cd[FITTED.index("spec_request_us")] == pytest.approx(8e-6)  # per request: coefficient = batch
    assert cd[FITTED.index("draft_forward_us")] == pytest.approx(5e-6)  # one per serial draft forward


def test_summary_and_best_d_distance():
    scores = [Score("a", "heldout", "sglang", "s", 3, 2.0, 2.2), Score("b", "heldout", "sglang", "s", 5, 2.4, 2.1),
              Score("c", "heldout", "sglang", None, 2, 1.1, 0.9)]
    out = summary(scores)
    assert out["cases"] == 3 and out["wrong_side"] == 1
    assert out["median_abs_error"] == pytest.approx(0.125) and out["p90_abs_error"] == pytest.approx(0.1818, abs=1e-4)
    assert sweep_best_d(scores) == {"s": {"split": "heldout", "published_best_d": 5, "predicted_best_d": 3,
                                          "distance": 2, "cases": 2}}


def test_batch_pairs_keep_d_and_sweep():
    ms = [case(id="a", sweep="w", batch=1), case(id="b", sweep="w", batch=8), case(id="c", sweep="w", batch=8,
                                                                                 draft_len=5)]
    pairs = batch_pairs(ms)
    assert [(r.id, c.id) for r, c in pairs] == [("a", "b")]


def test_shipped_corpus_scores_with_the_fitted_engines():
    """Every corpus case either scores or says why; held-out cases exist on the scored side."""
    from trtspec.recipes.fidelity import score_cases

    ms = load_measurements()
    scores, skipped = score_cases(ms)
    assert len(scores) + len(skipped) == len(ms)
    assert {s.split for s in scores} == {"train", "heldout"}
    assert all(why for why in skipped.values())
