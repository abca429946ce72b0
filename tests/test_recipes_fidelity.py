"""Scoring the planner against the published corpus, and the linear structure the engine fit relies on."""
import pytest

from trtspec.recipes.engines import load_engine
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.fidelity import (Score, architecture_for, batch_pairs, predict, setup_case, summary,
                                      sweep_best_d)
from trtspec.recipes.fidelity_fit import FITTED, linear_terms
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
    with pytest.raises(RecipeError, match="quant 'native' without a priced_quant"):
        setup_case(case(quant="native"))
    assert setup_case(case(quant="native", priced_quant="fp4:attn=fp8")).request.quant == "fp4:attn=fp8"
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
    params = {"step_us": 300.0, "spec_layer_us": 20.0, "spec_request_us": 5.0, "draft_forward_us": 80.0,
              "verify_split": 0.4}
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
                                          "distance": 2, "cases": 2, "predicted_margin": pytest.approx(2.2 / 2.1 - 1)}}


def test_batch_pairs_keep_d_configuration_and_split():
    ms = [case(id="a", sweep="w", batch=1), case(id="b", sweep="w", batch=8), case(id="c", sweep="w", batch=8,
                                                                                 draft_len=5),
          case(id="d", sweep="x", batch=32), case(id="e", batch=64, split="heldout"), case(id="f", batch=16, tp=2, num_gpus=2)]
    pairs = batch_pairs(ms)
    # one configuration across sweeps of the source pairs (a-d); another D, another split, another TP do not
    assert [(r.id, c.id) for r, c in pairs] == [("a", "b"), ("a", "d")]


def test_batch_pairs_take_each_runs_own_mean_lengths_as_one_workload():
    """A source that states every run's own mean prompt / output lengths still compares one workload (within 10%);
    another workload of the same dataset (8x the prompt) does not pair."""
    ms = [case(id="a", batch=1, isl=170, osl=146), case(id="b", batch=8, isl=174, osl=145),
          case(id="c", batch=64, isl=1360, osl=146), case(id="d", batch=128, isl=1400, osl=150),
          case(id="e", batch=16, isl=None, osl=None)]
    assert [(r.id, c.id) for r, c in batch_pairs(ms)] == [("a", "b"), ("c", "d")]


def test_shipped_corpus_scores_with_the_fitted_engines():
    """Every corpus case either scores or says why; held-out cases exist on the scored side."""
    from trtspec.recipes.fidelity import score_cases

    ms = load_measurements()
    scores, skipped = score_cases(ms)
    assert len(scores) + len(skipped) == len(ms)
    assert {s.split for s in scores} == {"train", "heldout"}
    assert all(why for why in skipped.values())


def test_batch_ratio_cancels_acceptance():
    """speedup(B) / speedup(B_ref) at one D is priced with both steps at AL 1: a published AL changes nothing."""
    from trtspec.recipes.fidelity import ratio_prediction

    ref, big = case(id="a", batch=1, al=None), case(id="b", batch=32, al=None)
    with_al = ratio_prediction(case(id="a", batch=1, al=3.9), case(id="b", batch=32, al=2.0))
    assert ratio_prediction(ref, big) == pytest.approx(with_al, rel=1e-12)
    assert ratio_prediction(ref, big) < 1.0  # verification at 4 tokens costs more, relatively, at B = 32


def test_modes_are_counted_separately_and_source_al_needs_its_quote():
    from trtspec.recipes.fidelity import score_all
    from trtspec.recipes.measurements import MeasurementError

    ms = [case(id="a", batch=1), case(id="b", batch=8, baseline_tokens_per_s=1200.0, spec_tokens_per_s=2400.0,
                                       al=3.2, al_scope="source", al_quote="AL stays near 3.2 at every load")]
    scores, skipped = score_all(ms)
    assert sorted(s.mode for s in scores) == ["baseline", "baseline", "batch-ratio", "speedup", "speedup-source-al"]
    assert all(not s.wrong_side for s in scores if s.mode in ("baseline", "batch-ratio"))
    with pytest.raises(Exception, match="al_quote"):
        case(al_scope="source")
    with pytest.raises(Exception, match="priced_quant: only for quant: native"):
        case(priced_quant="fp8")
    assert issubclass(MeasurementError, Exception)


def test_baseline_mode_predicts_plain_decode_throughput():
    from trtspec.recipes.fidelity import baseline_prediction, setup_case, steps, case_pricer

    m = case(batch=8, baseline_tokens_per_s=1000.0, spec_tokens_per_s=2000.0)
    s = setup_case(m, need_al=False)
    s0, _ = steps(s, case_pricer(s))
    assert baseline_prediction(m) == pytest.approx(8 / s0)
    per_user = case(batch=8, metric="output_tps_per_user", baseline_tokens_per_s=125.0, spec_tokens_per_s=250.0)
    assert baseline_prediction(per_user) == pytest.approx(1 / s0)


def test_block_drafter_layers_come_from_the_case_where_stated():
    assert setup_case(case(drafter="dflash", draft_len=15, al=6.0)).drafter.dflash_layers == 5
    assert setup_case(case(drafter="dflash", draft_len=15, al=6.0, draft_layers=8)).drafter.dflash_layers == 8
