"""Measured kernel pricing (aiconfigurator-core perf-db), the rules for unmeasured shapes, engine overheads."""
import math

import pytest

from trtspec.recipes.api import build_request
from trtspec.recipes.arch import load_architecture
from trtspec.recipes.costmodel import Precision, forward_cost, logits_time
from trtspec.recipes.drafters import DrafterSpec
from trtspec.recipes.engines import ENGINES, PARAMS, load_engine, load_engine_file, save_engine_file
from trtspec.recipes.errors import CatalogError, RecipeError
from trtspec.recipes.gpus import load_gpu
from trtspec.recipes.optimizer import _Evaluator, plan
from trtspec.recipes.perfdb import PerfDBUnavailable, open_db
from trtspec.recipes.pricing import make_pricer

H200 = "perf-db trtllm 1.3.0rc20 h200_sxm"


@pytest.fixture(scope="module")
def db():
    return open_db("h200_sxm", "trtllm", "1.3.0rc20")


def test_perfdb_answers_measured_shapes_and_none_where_it_has_no_data(db):
    assert db.label == H200
    small, big = db.gemm(6144, 4096, 1, "bfloat16"), db.gemm(6144, 4096, 4096, "bfloat16")
    assert 5e-6 < small < 100e-6 and big > 10 * small  # memory-bound at m = 1, compute-bound at m = 4096
    assert db.gemm(6144, 4096, 1, "nvfp4") is None  # Hopper has no FP4 tensor cores: no table, no guess
    assert db.attention(8, 4096, 32, 8, 128, "bfloat16") > db.attention(1, 4096, 32, 8, 128, "bfloat16")
    assert db.allreduce(16, 8192, 1) == 0.0 and db.allreduce(16, 8192, 8) > 0
    assert "silicon" in db.tiers


def test_unknown_perfdb_system_fails_with_the_reason():
    with pytest.raises(PerfDBUnavailable, match="no trtllm 1.3.0rc20 data for h20_sxm"):
        open_db("h20_sxm", "trtllm", "1.3.0rc20")


def test_verification_attention_blends_packed_and_split_rows_by_the_engine_figure(db):
    """T = 1+D query rows per request: packed P = the one-row kernel at context + T times ceil(G*T/128); split
    S = the one-row kernel at B*T requests; the engine's verify_split s prices P + s*(S - P) (0 and 1 the limits)."""
    from trtspec.recipes.pricing import Pricer

    arch, gpu = load_architecture("llama-3.1-8b"), load_gpu("h200")
    base, prec = make_pricer(gpu, "trtllm"), Precision.of("none")
    group = arch.num_heads // arch.num_kv_heads
    for split in (0.0, 0.3, 1.0):
        pricer = Pricer(gpu, base.engine.with_params(verify_split=split), base.db)
        for tokens in (1, 4, 17, 33):
            cost = forward_cost(arch, gpu, prec, batch=8, tokens=tokens, context=4096, pricer=pricer)
            one = db.attention(8, 4096 + tokens, arch.num_heads, arch.num_kv_heads, arch.head_dim, "bfloat16")
            apart = db.attention(8 * tokens, 4096 + tokens, arch.num_heads, arch.num_kv_heads, arch.head_dim,
                                 "bfloat16")
            packed = one * math.ceil(group * tokens / 128)
            want = packed if tokens == 1 else packed + split * (apart - packed)
            assert cost.attention == pytest.approx(arch.num_layers * want, rel=1e-9)
            assert cost.sources["attention"] == H200
    assert 0.0 <= load_engine("trtllm").verify_split <= 1.0


def test_gemms_price_at_m_equal_batch_times_tokens(db):
    arch, gpu = load_architecture("llama-3.1-8b"), load_gpu("h200")
    cost = forward_cost(arch, gpu, Precision.of("none"), batch=4, tokens=5, context=1024, pricer=make_pricer(gpu))
    h, inter, m = arch.hidden, arch.intermediate, 20
    qkv = (arch.num_heads + 2 * arch.num_kv_heads) * arch.head_dim
    per_layer = sum(db.gemm(n, k, m, "bfloat16") for n, k in ((qkv, h), (h, arch.num_heads * arch.head_dim),
                                                               (2 * inter, h), (h, inter)))
    assert cost.linear == pytest.approx(arch.num_layers * per_layer, rel=1e-9)
    read = logits_time(gpu, 1, m, arch.vocab)[1]  # the m rows' logits read once after the GEMM (costmodel)
    assert cost.lm_head == pytest.approx(db.gemm(arch.vocab, h, m, "bfloat16") + read, rel=1e-9)
    assert cost.engine == load_engine("trtllm").step and cost.sources["engine"] == "trtllm"


def test_state_mixers_stay_on_the_roofline_and_say_so():
    arch, gpu = load_architecture("nemotron-h-8b"), load_gpu("h200")
    cost = forward_cost(arch, gpu, Precision.of("none"), batch=8, tokens=4, context=4096, pricer=make_pricer(gpu))
    assert cost.sources["state"] == "roofline" and cost.state > 0
    assert cost.sources["linear"] == H200


def test_gpu_without_perf_db_keeps_engine_costs_and_prices_kernels_by_the_roofline():
    gpu = load_gpu("h20")
    pricer = make_pricer(gpu, "vllm")
    assert pricer.db is None and "no perf_db system" in pricer.note
    cost = forward_cost(load_architecture("llama-3.1-8b"), gpu, Precision.of("none"), pricer=pricer)
    assert cost.sources["linear"] == "roofline" and cost.engine == load_engine("vllm").step


def test_pricing_roofline_is_the_analytic_model_exactly():
    arch, gpu, prec = load_architecture("llama-3.1-70b"), load_gpu("h200"), Precision.of("fp8")
    assert make_pricer(gpu, pricing="roofline") is None
    a = forward_cost(arch, gpu, prec, batch=16, tokens=4)
    assert a.overhead > gpu.step_overhead and a.engine == 0.0 and set(a.sources.values()) <= {"roofline", "GPU file"}
    with pytest.raises(RecipeError, match="--pricing must be one of"):
        make_pricer(gpu, pricing="guess")


def test_engines_cost_differently_and_plan_names_its_sources():
    kw = dict(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="rates=0.8", batches=[1])
    rows = {e: plan(build_request(engine=e, **kw)).rows[0] for e in ENGINES}
    assert rows["vllm"].sources["verify.linear"] == "perf-db vllm 0.24.0 h100_sxm"
    assert rows["sglang"].sources["draft.engine"] == "sglang"
    assert len({round(r.baseline_tokens_per_s, 3) for r in rows.values()}) == 3  # different step costs
    with pytest.raises(RecipeError, match="unknown --engine 'tgi'"):
        build_request(engine="tgi", **kw)


def test_drafter_classes_cost_differently_with_measured_pricing():
    """Sequential drafters pay one draft forward (and the engine's draft_forward) per token; a parallel drafter
    one per block, so its draft cost barely grows with D; a lookup drafter only the host-side lookup."""
    target, gpu, prec = load_architecture("llama-3.1-8b"), load_gpu("h100"), Precision.of("none")
    pricer = make_pricer(gpu, "trtllm")
    eng = pricer.engine

    def cost(kind, d):
        return DrafterSpec(kind).step_time(target, gpu, prec, tp=1, batch=4, draft_len=d, context=1024, pricer=pricer)

    assert cost("eagle3", 8).total == pytest.approx(8 * cost("eagle3", 1).total)
    assert cost("eagle3", 8).engine == pytest.approx(8 * eng.draft_forward)
    assert cost("dflash", 8).engine == pytest.approx(eng.draft_forward)
    assert cost("dflash", 8).total < 1.5 * cost("dflash", 1).total
    assert cost("ngram", 5).total == pytest.approx(eng.lookup + 5 * eng.lookup_per_token)
    assert DrafterSpec("dspark").drafter_class == "parallel" and DrafterSpec("sa").drafter_class == "lookup"


def test_speculative_step_costs_per_layer_and_per_request():
    req = build_request(model="llama-3.1-70b", gpu="h200", quant="fp8", drafters="eagle3", acceptance="rates=0.8",
                        batches=[1, 64])
    eng = load_engine("trtllm")
    for b in (1, 64):
        ev = _Evaluator(req, b)
        assert ev.spec_overhead == pytest.approx(eng.spec_step + 80 * eng.spec_layer + b * eng.spec_request)


def test_speedup_falls_with_concurrency_at_short_context():
    """llama-3.1-8b + EAGLE-3 on H100, 1k context: flat (within 2%) up to B = 16, then falling as the verification
    GEMMs turn compute-bound at M = B*(1+D), as the published batch sweeps show."""
    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="prior:llama3.1-8b-eagle3",
                        context=1024, batches=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    s = [r.speedup for r in plan(req).rows]
    assert max(s) <= s[0] * 1.02
    assert all(a >= b for a, b in zip(s[4:], s[5:])), s
    assert s[-1] < 0.8 * s[0]


def test_engine_file_roundtrip_and_errors(tmp_path):
    prof = load_engine("sglang").with_params(step_us=123.4)
    path = save_engine_file(prof, tmp_path / "sglang.yaml", {"step_us": 'fitted on "x"'})
    back = load_engine_file(path)
    assert back.params_us()["step_us"] == pytest.approx(123.4) and back.justifications["step_us"] == 'fitted on "x"'
    assert set(back.params_us()) == set(PARAMS)
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace('justification: "fitted on \\"x\\""', 'justification: ""'))
    with pytest.raises(CatalogError, match="overheads.step_us has no justification"):
        load_engine_file(bad)
    with pytest.raises(RecipeError, match="unknown engine parameters"):
        prof.with_params(bogus_us=1)
    assert back.verify_split == prof.verify_split
    bad.write_text(path.read_text().replace(f"verify_split: {{value: {round(prof.verify_split, 3)}",
                                            "verify_split: {value: 1.5"))
    with pytest.raises(CatalogError, match=r"verification.verify_split must be a fraction in \[0, 1\], got 1.5"):
        load_engine_file(bad)


def test_a_losing_batch_says_so_with_the_best_drafting_speedup():
    req = build_request(model="llama-3.1-70b", gpu="h200", quant="fp8", drafters="eagle3", acceptance="rates=0.5",
                        batches=[384], context=512)
    row = plan(req).rows[0]
    assert row.draft_len == 0 and row.drafter == "none"
    assert "no gain: guideline" in row.binding_rule  # the cost that grows most with D, named
    assert "speculation loses here: the best D >= 1 (eagle3, D=1) would give 0." in row.binding_rule


def test_sparse_attention_keeps_its_variant_price_under_measured_pricing():
    """DSA layers read index_topk entries per query token: the dense MLA table would price them as reading the
    whole context, so sparse blocks keep the variants.py price and say so."""
    from collections import Counter

    from trtspec.recipes import variants
    from trtspec.recipes.costmodel import block_cost

    arch, gpu, prec = load_architecture("deepseek-v3.2"), load_gpu("h200"), Precision.of("fp8")
    pricer = make_pricer(gpu, "trtllm")
    block = next(b for b in arch.blocks if b.sparse is not None)
    cost = block_cost(arch, block, gpu, prec, 8, 16, 4, 65536, pricer)
    assert cost.attention == pytest.approx(variants.attention_time(arch, block, gpu, prec, 8, 16, 4, 65536))
    assert cost.sources["attention"] == "roofline" and cost.sources["linear"] == H200
    dense = forward_cost(arch, gpu, prec, tp=8, batch=16, tokens=4, context=65536, pricer=pricer,
                         blocks=Counter({block.__class__(block.mixer, block.ffn): 1}))
    assert cost.attention < dense.attention  # 2048 selected entries (+ the indexer pass) against 65k cached ones


def test_layers_with_their_own_geometry_price_their_own_heads(db):
    """A Gemma-4-style sliding layer of 8 KV heads x 256 beside the model's uniform sizes: the measured kernel is
    asked for that layer's heads and head size."""
    from trtspec.recipes.arch import Block
    from trtspec.recipes.costmodel import block_cost
    from trtspec.recipes.variants import AttnDims

    arch, gpu, prec = load_architecture("llama-3.1-8b"), load_gpu("h200"), Precision.of("none")
    block = Block("attention", "dense", dims=AttnDims(16, 8, 256, 256))
    cost = block_cost(arch, block, gpu, prec, 1, 4, 3, 4096, make_pricer(gpu, "trtllm"))
    packed, apart = db.attention(4, 4099, 16, 8, 256, "bfloat16"), db.attention(12, 4099, 16, 8, 256, "bfloat16")
    split = load_engine("trtllm").verify_split  # G*T = 6 rows: one tile pass when packed
    assert cost.attention == pytest.approx(packed + split * (apart - packed))
    q_kv = 16 * 256 + 2 * 8 * 256
    assert cost.linear == pytest.approx(db.gemm(q_kv, arch.hidden, 12, "bfloat16") + db.gemm(arch.hidden, 16 * 256, 12,
                                        "bfloat16") + db.gemm(2 * arch.intermediate, arch.hidden, 12, "bfloat16")
                                        + db.gemm(arch.hidden, arch.intermediate, 12, "bfloat16"))


def test_mtp_on_a_sparse_model_drafts_with_its_sparse_layer():
    """The MTP layer of DeepSeek-V3.2 / V4 is a DSA / compressed layer: the drafter keeps the target block's
    sparse attention and changes only the feed-forward."""
    for name in ("deepseek-v3.2", "deepseek-v4-flash"):
        arch = load_architecture(name)
        layer = DrafterSpec("mtp")._target_layer(arch)
        last = [b for b in arch.blocks if b.mixer in ("attention", "mla")][-1]
        assert layer.sparse == last.sparse and layer.sparse is not None and layer.ffn == "moe", name


def test_speedup_falls_with_concurrency_at_the_default_context():
    """llama-3.1-8b + EAGLE-3 on H100 at the default 4k context: every published sweep with batch > 1 shows the
    speedup falling as concurrency grows. Measured reason the plan follows: the train split fits verify_split
    ~ 0.3 (between packed and split query rows), so verification re-reads part of each request's 4k KV cache per
    extra row, and that term grows with the batch while the weights' share shrinks."""
    req = build_request(model="llama-3.1-8b", gpu="h100", drafters="eagle3", acceptance="prior:llama3.1-8b-eagle3",
                        batches=[1, 2, 4, 8, 16, 32, 64])
    s = [r.speedup for r in plan(req).rows]
    assert all(b <= a * 1.005 for a, b in zip(s, s[1:])), s
    assert s[-1] < 0.85 * s[0], s


def test_libyaml_loader_reads_the_package_files_as_pyyaml_does():
    """open_db parses aiconfigurator-core's system files with libyaml: same documents, module restored after."""
    import glob
    import os

    import yaml
    from aiconfigurator_core.sdk import perf_database

    from trtspec.recipes.perfdb import _CYaml, _libyaml

    root = os.path.join(os.path.dirname(perf_database.__file__), "..", "systems")
    files = sorted(glob.glob(os.path.join(root, "*.yaml")))
    assert len(files) > 5
    fast = _CYaml(yaml)
    for path in files:
        with open(path, encoding="utf-8") as a, open(path, encoding="utf-8") as b:
            assert fast.safe_load(a) == yaml.safe_load(b), path
    with _libyaml(perf_database):
        assert isinstance(perf_database.yaml, _CYaml) or not yaml.__with_libyaml__
    assert perf_database.yaml is yaml


@pytest.mark.parametrize("engine", ["trtllm", "sglang"])
def test_mla_verification_shares_one_latent_pass_between_one_and_t_decode_prices(engine):
    """MLA verification folds the T query tokens into the query-row axis (FlashMLA's s_q * h_q rows): with
    verify_split 0 the price of T tokens lies between one decode and T decodes and grows with T and with the batch;
    where the table grows slowly with the head count, 128 local heads (attention data parallelism) verifying 4
    tokens cost well under 4 decode passes."""
    from trtspec.recipes.pricing import Pricer, _attention

    arch, gpu, prec = load_architecture("deepseek-v3"), load_gpu("h200"), Precision.of("fp8")
    base = make_pricer(gpu, engine)
    pricer = Pricer(gpu, base.engine.with_params(verify_split=0.0), base.db)
    block = next(b for b in arch.blocks if b.mixer == "mla")
    for tp in (1, 8):
        for context in (1024, 65536):
            prev_batch = [0.0] * 9
            for batch in (1, 2, 8, 32):
                one = _attention(pricer, arch, block, prec, tp, batch, 1, context)
                prev = one
                for tokens in range(2, 9):
                    t = _attention(pricer, arch, block, prec, tp, batch, tokens, context)
                    assert one <= t <= tokens * one * (1 + 1e-9), (tp, context, batch, tokens)
                    assert t >= prev * (1 - 1e-9) and t >= prev_batch[tokens] * (1 - 1e-9)
                    prev, prev_batch[tokens] = t, t
    if engine == "sglang":  # its MLA kernel (FlashAttention-3) costs 187 us at 128 heads, 164 us at 8 (64k context)
        t1 = _attention(pricer, arch, block, prec, 1, 2, 1, 65536)
        assert _attention(pricer, arch, block, prec, 1, 2, 4, 65536) < 2.0 * t1  # not 4 KV passes


def test_mla_rows_beyond_the_collected_heads_go_on_at_the_last_measured_slope(db):
    """Query rows within the collected heads read the table there (from the decode's own head count up); above 128
    rows the price is the 128-row one plus the per-row slope between 64 and 128 heads."""
    from trtspec.recipes.pricing import MLA_TABLE_HEADS, _mla_rows

    pricer = make_pricer(load_gpu("h200"), "trtllm")
    hi, lo = db.mla(4, 8192, MLA_TABLE_HEADS, "fp8"), db.mla(4, 8192, MLA_TABLE_HEADS // 2, "fp8")
    assert _mla_rows(pricer, 4, 8192, 16, 4, "fp8") == pytest.approx(max(lo, db.mla(4, 8192, 16, "fp8"),
                                                                         db.mla(4, 8192, 32, "fp8")))
    want = hi + (hi - lo) / (MLA_TABLE_HEADS // 2) * (512 - MLA_TABLE_HEADS)
    assert _mla_rows(pricer, 4, 8192, 128, 4, "fp8") == pytest.approx(want)


def _routing_monte_carlo(experts: int, topk: int, tokens: int, trials: int = 4000, seed: int = 7) -> float:
    """Mean distinct experts hit by ``tokens`` tokens each choosing ``topk`` distinct experts uniformly."""
    import numpy as np

    rng = np.random.default_rng(seed)
    hits = [len({int(e) for _ in range(tokens) for e in rng.choice(experts, topk, replace=False)})
            for _ in range(trials)]
    return float(np.mean(hits))


@pytest.mark.parametrize("experts, topk, tokens", [(16, 1, 8), (16, 1, 32), (128, 8, 4), (128, 8, 32), (256, 8, 17)])
def test_distinct_experts_formula_matches_a_monte_carlo_of_uniform_top_k_routing(experts, topk, tokens):
    from trtspec.recipes.perfdb import unique_experts

    assert unique_experts(experts, topk, tokens) == pytest.approx(_routing_monte_carlo(experts, topk, tokens),
                                                                  rel=0.02)


@pytest.mark.parametrize("experts, topk", [(16, 1), (128, 8), (256, 8), (384, 8), (512, 10), (8, 2)])
def test_loading_edge_is_the_coupon_collector_point(experts, topk):
    """By ``loading_edge`` tokens fewer than one expert is expected untouched, one token earlier at least one (or the
    edge is E/k)."""
    from trtspec.recipes.perfdb import loading_edge, unique_experts

    edge = loading_edge(experts, topk)
    assert experts - unique_experts(experts, topk, edge) < 1.0
    assert edge == math.ceil(experts / topk) or experts - unique_experts(experts, topk, edge - 1) >= 1.0
    assert edge >= experts / topk


def test_a_kernel_switch_while_tokens_still_load_new_experts_does_not_move_the_routed_expert_price():
    """A synthetic routed-expert table priced a + b*u(T) (E = 16, top-1) with a 1.8x kernel switch between 16 and 24
    tokens: up to the coupon-collector point the price grows as the experts loaded; the same switch past that
    point (between 64 and 96 tokens) is the table's own price; a table without a switch is priced as before."""
    from trtspec.recipes.perfdb import PerfDB, unique_experts

    def table(switch_at):
        return lambda t: (10e-6 + 2e-6 * unique_experts(16, 1, t)) * (1.8 if t >= switch_at else 1.0)

    def price(at, tokens):
        db = PerfDB("synthetic", "none", "0")
        return db._expert_loading(("moe", "synthetic"), tokens, 1, 16, at, db._monotone(("moe", "synthetic"),
                                                                                         tokens, at))

    plain = table(10 ** 9)
    for tokens in (8, 24, 32, 48, 128):
        assert price(table(24), tokens) == pytest.approx(plain(tokens), rel=1e-6)
        assert price(plain, tokens) == pytest.approx(plain(tokens), rel=1e-6)
    late = table(96)
    assert price(late, 64) == pytest.approx(plain(64), rel=1e-6)
    assert price(late, 128) == pytest.approx(late(128), rel=1e-6)
