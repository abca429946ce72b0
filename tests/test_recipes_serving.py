"""How a published figure was served (trtspec.recipes.serving): the running batch under the engine's caps, the
prefill inside the measured time, and the errors of a workload that cannot be priced."""
import pytest

from trtspec.recipes.costmodel import Precision
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.fidelity import architecture_for, predict, setup_case
from trtspec.recipes.measurements import Measurement, MeasurementError, load_measurements
from trtspec.recipes.serving import TOKENS_RULE, Workload, round_times, spec_capacity, step_prefill


def case(**kw):
    base = dict(source="https://example.org/post", title="t", id="c1", quote="q", model="meta-llama/Llama-3.1-8B-Instruct",
                gpu="h200", num_gpus=1, tp=1, quant="none", engine="vllm", drafter="eagle3", batch=32,
                batch_kind="concurrency", draft_len=3, al=2.9, baseline_tokens_per_s=1900.0,
                spec_tokens_per_s=3000.0, metric="output_tps_total", split="train")
    base.update(kw)
    return Measurement(**base)


# ---- the running batch ------------------------------------------------------------------------------------------
def test_running_batch_is_the_concurrency_without_caps():
    w = Workload(concurrency=48, isl=1000, osl=500)
    assert w.running(0) == 48 and w.running(5) == 48
    assert not w.active  # nothing beyond the batch: the case is priced as plain decode steps


def test_max_num_seqs_caps_the_running_batch():
    w = Workload(concurrency=300, max_num_seqs=256)
    assert w.running(0) == 256 and w.running(3) == 256
    assert Workload(concurrency=100, max_num_seqs=256).running(3) == 100


def test_kv_capacity_caps_the_running_batch_by_the_tokens_rule():
    assert TOKENS_RULE == "isl + osl / 2 + D + 1"
    # The tomasruizt vLLM logs: 18,560 KV tokens, ISL 147 / OSL 200, D = 3: 147 + 100 + 4 = 251 tokens a request,
    # floor(18560 / 251) = 73 running at concurrency 128.
    w = Workload(concurrency=128, isl=147, osl=200, kv_tokens=18560)
    assert w.tokens_per_request(3) == 251.0
    assert w.running(3) == 73
    assert w.running(0) == 74  # 248 tokens a request without speculation: floor(18560 / 248)
    # Llama-3.3-70B on 2 H100 at concurrency 64: 26,432 tokens without speculation (all 64 run), 13,280 with EAGLE-3
    # D = 5: 174 + 73 + 6 = 253 tokens a request -> 52 running (the logs show 42-50).
    llama = Workload(concurrency=64, isl=174, osl=146, max_num_seqs=256, kv_tokens=26432, spec_kv_tokens=13280)
    assert (llama.running(0), llama.running(5)) == (64, 52)
    # Hand-computed: 1000 tokens, ISL 100 / OSL 100: 151 a request at D = 0 -> 6; 154 at D = 3 -> 6, or 3 under
    # the speculative server's own 500-token capacity.
    small = Workload(concurrency=64, isl=100, osl=100, kv_tokens=1000)
    assert (small.running(0), small.running(3)) == (6, 6)
    spec = Workload(concurrency=64, isl=100, osl=100, kv_tokens=1000, spec_kv_tokens=500)
    assert (spec.running(0), spec.running(3)) == (6, 3)
    assert spec.running(3, capacity=10_000) == 64  # an explicit capacity replaces the logged ones
    assert Workload(concurrency=8, isl=5000, osl=100, kv_tokens=1000).running(0) == 1  # never below one request


def test_kv_capacity_needs_the_lengths_to_cap():
    assert Workload(concurrency=64, kv_tokens=1000).running(3) == 64  # no isl / osl: no tokens per request


def test_a_lookup_drafter_leaves_the_kv_capacity_unchanged():
    """n-gram drafting holds no weights and no KV of its own, so the speculative server's capacity is the
    baseline's; a draft model's weights and KV shrink it."""
    from trtspec.recipes.drafters import DrafterSpec

    target = architecture_for("meta-llama/Llama-3.3-70B-Instruct")
    prec = Precision.of("none")
    assert spec_capacity(26432, target, DrafterSpec(kind="ngram"), prec, 2) == 26432
    draft = setup_case(case(model="meta-llama/Llama-3.3-70B-Instruct", tp=2, num_gpus=2, drafter="draft_model",
                            draft_model="meta-llama/Llama-3.2-1B"), pricing="roofline").drafter
    shrunk = spec_capacity(26432, target, draft, prec, 2)
    assert 0 < shrunk < 26432


# ---- the prefill inside the time --------------------------------------------------------------------------------
def test_prompts_per_step_hand_computed():
    agg = Workload(concurrency=8, isl=100, osl=100, includes_prefill=True)
    assert agg.prompts_per_step(8, 2.5) == pytest.approx(8 * 2.5 / 100)
    user = Workload(concurrency=8, isl=100, osl=100, includes_prefill=True, per_user=True)
    assert user.prompts_per_step(8, 2.5) == pytest.approx(7 * 2.5 / 100)  # not its own prompt
    assert user.prompts_per_step(1, 2.5) == 0.0  # alone: its prefill is in its time to first token
    assert Workload(concurrency=8, isl=100, osl=100).prompts_per_step(8, 2.5) == 0.0  # the figure holds no prefill


def test_round_times_hand_computed():
    steps, prefill, running = (0.010, 0.020), (0.001, 0.002), (64, 32)
    agg = Workload(concurrency=128, isl=100, osl=100, includes_prefill=True)
    r0, rd = round_times(agg, 128, steps, prefill, running)
    assert (r0, rd) == (pytest.approx(0.011 * 2), pytest.approx(0.022 * 4))  # batch / running decode steps a round
    user = Workload(concurrency=128, isl=100, osl=100, includes_prefill=True, per_user=True)
    assert round_times(user, 128, steps, prefill, running) == (pytest.approx(0.011), pytest.approx(0.022))
    assert round_times(None, 128, steps, prefill, running) == steps


def test_prefill_makes_speculation_lose_as_outputs_shrink_at_a_fixed_prompt():
    """Per decode step n * AL / osl prompts are prefilled, and the speculative step emits AL times as many tokens, so
    its prefill share grows as osl shrinks: the speedup falls monotonically, further and further below the decode-only
    one, towards 1."""
    def speedup(osl, prefill):
        return predict(setup_case(case(isl=2048, osl=osl, includes_prefill=prefill), pricing="roofline"))

    osls = (4096, 1024, 256, 64, 16)
    with_prefill = [speedup(o, True) for o in osls]
    decode_only = [speedup(o, False) for o in osls]
    assert all(a > b for a, b in zip(with_prefill, with_prefill[1:])), with_prefill
    ratios = [a / b for a, b in zip(with_prefill, decode_only)]
    assert all(r < 1.0 for r in ratios)
    assert all(a > b for a, b in zip(ratios, ratios[1:])), ratios
    # The limit: the prompts' prefill (AL times as many in a speculative round) swamps the decode gain.
    assert abs(with_prefill[-1] - 1.0) < abs(decode_only[-1] - 1.0) / 2


def test_one_users_figure_at_concurrency_one_holds_no_prefill():
    m = dict(batch=1, isl=2048, osl=64, metric="tpot_ms", baseline_tpot_ms=8.0, spec_tpot_ms=4.0,
             baseline_tokens_per_s=None, spec_tokens_per_s=None)
    alone = predict(setup_case(case(includes_prefill=True, **m), pricing="roofline"))
    assert alone == pytest.approx(predict(setup_case(case(includes_prefill=False, **m), pricing="roofline")))


# ---- errors -----------------------------------------------------------------------------------------------------
def test_workload_errors_name_the_field():
    with pytest.raises(RecipeError, match="concurrency must be >= 1, got 0"):
        Workload(concurrency=0)
    with pytest.raises(RecipeError, match="includes_prefill: pricing the prefill needs isl and osl"):
        Workload(concurrency=4, isl=100, includes_prefill=True)


def test_prefill_under_attention_data_parallelism_is_refused():
    s = setup_case(case(model="Qwen/Qwen3-30B-A3B-Instruct-2507", tp=4, num_gpus=4, dp_attention=2, isl=1000,
                        osl=100, includes_prefill=True), pricing="roofline")
    with pytest.raises(RecipeError, match="attention data parallelism is not priced"):
        step_prefill(s.workload, s.request, s.drafter, 16, 4, 2.9, None)


GOOD = """\
source: https://example.org/post
title: t
published: 2025-03-01
cases:
  - id: c1
    quote: "158.34 tokens/s ... 373.25 tokens/s"
    model: meta-llama/Llama-3.1-8B-Instruct
    gpu: h100
    num_gpus: {gpus}
    tp: {gpus}
    quant: none
    engine: sglang
    drafter: eagle3
    batch: 1
    batch_kind: batch
    draft_len: {draft_len}
    al: {al}
    baseline_tokens_per_s: 158.34
    spec_tokens_per_s: 373.25
    metric: output_tps_total
    split: train
{extra}"""


@pytest.mark.parametrize("extra, field, words", [
    ("includes_prefill: true\npd_disaggregated: true\nisl: 100\nosl: 100", "includes_prefill",
     "prefill-decode disaggregated"),
    ("includes_prefill: true\nisl: 100", "includes_prefill", "needs isl and osl"),
    ("dp_attention: 3", "dp_attention", "must divide the GPUs"),
    ("max_num_seqs: 0", "max_num_seqs", "greater than or equal to 1"),
    ("kv_cache_tokens: -5", "kv_cache_tokens", "greater than or equal to 1"),
])
def test_bad_serving_fields_are_refused_with_the_field_named(tmp_path, extra, field, words):
    path = tmp_path / "bad.yaml"
    extra = "".join(f"    {line}\n" for line in extra.splitlines())
    path.write_text(GOOD.format(gpus=4, draft_len=3, al=2.9, extra=extra), encoding="utf-8")
    with pytest.raises(MeasurementError) as err:
        load_measurements([path])
    msg = str(err.value)
    assert f"field '{field}'" in msg and words in msg and str(path) in msg


def test_speculative_capacity_needs_a_draft_length(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.format(gpus=1, draft_len="null", al="null", extra="    spec_kv_cache_tokens: 1000\n"),
                    encoding="utf-8")
    with pytest.raises(MeasurementError, match="field 'spec_kv_cache_tokens': the speculative server's capacity"):
        load_measurements([path])


def test_a_draft_models_kv_per_token_is_its_share_of_the_targets():
    """Qwen3-1.7B beside Qwen3-32B: 28 against 64 layers of 8 KV heads x 128 -> 43.75% of the target's KV a token;
    a lookup drafter holds none."""
    from trtspec.recipes.costmodel import cache_bytes
    from trtspec.recipes.drafters import DrafterSpec

    target = architecture_for("Qwen/Qwen3-32B")
    draft = setup_case(case(model="Qwen/Qwen3-32B", drafter="draft_model", draft_model="Qwen/Qwen3-1.7B"),
                       pricing="roofline").drafter
    prec = Precision.of("none")
    assert draft.kv_bytes_per_token(target, prec, 1) / cache_bytes(target, prec, 1, 1, 1) == pytest.approx(28 / 64)
    assert DrafterSpec(kind="ngram").kv_bytes_per_token(target, prec, 1) == 0.0


def test_attention_data_parallelism_must_divide_tp():
    base = case(model="Qwen/Qwen3-30B-A3B-Instruct-2507", tp=4, num_gpus=4)
    with pytest.raises(RecipeError, match="dp_attention must be >= 1 and divide --tp 4, got 3"):
        setup_case(base.model_copy(update={"dp_attention": 3}), pricing="roofline")
