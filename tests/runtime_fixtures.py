"""Tiny random checkpoints for the runtime tests, written with transformers / tokenizers / safetensors.

Every model has 2 layers and a byte-level tokenizer whose 256 tokens are the 256 bytes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

VOCAB = 256


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """Tiny models run fastest on one thread (and do not fight the other jobs on a shared machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def byte_tokenizer(vocab: int = VOCAB):
    """A byte-level BPE tokenizer with no merges: token i is byte i (the first ``vocab`` bytes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    byte_chars = sorted(alphabet, key=lambda c: _byte_of(c))[:vocab]
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(byte_chars)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _byte_of(ch: str) -> int:
    # GPT-2 byte<->unicode table: printable bytes map to themselves, others to 256+n
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    return table[ch]


def make_model(path: Path, *, arch: str = "llama", seed: int = 0, vocab: int = VOCAB, hidden: int = 64,
               layers: int = 2, heads: int = 4, kv_heads: int = 2, init: float = 0.02, tie: bool = False,
               rope_scaling: dict | None = None, max_pos: int = 512, from_model=None, noise: float = 0.0) -> Path:
    """Save a tiny random Llama / Qwen3 / Qwen2 / Mistral (transformers ``save_pretrained``) + tokenizer.json.

    With ``from_model`` (a directory) its weights are copied (plus ``noise`` * N(0,1)) instead of random ones.
    """
    import transformers

    cfg_cls, model_cls, name = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, "LlamaForCausalLM"),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, "Qwen3ForCausalLM"),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, "Qwen2ForCausalLM"),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, "MistralForCausalLM"),
    }[arch]
    kw = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
              max_position_embeddings=max_pos, initializer_range=init, tie_word_embeddings=tie,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if rope_scaling:
        kw["rope_scaling"] = rope_scaling
    torch.manual_seed(seed)
    config = cfg_cls(**kw)
    config.architectures = [name]
    model = model_cls(config).eval()
    if from_model is not None:
        src = model_cls.from_pretrained(from_model).state_dict()
        g = torch.Generator().manual_seed(seed)
        model.load_state_dict({k: v + noise * torch.randn(v.shape, generator=g) for k, v in src.items()},
                              strict=False)
    path = Path(path)
    model.save_pretrained(path, safe_serialization=True)
    byte_tokenizer(vocab).save(str(path / "tokenizer.json"))
    return path


def make_eagle3(path: Path, target_dir: Path, *, seed: int = 0, aux_ids=(0, 1), draft_vocab: int = 200,
                init: float = 0.05, echo: bool = False) -> Path:
    """A random EAGLE-3 head in NVIDIA Model-Optimizer's export layout (``config.json`` + ``model.safetensors``).

    ``echo=True`` builds a head that proposes the target's own last prediction again at every depth
    (``fc`` picks the last captured layer, attention and MLP outputs are zero, ``norm``/``lm_head`` are
    the target's), so it is accepted whenever the target repeats a token: useful acceptance.
    """
    from safetensors.torch import load_file, save_file

    t = json.loads((Path(target_dir) / "config.json").read_text())
    E, H, Hkv = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"]
    d, inter, V = t.get("head_dim") or E // H, t["intermediate_size"], t["vocab_size"]
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (init * torch.randn(*shape, generator=g)).contiguous()

    def norm():
        return (1.0 + 0.1 * torch.randn(E, generator=g)).contiguous()

    sd = {
        "fc.weight": w(E, len(aux_ids) * E),
        "layers.0.self_attn.q_proj.weight": w(H * d, 2 * E),
        "layers.0.self_attn.k_proj.weight": w(Hkv * d, 2 * E),
        "layers.0.self_attn.v_proj.weight": w(Hkv * d, 2 * E),
        "layers.0.self_attn.o_proj.weight": w(E, H * d),
        "layers.0.mlp.gate_proj.weight": w(inter, E),
        "layers.0.mlp.up_proj.weight": w(inter, E),
        "layers.0.mlp.down_proj.weight": w(E, inter),
        "layers.0.input_layernorm.weight": norm(),
        "layers.0.hidden_norm.weight": norm(),
        "layers.0.post_attention_layernorm.weight": norm(),
        "norm.weight": norm(),
        "lm_head.weight": w(draft_vocab, E),
    }
    if echo:
        tw = load_file(str(Path(target_dir) / "model.safetensors"))
        draft_vocab = V
        sd["fc.weight"] = torch.cat([torch.zeros(E, (len(aux_ids) - 1) * E), torch.eye(E)], 1).contiguous()
        sd["layers.0.self_attn.o_proj.weight"] = torch.zeros(E, H * d)
        sd["layers.0.mlp.down_proj.weight"] = torch.zeros(E, inter)
        sd["norm.weight"] = tw["model.norm.weight"]
        sd["lm_head.weight"] = tw.get("lm_head.weight", tw["model.embed_tokens.weight"]).clone()
    if draft_vocab < V:
        keep = torch.sort(torch.randperm(V, generator=g)[:draft_vocab]).values
        sd["d2t"] = (keep - torch.arange(draft_vocab)).to(torch.int64)   # target id = draft id + d2t[draft id]
    rope = t.get("rope_parameters") or {}
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": E, "intermediate_size": inter, "num_attention_heads": H, "num_key_value_heads": Hkv,
        "num_hidden_layers": 1, "head_dim": d, "rms_norm_eps": t.get("rms_norm_eps", 1e-6),
        "max_position_embeddings": t["max_position_embeddings"], "vocab_size": V, "draft_vocab_size": draft_vocab,
        "rope_theta": rope.get("rope_theta", 10000.0), "rope_scaling": None, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_ids), "use_aux_hidden_state": True,
                         "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                         "use_mtp_layernorm": False, "next_layer_regular": True},
    }
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def ragged_prompts(n: int, seed: int = 0, vocab: int = VOCAB, lo: int = 1, hi: int = 12) -> list[list[int]]:
    """``n`` random prompts of lengths in ``lo..hi`` with some repetition (so ngram finds matches)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(lo, hi + 1, (1,), generator=g))
        base = torch.randint(0, vocab, (max(1, length // 2),), generator=g).tolist()
        out.append((base * 3)[:length])
    return out


def full_logits(model, ids: list[int]) -> torch.Tensor:
    """float32 ``[T, V]``: the logits after every prefix of ``ids``, from an empty cache (no speculation)."""
    from trtspec.runtime import masks

    T = len(ids)
    cache = model.new_cache(1, T + 1)
    zero = torch.zeros(1, dtype=torch.int64)
    positions, write_idx, mask = masks.chain_block(zero, torch.tensor([T]), T, cache.slots)
    with torch.no_grad():
        hidden, _ = model(torch.tensor([ids]), positions, cache, zero, write_idx, mask)
        return model.logits(hidden)[0]
