"""Predictions against published figures (sources in the docstrings; tolerances justified per test).

The analytic model (``pricing="roofline"``) keeps its original checks; the measured model (perf-db kernels and the
engines' fitted costs, the default) is judged on the whole corpus by ``benchmarks/bench_fidelity.py`` and, where a
figure here moves, the test says by how much and why."""
import pytest

from trtspec.recipes.api import build_request
from trtspec.recipes.optimizer import plan


def _row(**kw):
    return plan(build_request(**kw)).rows[0]


def test_llama33_70b_small_draft_model_h200_batch1():
    """TensorRT-LLM blog (Llama 3.3 70B, draft Llama 3.2 1B, H200, FP8, batch 1): 51.14 -> 181.74 tok/s (3.55x).

    The baseline checks the roofline (HBM-bound decode) within 10%: the efficiency factors were fitted on a
    different model and GPU (Llama-3.1-8B on H100), so this is an independent check. The blog publishes no acceptance
    for the 1B draft, so instead of inventing one the test asserts that 3.55x lies inside the model's predictions for
    a per-position acceptance band of 0.70-0.85 (typical of same-family small drafts at temperature 0): a draft cost
    or verification cost off by ~2x would move the whole band past 3.55x. Analytic model only: priced from the
    H200 perf-db FP8 GEMM tables with TensorRT-LLM's fitted costs the baseline lands ~20% low (~41 tok/s) and the
    band (~2.0-3.0x) below 3.55x; the blog predates the PyTorch backend those tables were collected on."""
    kw = dict(model="llama-3.3-70b", gpu="h200", quant="fp8", drafters="draft_model", draft_model="llama-3.2-1b",
              batches=[1], context=2048, pricing="roofline")
    low = _row(acceptance="rates=0.70", **kw)
    high = _row(acceptance="rates=0.85", **kw)
    assert low.baseline_tokens_per_s == pytest.approx(51.14, rel=0.10)
    assert low.speedup < 3.55 < high.speedup
    assert low.draft_len >= 4  # a 1B draft is cheap (rho ~ 0.02): deep chains pay at batch 1


def test_deepseek_r1_mtp_8xb200_batch1_three_drafts_best():
    """TensorRT-LLM blog "Pushing Latency Boundaries: DeepSeek-R1 on B200" (8xB200, TP8, NVFP4 MoE/dense with bf16
    attention and bf16 MTP layers, batch 1): MTP with 3 draft tokens is best, 2.16x over no speculation.

    Acceptance: prior deepseek-r1-mtp (DeepSeek-V3 report a_1 = 85-90%; later positions from an independent MTP
    measurement). The published D = 3 must be the pick or within 2% of it: the model's D = 3 and D = 4 are that close
    (D = 4 by ~1.8%, since a request's verified tokens share routed experts beyond chance and expert popularity is
    skewed, ``trtspec.recipes.routing``, which makes the 4-token verification a little cheaper than independent
    uniform routing would; before that they were tied within 0.1%), and the corpus check of the same blog with its
    published AL (``benchmarks/bench_fidelity.py``, sweep ``trtllm-blog1-dsr1-mtp-layers-8xb200``) also picks D = 4,
    at 3.1% regret. Speedup tolerance 10%, from its parts: the published a_1 range moves E[AL] at D=3 by +-1.8%; the
    kernel-duration floor (2.0 us, the latency floor that carries the fixed cost of the ~20 small kernels and 2
    all-reduces of each TP8 MLA+MoE layer) moves the prediction by -3%/+4% over 1.5-2.5 us; the constant-rate
    spread of positions 2-3 and the relaxed acceptance the blog also reports account for the rest. The model
    predicts ~2.26x."""
    result = plan(build_request(model="deepseek-r1", gpu="b200", tp=8, quant="fp4:attn=bf16", drafters="mtp",
                                draft_quant="none", acceptance="prior:deepseek-r1-mtp", batches=[1], context=1536,
                                max_draft_len=7, pricing="roofline"))
    row, curve = result.rows[0], result.curves[1]["mtp"]
    assert row.draft_len in (3, 4)
    assert curve[3] >= 0.98 * max(curve.values())
    assert row.speedup == pytest.approx(2.16, rel=0.10)


def test_deepseek_r1_mtp_8xb200_batch1_measured_pricing():
    """The same blog case priced from B200 perf-db tables (TensorRT-LLM 1.3.0rc20) with the fitted engine costs: the
    speedup stays within 10% of 2.16x (it predicts ~2.01x). Measured reason the chosen D moves from 3 to 4-5: the
    measured MLA / MoE / all-reduce kernels of the verification step grow less from 1 to 4-6 tokens than the
    roofline's routed-expert loading, and the prior's constant a_2..a_7 over-credits long chains; within 2 of the
    published best D, which the corpus case (heldout, no AL published) cannot check further."""
    row = _row(model="deepseek-r1", gpu="b200", tp=8, quant="fp4:attn=bf16", drafters="mtp", draft_quant="none",
               acceptance="prior:deepseek-r1-mtp", batches=[1], context=1536, max_draft_len=7)
    assert row.sources["verify.moe"].startswith("perf-db trtllm")
    assert abs(row.draft_len - 3) <= 2
    assert row.speedup == pytest.approx(2.16, rel=0.10)


def test_llama31_8b_eagle3_h100_batch1_sglang():
    """SGLang docs (Llama-3.1-8B-Instruct, MT-bench, 1xH100, batch 1): 158.34 tok/s -> 373.25 tok/s with EAGLE-3.

    The baseline anchors the bandwidth efficiency (fitted figure; 5% tolerance). The acceptance prior is the public
    EAGLE-3 head's chain figure at temperature 1 (AL 2.77 at K=7), while SGLang ran a tree at temperature 0, so the
    chain prediction is a lower bound: it must land within 20% below the published throughput and not above it by
    more than 5%."""
    row = _row(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="prior:llama3.1-8b-eagle3",
               batches=[1], context=1024, pricing="roofline")
    assert row.baseline_tokens_per_s == pytest.approx(158.34, rel=0.05)
    assert 0.80 * 373.25 <= row.tokens_per_s <= 1.05 * 373.25


def test_llama31_8b_h100_batch1_sglang_baseline_measured_pricing():
    """The same SGLang baseline (158.34 tok/s) from H100 perf-db kernels plus SGLang's fitted per-step cost: within
    20%. Measured reason it is no longer within 5%: step_us is one figure per engine fitted on four batch-1
    baselines (8B on H100 and H200, 27B TP4, 70B TP8), and the GPU file's per-layer fixed costs sit on top of
    kernels that were timed alone; this 8B case lands ~15% slow."""
    row = _row(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="prior:llama3.1-8b-eagle3",
               batches=[1], context=1024, engine="sglang")
    assert row.sources["verify.linear"] == "perf-db sglang 0.5.14 h100_sxm"
    assert row.baseline_tokens_per_s == pytest.approx(158.34, rel=0.20)


@pytest.mark.parametrize("prior, al, draft_len", [("ngram-code-edits", 4.59, 5), ("dflash-llama3.1-8b", 6.10, 9)])
def test_sourced_priors_reproduce_their_published_acceptance_length(prior, al, draft_len):
    """Each prior's rates give back the published AL at the draft length it was measured at (vLLM PR 24344;
    NVIDIA forum DFlash log), and each names its source URL."""
    from trtspec.recipes.acceptance import load_prior

    p = load_prior(prior)
    assert p.expected_al(draft_len) == pytest.approx(al, abs=0.01)
    assert "https://" in p.source


@pytest.mark.parametrize("model, drafter", [("llama-3.1-8b", "sa"), ("llama-3.1-8b", "ngram")])
def test_drafters_without_a_published_prior_fail_loudly(model, drafter):
    """No prior for SA, and the n-gram prior is workload-specific (code edits): plan asks for --acceptance."""
    from trtspec.recipes.errors import RecipeError

    with pytest.raises(RecipeError, match="acceptance"):
        build_request(model=model, gpu="h200", drafters=drafter, batches=[1])


@pytest.mark.parametrize("model, drafter, prior", [("llama-3.1-8b", "dspark", "prior:deepseek-v4-pro-dspark"),
                                                   ("qwen3-next-80b-a3b", "mtp", "prior:deepseek-r1-mtp")])
def test_a_drafter_with_a_published_prior_elsewhere_plans_with_it_and_says_why(model, drafter, prior):
    """DSpark and MTP have published priors on other models: a plan takes the closest one and names it."""
    req = build_request(model=model, gpu="h200", drafters=drafter, batches=[1])
    assert req.acceptance[drafter].name == prior
    assert f"closest published {drafter} prior for {model}" in req.acceptance[drafter].source


def test_dflash_prior_is_the_default_for_llama31_8b():
    req = build_request(model="llama-3.1-8b", gpu="h200", drafters="dflash", batches=[1])
    assert req.acceptance["dflash"].name == "prior:dflash-llama3.1-8b"
