"""The DeepSeek-V3 layout in the runtime: MLA (absorbed, latent cache) and the MoE layer against plain
references and Hugging Face's DeepseekV3 modules (float32, awkward sizes), and the whole decoder's logits."""
from __future__ import annotations

import math

import pytest
import torch

from deepseek_fixtures import hf_models, make_deepseek, tiny_config
from runtime_fixtures import single_thread  # noqa: F401  (autouse: one thread)
from trtspec.runtime import masks
from trtspec.runtime.config import ModelFormatError, read_model_config
from trtspec.runtime.deepseek_config import DeepseekConfig, read_deepseek_config
from trtspec.runtime.mla import LatentCache, MLAttention, rope_interleaved
from trtspec.runtime.models import rope_cos_sin
from trtspec.runtime.moe import MoE


def _dcfg(hf_config) -> DeepseekConfig:
    return read_deepseek_config("<test>", hf_config.to_dict())


def _mla_pair(q_lora_rank, seed=0):
    model, _ = hf_models(seed, q_lora_rank=q_lora_rank)
    hf = model.model.layers[1].self_attn
    mine = MLAttention(_dcfg(model.config), layer=0)
    mine.load_state_dict(hf.state_dict())
    return model, hf, mine


def _hf_attention(model, hf, x, positions):
    pe = model.model.rotary_emb(x, positions)
    with torch.no_grad():
        return hf(hidden_states=x, position_embeddings=pe, attention_mask=None)[0]


def _mine(mine, x, positions, cache, lens, counts, rows=None):
    """Feed x [B, T, E] as a chain block after ``lens`` cached tokens (``counts`` valid tokens per row)."""
    B, T, _ = x.shape
    rows = torch.arange(B) if rows is None else rows
    pos, wi, mask = masks.chain_block(lens, counts, T, cache.slots)
    cos, sin = rope_cos_sin(pos, mine_inv_freq(mine), x.dtype)
    with torch.no_grad():
        return mine(x, cos, sin, cache, rows, wi, mask)


def mine_inv_freq(mine):
    return 1.0 / (10000.0 ** (torch.arange(0, mine.d_rope, 2).float() / mine.d_rope))


def plain_mla(attn: MLAttention, x: torch.Tensor) -> torch.Tensor:
    """The straightforward MLA: per-head keys and values expanded from the latent, causal softmax by hand."""
    B, T, _ = x.shape
    H, dn, dr, dv, r = attn.h, attn.d_nope, attn.d_rope, attn.d_v, attn.r
    pos = torch.arange(T)[None].expand(B, T)
    cos, sin = rope_cos_sin(pos, mine_inv_freq(attn), x.dtype)
    q = attn.query(x)                                                         # [B, H, T, dn + dr]
    q_nope, q_pe = q[..., :dn], rope_interleaved(q[..., dn:], cos, sin)
    kv = attn.kv_a_proj_with_mqa(x)
    c, k_pe = attn.kv_a_layernorm(kv[..., :r]), rope_interleaved(kv[..., r:][:, None], cos, sin)
    kvb = attn.kv_b_proj(c).view(B, T, H, dn + dv).transpose(1, 2)           # [B, H, T, dn + dv]
    k = torch.cat([kvb[..., :dn], k_pe.expand(B, H, T, dr)], -1)
    v = kvb[..., dn:]
    out = torch.zeros(B, H, T, dv)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                qh = torch.cat([q_nope[b, h, t], q_pe[b, h, t]])
                s = torch.stack([qh @ k[b, h, j] for j in range(t + 1)]) / math.sqrt(dn + dr)
                out[b, h, t] = torch.softmax(s, 0) @ v[b, h, : t + 1]
    return attn.o_proj(out.transpose(1, 2).reshape(B, T, H * dv))


@pytest.mark.parametrize("q_lora_rank", [24, None])
@pytest.mark.parametrize("B,T", [(1, 1), (3, 7), (2, 13)])
def test_mla_absorbed_equals_hf_expanded_attention(q_lora_rank, B, T):
    model, hf, mine = _mla_pair(q_lora_rank)
    g = torch.Generator().manual_seed(B * 100 + T)
    x = torch.randn(B, T, model.config.hidden_size, generator=g)
    ref = _hf_attention(model, hf, x, torch.arange(T)[None].expand(B, T))
    cfg = _dcfg(model.config)
    cache = LatentCache(1, B, T + 3, cfg.kv_lora_rank, cfg.qk_rope_head_dim, device="cpu", dtype=torch.float32)
    got = _mine(mine, x, None, cache, torch.zeros(B, dtype=torch.long), torch.full((B,), T))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_mla_equals_plain_reference():
    model, hf, mine = _mla_pair(24, seed=3)
    x = torch.randn(2, 5, model.config.hidden_size, generator=torch.Generator().manual_seed(7))
    cfg = _dcfg(model.config)
    cache = LatentCache(1, 2, 8, cfg.kv_lora_rank, cfg.qk_rope_head_dim, device="cpu", dtype=torch.float32)
    got = _mine(mine, x, None, cache, torch.zeros(2, dtype=torch.long), torch.full((2,), 5))
    with torch.no_grad():
        ref = plain_mla(mine, x)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_mla_decode_from_latent_cache_equals_full_sequence():
    """Prefill 6 tokens, then 1 token, then a block of 4: each output equals the full-sequence attention,
    in cache rows that are not the batch positions (rows 4 and 1 of a 5-row cache)."""
    model, hf, mine = _mla_pair(24, seed=1)
    cfg = _dcfg(model.config)
    B, T = 2, 11
    x = torch.randn(B, T, model.config.hidden_size, generator=torch.Generator().manual_seed(5))
    ref = _hf_attention(model, hf, x, torch.arange(T)[None].expand(B, T))
    cache = LatentCache(1, 5, 16, cfg.kv_lora_rank, cfg.qk_rope_head_dim, device="cpu", dtype=torch.float32)
    rows = torch.tensor([4, 1])
    outs, done = [], 0
    for n in (6, 1, 4):
        lens = torch.full((B,), done)
        outs.append(_mine(mine, x[:, done:done + n], None, cache, lens, torch.full((B,), n), rows=rows))
        done += n
    torch.testing.assert_close(torch.cat(outs, 1), ref, rtol=1e-5, atol=1e-5)


def test_latent_cache_move_handles_overlapping_slots():
    cache = LatentCache(2, 3, 8, 4, 2, device="cpu", dtype=torch.float32)
    cache.latent.copy_(torch.arange(cache.latent.numel()).float().view_as(cache.latent))
    cache.k_pe.copy_(-torch.arange(cache.k_pe.numel()).float().view_as(cache.k_pe))
    before_l, before_k = cache.latent.clone(), cache.k_pe.clone()
    cache.move(torch.tensor([2, 0]), torch.tensor([[3, 5, -1], [1, 2, 4]]), torch.tensor([[2, 3, 4], [0, 1, 2]]))
    assert torch.equal(cache.latent[:, 2, 2], before_l[:, 2, 3]) and torch.equal(cache.latent[:, 2, 3], before_l[:, 2, 5])
    assert torch.equal(cache.latent[:, 2, 4], before_l[:, 2, 4])                       # -1: skipped
    assert torch.equal(cache.k_pe[:, 0, :3], before_k[:, 0, [1, 2, 4]])                # sources read first
    assert torch.equal(cache.latent[:, 1], before_l[:, 1])                             # other rows untouched


# ------------------------------------------------------------------ MoE

def _unfused(sd: dict) -> dict:
    """HF's fused expert tensors -> the checkpoint's per-expert names (gate rows first in gate_up_proj)."""
    out = {k: v for k, v in sd.items() if not k.startswith("experts.")}
    gu, down = sd["experts.gate_up_proj"], sd["experts.down_proj"]
    inter = gu.shape[1] // 2
    for e in range(gu.shape[0]):
        out[f"experts.{e}.gate_proj.weight"] = gu[e, :inter]
        out[f"experts.{e}.up_proj.weight"] = gu[e, inter:]
        out[f"experts.{e}.down_proj.weight"] = down[e]
    return out


def _moe_pair(seed=0):
    model, _ = hf_models(seed, std=0.3)
    hf = model.model.layers[1].mlp
    mine = MoE(_dcfg(model.config))
    mine.load_state_dict(_unfused(hf.state_dict()))
    return model.config, hf, mine


def plain_moe(moe: MoE, cfg, x: torch.Tensor) -> torch.Tensor:
    """One token at a time, in Python: DeepSeek-V3's grouped top-k routing written out."""
    E, G = cfg.n_routed_experts, cfg.n_group
    per = E // G
    out = []
    for t in x:
        s = [1 / (1 + math.exp(-float(moe.gate.weight[e] @ t))) for e in range(E)]
        c = [s[e] + float(moe.gate.e_score_correction_bias[e]) for e in range(E)]
        gscore = [sum(sorted(c[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(G)]
        groups = sorted(range(G), key=lambda g: -gscore[g])[: cfg.topk_group]
        cand = [e for e in range(E) if e // per in groups]
        chosen = sorted(cand, key=lambda e: -c[e])[: cfg.num_experts_per_tok]
        w = [s[e] for e in chosen]
        w = [wi / sum(w) * cfg.routed_scaling_factor for wi in w]
        y = sum(wi * moe.experts[e](t) for wi, e in zip(w, chosen)) + moe.shared_experts(t)
        out.append(y)
    return torch.stack(out)


@pytest.mark.parametrize("N", [1, 7, 99])
def test_moe_equals_hf_and_plain_reference(N):
    cfg, hf, mine = _moe_pair(seed=N)
    x = torch.randn(N, cfg.hidden_size, generator=torch.Generator().manual_seed(N))
    with torch.no_grad():
        got = mine(x)
        torch.testing.assert_close(got, hf(x[None])[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got, plain_moe(mine, cfg, x), rtol=1e-5, atol=1e-5)   # router in float64


def test_router_picks_only_from_the_best_groups_and_weights_ignore_the_bias():
    cfg, _, mine = _moe_pair(seed=11)
    x = torch.randn(64, cfg.hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        idx, w = mine.gate(x)
        scores = torch.sigmoid(x @ mine.gate.weight.T)
        choice = scores + mine.gate.e_score_correction_bias
    per = cfg.n_routed_experts // cfg.n_group
    gscore = choice.view(64, cfg.n_group, per).topk(2, -1).values.sum(-1)
    best = gscore.topk(cfg.topk_group, -1).indices
    assert all(set((idx[t] // per).tolist()) <= set(best[t].tolist()) for t in range(64))
    expect = scores.gather(1, idx)
    torch.testing.assert_close(w, expect / expect.sum(-1, keepdim=True) * cfg.routed_scaling_factor)
    # a large bias on one expert makes every token choose it, while its weight stays its own score
    mine.gate.e_score_correction_bias[4] = 10.0
    idx2, w2 = mine.gate(x)
    assert bool((idx2 == 4).any(-1).all())
    torch.testing.assert_close(w2, scores.gather(1, idx2) / scores.gather(1, idx2).sum(-1, keepdim=True)
                               * cfg.routed_scaling_factor)


# ------------------------------------------------------------------ the whole decoder

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}   # DeepSeek-V3's kind, scaled down


@pytest.mark.parametrize("rope", [None, YARN], ids=["default", "yarn"])
def test_decoder_logits_equal_transformers_with_ragged_prompts(tmp_path, rope):
    from transformers import AutoModelForCausalLM

    from trtspec.runtime.models import load_model

    d = make_deepseek(tmp_path / "ds", seed=4, rope=rope)
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    rt = load_model(d)
    assert type(rt).__name__ == "DeepseekTransformer" and rt.quant is None
    g = torch.Generator().manual_seed(0)
    lens = [5, 1, 9]
    ids = torch.randint(0, 256, (3, 9), generator=g)
    pos, wi, mask = masks.chain_block(torch.zeros(3, dtype=torch.long), torch.tensor(lens), 9, 12)
    with torch.no_grad():
        h, aux = rt(ids, pos, rt.new_cache(3, 12), torch.arange(3), wi, mask, capture=(0, 3))
        got = rt.logits(h)
        for b, n in enumerate(lens):
            ref = hf(input_ids=ids[b:b + 1, :n]).logits[0]
            torch.testing.assert_close(got[b, :n], ref, rtol=1e-4, atol=1e-5)
    assert aux.shape == (3, 9, 2 * 48) and torch.equal(aux[..., 48:], h)      # capture 3 = the normed output


def test_deepseek_config_errors_name_the_field(tmp_path):
    cfg = tiny_config().to_dict()
    with pytest.raises(ModelFormatError, match="scoring_func='softmax'"):
        read_deepseek_config(tmp_path, {**cfg, "scoring_func": "softmax"})
    with pytest.raises(ModelFormatError, match="n_routed_experts=6 must split into n_group=4"):
        read_deepseek_config(tmp_path, {**cfg, "n_group": 4})
    with pytest.raises(ModelFormatError, match="missing field 'kv_lora_rank'"):
        read_deepseek_config(tmp_path, {k: v for k, v in cfg.items() if k != "kv_lora_rank"})
    d = make_deepseek(tmp_path / "ds")
    c = read_model_config(d)
    assert isinstance(c, DeepseekConfig) and c.num_nextn_predict_layers == 1 and c.is_moe(3) and not c.is_moe(0)
