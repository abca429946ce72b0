"""Every real Hugging Face ``config.json`` aiconfigurator-core ships plans, or is refused in one line naming a field;
each parser path is checked against the config's numbers, transformers' own parameter counts and published figures.

Skipped where aiconfigurator-core is not installed (it is a dependency; CI has it).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

aic = pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed; it ships the configs")

from click.testing import CliRunner  # noqa: E402

from trtspec.cli import main  # noqa: E402
from trtspec.recipes.api import build_request  # noqa: E402
from trtspec.recipes.arch import from_hf_config, load_architecture  # noqa: E402
from trtspec.recipes.costmodel import Precision, cache_bytes  # noqa: E402
from trtspec.recipes.errors import RecipeError  # noqa: E402
from trtspec.recipes.optimizer import plan  # noqa: E402
from trtspec.recipes.variants import fp8_key_bytes, latent_entry_bytes  # noqa: E402

CONFIG_DIR = Path(aic.__file__).parent / "model_configs"
CONFIGS = sorted(p for p in CONFIG_DIR.glob("*_config.json") if not p.name.endswith("_hf_quant_config.json"))
TPS = (1, 2, 4, 8, 16, 32, 64)


def cfg_path(name: str) -> Path:
    return CONFIG_DIR / f"{name}_config.json"


def arch(name: str):
    return load_architecture(cfg_path(name))


def raw(name: str) -> dict:
    return json.loads(cfg_path(name).read_text())


def test_the_package_ships_the_89_configs():
    assert len(CONFIGS) == 89


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name[: -len("_config.json")])
def test_every_config_plans_at_the_tp_it_needs_or_is_refused_naming_a_field(path):
    """``plan --model <path> --gpu h200 --drafter eagle3 --acceptance al=3@4 --quant fp8`` at the smallest TP
    (1..64) where every batch fits; a refusal is a RecipeError of one line that quotes the offending field."""
    try:
        for tp in TPS:
            req = build_request(model=path, gpu="h200", drafters="eagle3", acceptance="al=3@4", quant="fp8", tp=tp,
                                batches=(1, 8))
            result = plan(req)
            if all(r.fits_memory for r in result.rows):
                break
        else:
            pytest.fail(f"{path.name} does not fit on 64 H200s")
    except RecipeError as exc:
        msg = str(exc)
        assert "\n" not in msg and "'" in msg, msg
        return
    for row in result.rows:
        assert 0 <= row.draft_len <= 16 and row.speedup > 0 and math.isfinite(row.tokens_per_s)


# ---- total parameters against transformers ----------------------------------------------------------------------
# (text-model parameters, routed-expert parameters) of each config instantiated on the meta device by transformers
# 5.24 (AutoModelForCausalLM / ForImageTextToText .from_config, vision tower excluded); configs whose modeling code
# transformers 5.24 lacks (MiniMax-M3, MiMo-7B, Kimi-K2/K3 remote code, DeciLM, deepseek_ref) are not listed.
# test_reference_counts_match_transformers re-derives a sample of them.
HF_PARAMS = {
    "MiniMaxAI--MiniMax-M2.5": (228689748992, 224680476672),
    "MiniMaxAI--MiniMax-M2.7": (228689748992, 224680476672),
    "Qwen--Qwen3-0.6B": (596049920, 0),
    "Qwen--Qwen3-1.7B": (1720574976, 0),
    "Qwen--Qwen3-235B-A22B": (235093634560, 227096395776),
    "Qwen--Qwen3-235B-A22B-FP8": (235093634560, 227096395776),
    "Qwen--Qwen3-30B-A3B": (30532122624, 28991029248),
    "Qwen--Qwen3-30B-A3B-FP8": (30532122624, 28991029248),
    "Qwen--Qwen3-32B": (32762123264, 0),
    "Qwen--Qwen3-32B-FP8": (32762123264, 0),
    "Qwen--Qwen3-32B-FP8-Static-PerTensor": (32762123264, 0),
    "Qwen--Qwen3-8B": (8190735360, 0),
    "Qwen--Qwen3-Coder-480B-A35B-Instruct": (480154875392, 468084326400),
    "Qwen--Qwen3-VL-235B-A22B-Instruct": (235093634560, 227096395776),
    "Qwen--Qwen3-VL-2B-Instruct": (1720574976, 0),
    "Qwen--Qwen3-VL-30B-A3B-Instruct": (30532122624, 28991029248),
    "Qwen--Qwen3-VL-32B-Instruct": (32762123264, 0),
    "Qwen--Qwen3-VL-32B-Thinking": (32762123264, 0),
    "Qwen--Qwen3-VL-4B-Instruct": (4022468096, 0),
    "Qwen--Qwen3-VL-8B-Instruct": (8190735360, 0),
    "Qwen--Qwen3.5-122B-A10B": (122111526912, 115964116992),
    "Qwen--Qwen3.5-27B": (26895998464, 0),
    "Qwen--Qwen3.5-35B-A3B": (34660610688, 32212254720),
    "Qwen--Qwen3.5-397B-A17B": (396346350336, 386547056640),
    "XiaomiMiMo--MiMo-V2-Flash": (308778768832, 302795194368),
    "deepseek-ai--DeepSeek-R1": (671026404352, 653908770816),
    "deepseek-ai--DeepSeek-V3": (671026404352, 653908770816),
    "deepseek-ai--DeepSeek-V3.2": (671877929216, 653908770816),
    "deepseek-ai--DeepSeek-V4-Flash": (284332230231, 277025390592),
    "deepseek-ai--DeepSeek-V4-Pro": (1572997179491, 1547396186112),
    "google--gemma-4-26B-A4B": (25233141760, 22837985280),
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": (400711848960, 386547056640),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": (107769861120, 96636764160),
    "meta-llama--Meta-Llama-3.1-405B": (405853388800, 0),
    "meta-llama--Meta-Llama-3.1-70B": (70553706496, 0),
    "meta-llama--Meta-Llama-3.1-8B": (8030261248, 0),
    "mistralai--Mixtral-8x22B-v0.1": (140620634112, 135291469824),
    "mistralai--Mixtral-8x7B-v0.1": (46702792704, 45097156608),
    "moonshotai--Kimi-K2.5": (1026408209408, 1014686023680),
    "nvidia--DeepSeek-V3.1-NVFP4": (671026404352, 653908770816),
    "nvidia--DeepSeek-V3.2-NVFP4": (671877929216, 653908770816),
    "nvidia--DeepSeek-V4-Flash-NVFP4": (284332230231, 277025390592),
    "nvidia--DeepSeek-V4-Pro-NVFP4": (1572997179491, 1547396186112),
    "nvidia--GLM-5-NVFP4": (743911199232, 724775731200),
    "nvidia--GLM-5.1-NVFP4": (743911199232, 724775731200),
    "nvidia--GLM-5.2-NVFP4": (743377000704, 724775731200),
    "nvidia--GLM-5.3-NVFP4": (743377000704, 724775731200),
    "nvidia--Gemma-4-26B-A4B-NVFP4": (25233141760, 22837985280),
    "nvidia--Gemma-4-31B-IT-NVFP4": (30697345280, 0),
    "nvidia--Kimi-K2.5-NVFP4": (1026408209408, 1014686023680),
    "nvidia--Kimi-K2.6-NVFP4": (1026408209408, 1014686023680),
    "nvidia--Kimi-K2.7-Code-NVFP4": (1026408209408, 1014686023680),
    "nvidia--Llama-3.1-70B-Instruct-FP8": (70553706496, 0),
    "nvidia--MiniMax-M2.5-NVFP4": (228689748992, 224680476672),
    "nvidia--MiniMax-M2.7-NVFP4": (228689748992, 224680476672),
    "nvidia--MiniMax-M3-NVFP4": (426174565632, 413122166784),
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (31577937344, 29374808064),
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4": (31577937344, 29374808064),
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": (120668687360, 112742891520),
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4": (120668687360, 112742891520),
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": (549308968960, 515396075520),
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8": (549308968960, 515396075520),
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4": (549308968960, 515396075520),
    "nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4": (31577937344, 29374808064),
    "nvidia--Nemotron-H-56B-Base-8K": (56324350464, 0),
    "nvidia--Qwen3-235B-A22B-NVFP4": (235093634560, 227096395776),
    "nvidia--Qwen3.5-122B-A10B-NVFP4": (122111526912, 115964116992),
    "nvidia--Qwen3.5-397B-A17B-NVFP4": (396346350336, 386547056640),
    "nvidia--Qwen3.6-27B-NVFP4": (26895998464, 0),
    "nvidia--Qwen3.6-35B-A3B-NVFP4": (34660610688, 32212254720),
    "openai--gpt-oss-120b": (116829156672, 114701598720),
    "openai--gpt-oss-20b": (20914757184, 19116933120),
    "stepfun-ai--Step-3.7-Flash": (195843833088, 190253629440),
    "stepfun-ai--Step-3.7-Flash-FP8": (195843833088, 190253629440),
    "zai-org--GLM-5": (743911199232, 724775731200),
    "zai-org--GLM-5-FP8": (743911199232, 724775731200),
    "zai-org--GLM-5.1": (743911199232, 724775731200),
    "zai-org--GLM-5.1-FP8": (743911199232, 724775731200),
    "zai-org--GLM-5.2": (743377000704, 724775731200),
    "zai-org--GLM-5.2-FP8": (743377000704, 724775731200),
    "zai-org--GLM-5.3": (743377000704, 724775731200),
    "zai-org--GLM-5.3-FP8": (743377000704, 724775731200),
}


@pytest.mark.parametrize("name", sorted(HF_PARAMS))
def test_total_and_routed_parameters_match_transformers(name):
    a = arch(name)
    total, routed = HF_PARAMS[name]
    assert a.total_params() == pytest.approx(total, rel=1e-3)
    n_moe = sum(b.ffn == "moe" for b in a.blocks)
    ours = a.moe.num_experts * a.expert_params * n_moe if a.moe else 0
    assert ours == pytest.approx(routed, rel=1e-3)


LIVE = ["deepseek-ai--DeepSeek-V4-Flash", "zai-org--GLM-5.2", "google--gemma-4-26B-A4B", "XiaomiMiMo--MiMo-V2-Flash",
        "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", "meta-llama--Llama-4-Maverick-17B-128E-Instruct",
        "nvidia--MiniMax-M3-NVFP4", "Qwen--Qwen3.5-27B", "stepfun-ai--Step-3.7-Flash"]


@pytest.mark.slow  # builds each model on the meta device: ~1-20 s apiece on 2 shared cores
@pytest.mark.parametrize("name", LIVE)
def test_reference_counts_match_transformers(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(cfg_path(name))
    with torch.device("meta"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        except ValueError:
            model = transformers.AutoModelForImageTextToText.from_config(cfg)
    text = sum(p.numel() for n, p in model.named_parameters() if "vision" not in n and "visual" not in n
               and "multi_modal" not in n)
    assert text == HF_PARAMS[name][0]


# ---- published totals and active parameters ---------------------------------------------------------------------
# Published "active" figures count the embedding or not depending on the card; ``active_params`` (LM head in,
# embedding out) or it plus the embedding must land within 8%. A model's name (235B-A22B) is its card's headline.
PUBLISHED = [
    ("deepseek-ai--DeepSeek-V4-Flash", 284, 13, "https://ai-digest.dev/article/b5f2cc5d-5822-4165-956c-48c9ccc30e9b"),
    ("deepseek-ai--DeepSeek-V4-Pro", 1600, 49, "https://ai-digest.dev/article/b5f2cc5d-5822-4165-956c-48c9ccc30e9b"),
    ("deepseek-ai--DeepSeek-V3.2", 671, 37, "https://framia.pro/page/en-US/news/deepseek-v4-parameters"),
    ("zai-org--GLM-5", 744, 40, "https://glennklockwood.com/garden/GLM-5 (GLM-5 technical report, table 1)"),
    ("zai-org--GLM-5.2", 744, 40, "GLM-5 figures; GLM-5.2 drops 57 layers' indexers (0.5B)"),
    ("XiaomiMiMo--MiMo-V2-Flash", 309, 15, "https://tomesphere.com/paper/2601.02780 (MiMo-V2-Flash report abstract)"),
    ("google--gemma-4-26B-A4B", 25.2, 3.8, "https://vast.ai/model/gemma-4-26b-a4b-it"),
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 31.6, 3.2,
     "https://www.open-source-ai.tech/models/nemotron-3-nano"),
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 120, 12, "model name"),
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 550, 55, "model name"),
    ("Qwen--Qwen3-235B-A22B", 235, 22, "model name"),
    ("Qwen--Qwen3-30B-A3B", 30.5, 3.3, "model name / Qwen3 card (30.5B, 3.3B activated)"),
    ("Qwen--Qwen3.5-397B-A17B", 397, 17, "model name"),
    ("Qwen--Qwen3.5-122B-A10B", 122, 10, "model name"),
    ("meta-llama--Llama-4-Maverick-17B-128E-Instruct", None, 17, "model name"),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", None, 17, "model name"),
]


@pytest.mark.parametrize("name,total_b,active_b,source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameters_match_the_published_figures(name, total_b, active_b, source):
    a = arch(name)
    if total_b is not None:
        assert a.total_params() / 1e9 == pytest.approx(total_b, rel=0.03), source
    active = a.active_params() / 1e9
    embed = a.lm_head_params / 1e9
    assert min(abs(active / active_b - 1), abs((active + embed) / active_b - 1)) <= 0.08, (active, source)


# ---- structure of each parser path against the config's own numbers -------------------------------------------
def kinds(a):
    return {k: v for k, v in __import__("collections").Counter(
        (b.sparse.kind if b.sparse else b.mixer, b.ffn) for b in a.blocks).items()}


def test_deepseek_v4_is_compressed_sparse_attention_not_sliding_window_gqa():
    cfg = raw("deepseek-ai--DeepSeek-V4-Flash")
    a = arch("deepseek-ai--DeepSeek-V4-Flash")
    ratios = cfg["compress_ratios"][: cfg["num_hidden_layers"]]
    assert a.attention_kind() == "csa+hca" and not any(b.mixer == "sliding" for b in a.blocks)
    assert dict(a.sparse_kinds()) == {"csa": ratios.count(4), "hca": ratios.count(128), "swa": ratios.count(0)}
    assert dict(a.sparse_kinds()) == {"csa": 21, "hca": 20, "swa": 2}
    csa = next(b.sparse for b in a.blocks if b.sparse.kind == "csa")
    assert (csa.window, csa.compress, csa.topk) == (cfg["sliding_window"], 4, cfg["index_topk"])
    assert (csa.indexer.heads, csa.indexer.head_dim) == (cfg["index_n_heads"], cfg["index_head_dim"])
    assert a.mla.kv_lora_rank + a.mla.qk_rope_head_dim == cfg["head_dim"]  # one shared-KV head per token


def test_deepseek_v4_as_transformers_saves_it_parses_the_same():
    """transformers' DeepseekV4Config writes ``layer_types`` names in place of ``compress_ratios``."""
    cfg = raw("deepseek-ai--DeepSeek-V4-Flash")
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    saved = {k: v for k, v in cfg.items() if k != "compress_ratios"}
    saved["layer_types"] = [names[r] for r in cfg["compress_ratios"][: cfg["num_hidden_layers"]]]
    assert from_hf_config(saved).blocks == arch("deepseek-ai--DeepSeek-V4-Flash").blocks


def test_deepseek_v4_kv_cache_bytes_from_the_config():
    a, cfg = arch("deepseek-ai--DeepSeek-V4-Flash"), raw("deepseek-ai--DeepSeek-V4-Flash")
    C, hd, rope, idim = 65536, cfg["head_dim"], cfg["qk_rope_head_dim"], cfg["index_head_dim"]
    entry = (hd - rope) * 1 + rope * 2 + 4 * math.ceil((hd - rope) / 128)  # fp8 latent, bf16 RoPE, fp32 scales
    want = 0.0
    for r in cfg["compress_ratios"][: cfg["num_hidden_layers"]]:
        want += 128 * entry
        if r:
            coff = 2 if r == 4 else 1
            want += C // r * entry + 2 * r * coff * hd * 4
        if r == 4:
            want += C // 4 * idim * 0.5 + 2 * 4 * 2 * idim * 4
    assert cache_bytes(a, Precision.of("fp8"), 1, 1, C) == pytest.approx(want)


def test_deepseek_v4_pro_keeps_a_tenth_of_v32s_kv_cache_at_1m_tokens():
    """DeepSeek-V4 report: at 1M tokens V4-Pro needs 10% of DeepSeek-V3.2's KV cache
    (https://venicestats.com/venice-models/deepseek-v4-flash, https://app.smartappnet.net/post/status/20550609)."""
    prec, C = Precision.of("fp8"), 1 << 20
    ratio = cache_bytes(arch("deepseek-ai--DeepSeek-V4-Pro"), prec, 1, 1, C) / cache_bytes(
        arch("deepseek-ai--DeepSeek-V3.2"), prec, 1, 1, C)
    assert 0.08 <= ratio <= 0.12, ratio


def test_dsa_layers_and_their_indexers():
    cfg = raw("deepseek-ai--DeepSeek-V3.2")
    a = arch("deepseek-ai--DeepSeek-V3.2")
    assert a.attention_kind() == "mla+dsa" and dict(a.sparse_kinds()) == {"dsa": 61}
    assert kinds(a) == {("dsa", "dense"): 3, ("dsa", "moe"): 58}
    ix = a.blocks[0].sparse.indexer
    h, q, n, d = cfg["hidden_size"], cfg["q_lora_rank"], cfg["index_n_heads"], cfg["index_head_dim"]
    assert ix.params == q * n * d + h * d + 2 * d + h * n == 13_959_424
    assert a.blocks[0].sparse.topk == cfg["index_topk"] == 2048
    # per token and layer: FP8 latent (512 + 4 scales + bf16 RoPE) and one FP8 index key with its scale
    assert cache_bytes(a, Precision.of("fp8"), 8, 1, 1000) == pytest.approx(1000 * 61 * (656 + fp8_key_bytes(128)))
    assert latent_entry_bytes(512, 64, 1.0) == 656


def test_glm52_shares_the_indexer_of_three_layers_in_four():
    glm5, glm52, cfg = arch("zai-org--GLM-5"), arch("zai-org--GLM-5.2"), raw("zai-org--GLM-5.2")
    shared = [b.sparse.indexer.shared for b in glm52.blocks]
    assert [("shared" if s else "full") for s in shared] == cfg["indexer_types"]
    assert shared.count(False) == 21 and shared.count(True) == 57  # as sglang's dsa_layer_skips_topk counts
    assert not any(b.sparse.indexer.shared for b in glm5.blocks)
    assert glm5.total_params() - glm52.total_params() == 57 * glm5.blocks[0].sparse.indexer.params
    # the same schedule from index_topk_freq / index_skip_topk_offset when indexer_types is absent
    alt = {k: v for k, v in cfg.items() if k != "indexer_types"}
    assert [b.sparse.indexer.shared for b in from_hf_config(alt).blocks] == shared
    assert glm52.blocks[3].sparse.indexer.params == 0  # a shared layer has no indexer weights of its own
    assert glm52.blocks[0].sparse.indexer.params == glm5.blocks[0].sparse.indexer.params > 0


def test_minimax_m3_sparse_attention_layers():
    a, cfg = arch("MiniMaxAI--MiniMax-M3"), raw("MiniMaxAI--MiniMax-M3")
    sc = cfg["sparse_attention_config"]
    assert a.attention_kind() == "gqa+msa"
    assert kinds(a) == {("attention", "dense"): 3, ("msa", "moe"): 57}
    msa = a.blocks[3].sparse
    assert msa.topk == sc["sparse_topk_blocks"] * sc["sparse_block_size"] == 2048
    assert (msa.indexer.heads, msa.indexer.head_dim) == (sc["sparse_num_index_heads"], sc["sparse_index_dim"])
    assert a.intermediate == cfg["dense_intermediate_size"] and a.moe.shared_intermediate == 3072
    assert a.total_params() == arch("nvidia--MiniMax-M3-NVFP4").total_params()
    assert a.total_params() == pytest.approx(HF_PARAMS["nvidia--MiniMax-M3-NVFP4"][0], rel=1e-5)  # norms aside


def test_mimo_v2_flash_sliding_and_full_layers_have_their_own_sizes():
    a, cfg = arch("XiaomiMiMo--MiMo-V2-Flash"), raw("XiaomiMiMo--MiMo-V2-Flash")
    pattern = cfg["hybrid_layer_pattern"]
    assert [b.mixer for b in a.blocks] == ["sliding" if p else "attention" for p in pattern]
    assert (pattern.count(1), pattern.count(0)) == (39, 9)
    swa = next(b for b in a.blocks if b.mixer == "sliding")
    full = next(b for b in a.blocks if b.mixer == "attention")
    assert (swa.window, swa.dims.kv_heads, swa.dims.head_dim, swa.dims.v_head_dim) == (128, 8, 192, 128)
    assert (full.dims.kv_heads, full.dims.head_dim, full.dims.v_head_dim) == (4, 192, 128)
    assert sum(b.ffn == "moe" for b in a.blocks) == sum(cfg["moe_layer_freq"]) == 47
    # KV per token: 9 full layers of 4 x (192 + 128) values; sliding layers hold at most 128 tokens
    assert cache_bytes(a, Precision.of("fp8"), 1, 1, 100_000) == 100_000 * 9 * 4 * 320 + 128 * 39 * 8 * 320


def test_gemma4_global_layers_and_the_dense_mlp_beside_the_experts():
    a, cfg = arch("google--gemma-4-26B-A4B"), raw("google--gemma-4-26B-A4B")["text_config"]
    assert kinds(a) == {("sliding", "moe"): 25, ("attention", "moe"): 5}
    g = next(b for b in a.blocks if b.mixer == "attention").dims
    assert (g.kv_heads, g.head_dim, g.shared_kv) == (cfg["num_global_key_value_heads"], cfg["global_head_dim"], True)
    assert a.moe.shared_intermediate == cfg["intermediate_size"] and a.moe.intermediate == cfg["moe_intermediate_size"]
    assert arch("nvidia--Gemma-4-31B-IT-NVFP4").moe is None
    # KV (K and V both cached): 5 global layers x 2 heads x (512 + 512) per token, sliding layers 1024 tokens
    assert cache_bytes(a, Precision.of("fp8"), 1, 1, 100_000) == 100_000 * 5 * 2 * 1024 + 1024 * 25 * 8 * 512


def test_llama4_chunked_attention_and_interleaved_experts():
    mav = arch("meta-llama--Llama-4-Maverick-17B-128E-Instruct")
    scout = arch("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    # full (NoPE) attention on layers 3, 7, ...; experts on the odd layers (interleave_moe_layer_step 2)
    assert kinds(mav) == {("sliding", "dense"): 24, ("sliding", "moe"): 12, ("attention", "moe"): 12}
    assert {b.window for b in mav.blocks if b.mixer == "sliding"} == {8192}
    assert mav.intermediate == 16384 and mav.moe.shared_intermediate == mav.moe.intermediate == 8192
    assert sum(b.ffn == "moe" for b in scout.blocks) == 48


def test_nemotron_nas_blocks():
    a, cfg = arch("nvidia--Llama-3_3-Nemotron-Super-49B-v1"), raw("nvidia--Llama-3_3-Nemotron-Super-49B-v1")
    blocks = cfg["block_configs"]
    assert sum(b.mixer is None for b in a.blocks) == sum(bc["attention"]["no_op"] for bc in blocks) == 31
    for b, bc in zip(a.blocks, blocks):
        width = int(2 * bc["ffn"]["ffn_mult"] * 8192 / 3)
        assert b.ffn_width == width + (-width) % 256
        if b.mixer:
            assert b.dims.kv_heads == 64 // bc["attention"]["n_heads_in_group"]
    assert a.blocks[1].ffn_width == 28672  # ffn_mult 5.25
    assert a.group_size == 8 and a.attention_kind() == "gqa"  # n_heads_in_group 8, not the null KV-head count
    assert a.total_params() / 1e9 == pytest.approx(49.9, abs=0.05)  # Llama-3.3-Nemotron-Super-49B


def test_nemotron3_layers_block_type_without_num_hidden_layers():
    cfg = raw("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
    assert "num_hidden_layers" not in cfg
    a = arch("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
    types = cfg["layers_block_type"]
    assert a.num_layers == len(types) == 108
    assert kinds(a) == {("mamba2", None): types.count("mamba"), ("attention", None): types.count("attention"),
                        (None, "moe"): types.count("moe")}
    assert a.moe.latent == cfg["moe_latent_size"] and a.expert_params == 2 * 2048 * 5120  # relu2: up + down
    lightning = arch("nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4")
    assert sum(b.mixer == "attention" for b in lightning.blocks) == 6  # not 52 full-attention layers


def test_kimi_k3_linear_attention_and_latent_experts():
    a = arch("moonshotai--Kimi-K3")
    lac = raw("moonshotai--Kimi-K3")["text_config"]["linear_attn_config"]
    assert [b.mixer for b in a.blocks].count("linear") == len(lac["kda_layers"]) == 69
    assert [i + 1 for i, b in enumerate(a.blocks) if b.mixer == "mla"] == lac["full_attn_layers"]
    assert a.linear.state == 96 * 128 * 128 and a.moe.latent == 3584 and a.mla.output_gate
    # aiconfigurator-core 0.12.0 sdk/models/kimi_k3.py: "Kimi-K3 hybrid KDA + MLA LatentMoE model (2.8T, 93 layers)"
    assert a.total_params() / 1e12 == pytest.approx(2.8, rel=0.02)


def test_step37_sliding_layers_and_shared_expert():
    a, cfg = arch("stepfun-ai--Step-3.7-Flash"), raw("stepfun-ai--Step-3.7-Flash")
    assert [b.mixer for b in a.blocks] == ["sliding" if t == "sliding_attention" else "attention"
                                           for t in cfg["layer_types"]]
    assert {b.window for b in a.blocks if b.window} == {512}
    assert sum(b.ffn == "moe" for b in a.blocks) == 45 - cfg["first_k_dense_replace"]
    assert a.moe.shared_intermediate == cfg["share_expert_dim"]
    # the legacy attention_other_setting gives sliding layers their own head count
    alt = from_hf_config({**cfg, "attention_other_setting": {"num_attention_heads": 96}})
    assert {b.dims.heads for b in alt.blocks if b.mixer == "sliding"} == {96}


# ---- refusals: one line, naming the field, exit status 2 --------------------------------------------------------
REFUSED = [
    ("deepseek-ai--DeepSeek-V4-Flash", lambda c: {**c, "compress_ratios": [16] + c["compress_ratios"][1:]},
     "compress_ratios[0]"),
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1",
     lambda c: {**c, "block_configs": [{**c["block_configs"][0], "ffn": {"replace_with_linear": True}}]
                + c["block_configs"][1:]}, "ffn.replace_with_linear"),
    ("google--gemma-4-26B-A4B", lambda c: {**c, "text_config": {**c["text_config"], "num_kv_shared_layers": 4}},
     "num_kv_shared_layers"),
    ("zai-org--GLM-5.2", lambda c: {**c, "indexer_types": ["full", "sparse"] + c["indexer_types"][2:]},
     "indexer_types[1]"),
    ("MiniMaxAI--MiniMax-M3", lambda c: {**c, "sparse_attention_config": {**c["sparse_attention_config"],
                                                                          "sparse_topk_blocks": 0}},
     "sparse_topk_blocks"),
    ("nvidia--GLM-5.2-NVFP4", lambda c: {k: v for k, v in c.items() if k != "index_topk"}, "index_topk"),
    ("XiaomiMiMo--MiMo-V2-Flash", lambda c: {**c, "hybrid_layer_pattern": c["hybrid_layer_pattern"][:-1]},
     "hybrid_layer_pattern"),
]


@pytest.mark.parametrize("name,mutate,field", REFUSED, ids=[r[2] for r in REFUSED])
def test_unsupported_variants_are_refused_in_one_line_naming_the_field(tmp_path, name, mutate, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mutate(raw(name))))
    with pytest.raises(RecipeError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_architecture(path)
    r = CliRunner().invoke(main, ["plan", "--model", str(path), "--gpu", "h200", "--drafter", "eagle3",
                                  "--acceptance", "al=3@4", "--quant", "fp8"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and field in lines[0], r.output


BUILTINS = {"deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash", "deepseek-v4-pro": "deepseek-ai--DeepSeek-V4-Pro",
            "deepseek-v3.2": "deepseek-ai--DeepSeek-V3.2", "glm-5.1": "zai-org--GLM-5.1", "glm-5.2": "zai-org--GLM-5.2",
            "kimi-k2.6": "nvidia--Kimi-K2.6-NVFP4",
            "minimax-m3": "MiniMaxAI--MiniMax-M3", "gemma-4-26b-a4b": "google--gemma-4-26B-A4B"}


@pytest.mark.parametrize("builtin,name", sorted(BUILTINS.items()))
def test_builtin_models_describe_the_shipped_configs(builtin, name):
    a, b = load_architecture(builtin), arch(name)
    assert a.blocks == b.blocks and (a.moe, a.mla, a.linear, a.mamba) == (b.moe, b.mla, b.linear, b.mamba)
    assert (a.total_params(), a.active_params(), a.mtp_layers) == (b.total_params(), b.active_params(), b.mtp_layers)
