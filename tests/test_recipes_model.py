"""The cost model and optimizer reproduce the five co-design guidelines."""
import random

import pytest

from trtspec.recipes.acceptance import AcceptanceProfile, parse_acceptance
from trtspec.recipes.arch import Architecture, Block, MoESpec, load_architecture
from trtspec.recipes.costmodel import Precision, forward_cost, unique_experts
from trtspec.recipes.drafters import DrafterSpec
from trtspec.recipes.gpus import load_gpu
from trtspec.recipes.optimizer import PlanRequest, _Evaluator, plan, request_pricer, tie_tolerance


def synthetic(group, layers=4, hidden=1024, kv_heads=8, moe=None):
    ffn = "moe" if moe else "dense"
    return Architecture(name=f"syn-g{group}", hidden=hidden, vocab=1000, num_heads=kv_heads * group,
                        num_kv_heads=kv_heads, head_dim=128, intermediate=2048, moe=moe,
                        blocks=tuple(Block("attention", ffn) for _ in range(layers)))


def const(a, n=64):
    return AcceptanceProfile(rates=(a,) * n, source="test: constant rate")


def request(arch, *, drafter="ngram", rates=0.95, gpu="h200", **kw):
    return PlanRequest(model=arch, gpu=load_gpu(gpu), drafters=(DrafterSpec(drafter),),
                       acceptance={drafter: const(rates) if isinstance(rates, float) else rates}, **kw)


@pytest.mark.parametrize("group", [4, 8, 16, 32])
def test_guideline2_attention_dominated_decode_picks_128_over_g_minus_1(group):
    req = request(synthetic(group), batches=(8,), context=131072, max_draft_len=128 // group + 12, pricing="roofline")
    row = plan(req).rows[0]
    assert row.draft_len == 128 // group - 1
    assert "attention tile" in row.binding_rule


@pytest.mark.parametrize("group", [4, 8, 16, 32])
def test_guideline2_with_measured_kernels_stops_at_a_multiple_of_128_rows(group):
    """Measured pricing (perf-db attention kernel x ceil(G*(1+D)/128), fitted engine costs): the chosen D still fills
    whole 128-row tiles, G*(1+D) = 128*k. Measured reason it is not always k = 1: the engine's fixed costs per step
    (step_us, spec_layer_us) dilute the attention term of these 4-layer models, so at G = 32 a second pass over the
    KV cache (2x attention) costs less than the AL it buys from 4 to 8 tokens, and D = 256/G - 1 wins."""
    req = request(synthetic(group), batches=(8,), context=131072, max_draft_len=128 // group + 12)
    row = plan(req).rows[0]
    assert (group * (row.draft_len + 1)) % 128 == 0, row.draft_len
    assert "attention tile" in row.binding_rule
    assert row.sources["verify.attention"].startswith("perf-db trtllm")


def test_attention_cost_is_flat_then_steps_at_multiples_of_128():
    arch, gpu, prec = synthetic(8), load_gpu("h200"), Precision.of("none")
    att = [forward_cost(arch, gpu, prec, batch=8, tokens=t, context=65536).attention for t in range(1, 49)]
    for t, a in enumerate(att, start=1):
        passes = -(-8 * t // 128)
        assert a == pytest.approx(passes * att[0], rel=1e-3), t


def test_guideline3_never_just_past_a_multiple_of_128_when_below_is_as_good():
    rng = random.Random(1234)
    checked = 0
    for _ in range(40):
        group = rng.choice([4, 8, 16, 32])
        req = request(synthetic(group, layers=rng.choice([2, 8, 32]), hidden=rng.choice([1024, 4096])),
                      rates=rng.uniform(0.6, 0.97), batches=(rng.choice([1, 4, 16, 64]),),
                      context=rng.choice([4096, 32768, 131072]), max_draft_len=40)
        row = plan(req).rows[0]
        d = row.draft_len
        passes = -(-group * (1 + d) // 128)
        d_low = (passes - 1) * 128 // group - 1
        if d_low < 0 or d_low >= d:
            continue
        ev = _Evaluator(req, row.batch)
        prof, spec = req.acceptance["ngram"], req.drafters[0]
        low = ev.point(spec, d_low, prof.expected_al(d_low), d_low + 1).tokens_per_s
        chosen = ev.point(spec, d, prof.expected_al(d), d + 1).tokens_per_s
        assert low < chosen * (1 - tie_tolerance(req, request_pricer(req))), (group, d, d_low)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize("pricing", ["roofline", "perf-db"])
def test_dense_gqa_on_h200_draft_len_shrinks_with_batch_and_stops(pricing):
    """Analytic model: the per-batch optimum itself is non-increasing. Measured reason it need not be with perf-db
    pricing: neighbouring GEMM shapes scatter by ~1% in the collected tables and the speedup curve is flat near its
    top, so the per-batch argmax may step back up by one (6, 5, 6 at B = 1, 2, 4); the engine schedule (optimal
    non-increasing, recipe.monotone_schedule) is monotone and loses under 2% anywhere against the per-batch optimum."""
    from trtspec.recipes.api import recipe_from_plan

    req = PlanRequest(model=load_architecture("llama-3.1-70b"), gpu=load_gpu("h200"), drafters=(DrafterSpec("eagle3"),),
                      acceptance={"eagle3": parse_acceptance("prior:llama3.3-70b-eagle3")}, quant="fp8",
                      context=1024, batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), pricing=pricing)
    result = plan(req)
    ds = [r.draft_len for r in result.rows]
    if pricing == "roofline":
        assert all(a >= b for a, b in zip(ds, ds[1:])), ds
    recipe = recipe_from_plan(result, model_label="llama-3.1-70b", max_batch_size=512)
    sched = [recipe.vllm_schedule[r.batch] for r in result.rows]
    assert all(a >= b for a, b in zip(sched, sched[1:])), sched
    assert sched[0] >= 4 and sched[-1] == 0 and sched[0] > sched[5]
    for r, d in zip(result.rows, sched):
        curve = result.curves[r.batch]["eagle3"]
        assert curve[d] >= curve[r.draft_len] * 0.98, (r.batch, d, r.draft_len)


def test_sparser_moe_keeps_draft_len_larger_at_same_batch():
    """Same active parameters (k*I), E = 128 vs 16. In the throughput regime (B >= 64, every expert already loaded)
    a sparser MoE gives each expert fewer rows, so its grouped GEMMs stay memory-bound to a larger B*(1+D).
    (At batch 1 the opposite holds -- each extra verified token loads new experts -- which the model also shows.)"""
    sparse = synthetic(8, layers=16, hidden=2048, moe=MoESpec(128, 8, 768))
    dense = synthetic(8, layers=16, hidden=2048, moe=MoESpec(16, 8, 768))
    batches = (64, 128, 256, 512)
    d_sparse = [r.draft_len for r in plan(request(sparse, drafter="eagle3", rates=0.8, batches=batches,
                                                  context=1024, quant="fp8")).rows]
    d_dense = [r.draft_len for r in plan(request(dense, drafter="eagle3", rates=0.8, batches=batches,
                                                 context=1024, quant="fp8")).rows]
    assert all(s >= d for s, d in zip(d_sparse, d_dense)), (d_sparse, d_dense)
    assert any(s > d for s, d in zip(d_sparse, d_dense)), (d_sparse, d_dense)


def test_unique_experts_formula():
    assert unique_experts(256, 8, 1) == pytest.approx(8.0)
    assert unique_experts(256, 8, 10 ** 6) == pytest.approx(256.0)
    assert unique_experts(64, 4, 3) == pytest.approx(64 * (1 - (1 - 4 / 64) ** 3))


@pytest.mark.parametrize("pricing", ["roofline", "perf-db"])
def test_guideline4_low_latency_formula_for_a_deep_draft_model(pricing):
    """speedup ~ AL / (1 + sigma + rho*D) at batch 1. The analytic model has sigma ~ 0 (40 us of speculative fixed
    cost on a ~20 ms step). Measured reason for sigma > 0 with perf-db pricing: the engine file's fitted
    speculative costs (spec_layer_us per target layer, spec_request_us) are a few percent of the 70B step; rho
    still follows the draft/target depth ratio."""
    target = load_architecture("llama-3.1-70b")
    deep = Architecture(name="deep-draft", hidden=8192, vocab=target.vocab, num_heads=64, num_kv_heads=8,
                        head_dim=128, intermediate=28672, blocks=tuple(Block("attention", "dense") for _ in range(8)))
    req = PlanRequest(model=target, gpu=load_gpu("h200"), drafters=(DrafterSpec("draft_model", draft_arch=deep),),
                      acceptance={"draft_model": const(0.8)}, quant="fp8", context=1024, batches=(1,),
                      draft_len=None, max_draft_len=10, pricing=pricing)
    ev = _Evaluator(req, 1)
    spec = req.drafters[0]
    t_target = ev.verify(1).total
    rho = ev.draft(spec, 1, 1).total / t_target
    sigma = ev.spec_overhead / t_target
    # rho follows the draft/target depth ratio (same width): 8 of 80 layers plus a second LM head
    assert rho == pytest.approx(8 / 80, abs=0.03)
    assert sigma < 0.01 if pricing == "roofline" else 0.01 < sigma < 0.3
    for d in range(1, 11):
        p = ev.point(spec, d, req.acceptance["draft_model"].expected_al(d), d + 1)
        predicted = p.tokens_per_s / (1 / t_target)
        formula = p.expected_al / (1 + sigma + rho * d)
        assert predicted == pytest.approx(formula, rel=0.03), d


def test_state_layers_pay_for_snapshots():
    arch = load_architecture("nemotron-h-8b")
    gpu, prec = load_gpu("h200"), Precision.of("none")
    s1 = forward_cost(arch, gpu, prec, batch=64, tokens=1, context=4096).state
    s5 = forward_cost(arch, gpu, prec, batch=64, tokens=5, context=4096).state
    assert s5 == pytest.approx(s1 * (1 + 5) / (1 + 1), rel=1e-6)


def test_sliding_window_reads_at_most_the_window():
    arch = load_architecture("gpt-oss-120b")
    gpu, prec = load_gpu("h200"), Precision.of("fp8")
    blocks = {Block("sliding", None, 128): 1}
    a = forward_cost(arch, gpu, prec, batch=8, tokens=1, context=1000, blocks=blocks).attention
    b = forward_cost(arch, gpu, prec, batch=8, tokens=1, context=100000, blocks=blocks).attention
    assert a == pytest.approx(b)


def test_tp_adds_allreduce_and_splits_weights():
    arch, gpu, prec = load_architecture("llama-3.1-70b"), load_gpu("h200"), Precision.of("fp8")
    one = forward_cost(arch, gpu, prec, tp=1, batch=1)
    four = forward_cost(arch, gpu, prec, tp=4, batch=1)
    assert one.comm == 0 and four.comm > 80 * 2 * gpu.allreduce_latency * 0.99
    assert four.linear == pytest.approx(one.linear / 4, rel=0.02)


def test_drafter_cost_shapes():
    target, gpu, prec = load_architecture("llama-3.1-8b"), load_gpu("h100"), Precision.of("none")
    cost = lambda kind, d: DrafterSpec(kind).step_time(target, gpu, prec, tp=1, batch=1, draft_len=d,  # noqa: E731
                                                       context=1024).total
    assert cost("eagle3", 8) == pytest.approx(8 * cost("eagle3", 1))  # serial: linear in D
    assert cost("dflash", 8) < 1.5 * cost("dflash", 1)  # one parallel pass over the block
    assert cost("dflash", 1) < cost("dspark", 8) < cost("dflash", 8) + 8 * cost("eagle3", 1)
    assert cost("ngram", 16) < 0.1 * cost("eagle3", 1) and cost("sa", 0) == 0.0  # lookup: ~15 us + 0.5 us/token


def test_mtp_needs_mtp_layers():
    from trtspec.recipes.api import build_request
    from trtspec.recipes.errors import RecipeError

    with pytest.raises(RecipeError, match="has no MTP layers"):
        build_request(model="llama-3.1-8b", gpu="h100", drafters="mtp", acceptance="rates=0.8")


def test_kernel_floor_binds_small_gemms_only():
    """A GEMM group never costs less than kernels * kernel_floor; a 70B-sized GEMM is untouched by the floor."""
    from trtspec.recipes.costmodel import gemm_time

    gpu, prec = load_gpu("b200"), Precision.of("fp4")
    assert gpu.kernel_floor > 0
    assert gemm_time(7168 * 64, 1, gpu, prec, 7168, kernels=3) == pytest.approx(3 * gpu.kernel_floor)
    big = 8192 * 28672 * 3
    roofline = (big * prec.weight_bytes + 2 * 8192 * 2.0) / (gpu.bandwidth * gpu.eff_bandwidth)
    assert gemm_time(big, 1, gpu, prec, 8192, kernels=3) == pytest.approx(roofline)


def test_latency_floors_are_fixed_in_draft_length_for_tp8_mla_moe():
    """DeepSeek-R1 at TP8, batch 1: the floors raise the plain decode step (many tiny kernels per layer) but the
    fixed part of verification does not grow with D -- only routed-expert loading (and all-reduce bytes) does."""
    arch, gpu, prec = load_architecture("deepseek-r1"), load_gpu("b200"), Precision.of("fp4:attn=bf16")
    one = forward_cost(arch, gpu, prec, tp=8, batch=1, tokens=1, context=1536)
    four = forward_cost(arch, gpu, prec, tp=8, batch=1, tokens=4, context=1536)
    assert four.overhead == pytest.approx(one.overhead)
    assert four.linear == pytest.approx(one.linear, rel=0.02)  # only activation bytes grow
    assert four.moe > 2 * one.moe
    layers = arch.num_layers
    # every layer pays at least its small kernels' floors: >= 4 (MLA) + 2 (dense) kernels
    assert one.overhead >= layers * 6 * gpu.kernel_floor
