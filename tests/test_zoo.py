"""The shipped demo pair (trtspec.zoo): loading, checksums, tokenizer, measurement code, smoke training."""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import pytest
import torch

from trtspec.zoo import DEMO_DIR, MODEL_CARD, demo_acceptance_path, demo_paths
from trtspec.zoo import data as zdata
from trtspec.zoo.card import read_checksums, verify_checksums
from trtspec.zoo.spec_eval import acceptance_profile, greedy_generate, speculative_generate
from trtspec.zoo.train import ModelShape, TrainConfig, main

CODE_SAMPLES = [
    "def f(x):\n    return x ** 2  # square\n",
    "class A:\n\tdef __init__(self):\n\t\tself.s = 'héllo, wörld ✓'\n",
    "    if a and not b:\n        raise ValueError(f\"bad {a!r}\")\n\n\n",
    '"""Docstring with <tags> and \\\\ backslashes."""\nimport os\r\n',
]


def _tiny_llama(seed: int, layers: int, vocab: int = 97):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


# ---------------------------------------------------------------- shipped checkpoints

def test_demo_pair_loads_offline_with_transformers():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir, draft_dir = demo_paths()
    tok = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    ids = torch.tensor([tok.encode("def add(a, b):\n    return a + b\n")])
    shapes = {}
    for d in (target_dir, draft_dir):
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "generation_config.json"):
            assert (d / f).is_file(), f"{d / f} missing"
        model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True, dtype=torch.float32)
        cfg = model.config
        assert cfg.architectures == ["LlamaForCausalLM"]
        assert cfg.hidden_size % 128 == 0 and cfg.intermediate_size % 128 == 0  # AWQ block 128
        assert cfg.vocab_size == len(tok)
        logits = model(input_ids=ids).logits
        assert logits.shape == (1, ids.shape[1], cfg.vocab_size) and torch.isfinite(logits).all()
        shapes[d.name] = cfg
    t, dr = shapes["target"], shapes["draft"]
    assert t.num_key_value_heads < t.num_attention_heads  # GQA
    assert dr.num_hidden_layers < t.num_hidden_layers
    assert (target_dir / "tokenizer.json").read_bytes() == (draft_dir / "tokenizer.json").read_bytes()


def test_demo_checksums_match_model_card():
    assert MODEL_CARD.is_file()
    rows = read_checksums(MODEL_CARD)
    assert "demo/target/model.safetensors" in rows and "demo/draft/model.safetensors" in rows
    assert verify_checksums(MODEL_CARD, DEMO_DIR) == []


def test_checksum_verification_detects_a_changed_file(tmp_path):
    demo = tmp_path / "demo"
    (demo / "target").mkdir(parents=True)
    f = demo / "target" / "config.json"
    f.write_text("{}")
    card = tmp_path / "MODEL_CARD.md"
    digest = hashlib.sha256(b"{}").hexdigest()
    card.write_text(f"| `demo/target/config.json` | 2 | {digest} |\n")
    assert verify_checksums(card, demo) == []
    f.write_text("[]")
    assert verify_checksums(card, demo) == ["demo/target/config.json: size/sha256 differ from MODEL_CARD.md"]
    (demo / "extra.bin").write_bytes(b"x")
    assert set(verify_checksums(card, demo)) == {"demo/target/config.json: size/sha256 differ from MODEL_CARD.md",
                                                 "demo/extra.bin: not listed in MODEL_CARD.md"}
    f.unlink()
    assert "demo/target/config.json: listed in MODEL_CARD.md but missing" in verify_checksums(card, demo)


def test_demo_size_under_30_mb():
    """The demo pair and its three heads (EAGLE-3, DFlash, DSpark; about 2.5-3 MB each in bfloat16) stay small
    enough to ship in the package."""
    total = sum(p.stat().st_size for p in DEMO_DIR.rglob("*") if p.is_file())
    assert total <= 30 * 1024 * 1024, f"demo pair is {total / 1e6:.1f} MB"


def test_demo_acceptance_profile_is_consistent_and_meets_goal():
    prof = json.loads(demo_acceptance_path().read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["drafter"] == "draft_model"
    d = prof["draft_len"]
    assert len(prof["rates"]) == len(prof["joint"]) == d and prof["num_steps"] > 100
    # joint_k = prod_{i<=k} a_i and E[AL] = 1 + sum_k joint_k
    prod = 1.0
    for a, j in zip(prof["rates"], prof["joint"]):
        prod *= a
        assert j == pytest.approx(prod, abs=1e-5)
    assert prof["mean_al"] == pytest.approx(1 + sum(prof["joint"]), abs=1e-5)
    assert prof["per_category"]["coding"]["mean_al"] == prof["mean_al"]
    meas = json.loads((DEMO_DIR / "measurements.json").read_text())
    al = {int(k): v for k, v in meas["acceptance"]["al_by_draft_len"].items()}
    assert sorted(al) == list(range(1, d + 1))
    assert all(1.0 <= al[k] <= k + 1 for k in al)
    assert al[4] >= 2.0, f"quality goal: AL >= 2.0 at D=4, measured {al[4]:.3f}"


# ---------------------------------------------------------------- tokenizer and data

@pytest.mark.parametrize("text", CODE_SAMPLES)
def test_tokenizer_round_trips_code(text):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    target_dir, _ = demo_paths()
    raw = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    ids = raw.encode(text, add_special_tokens=False).ids
    assert raw.decode(ids, skip_special_tokens=False) == text
    hf = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    assert hf.encode(text, add_special_tokens=False) == ids
    assert hf.decode(ids) == text


def test_tokenizer_special_tokens():
    from transformers import AutoTokenizer

    target_dir, _ = demo_paths()
    hf = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    assert hf.eos_token == hf.pad_token == "<|endoftext|>" and hf.eos_token_id == 0
    for i, t in enumerate(zdata.SPECIAL_TOKENS):
        assert hf.convert_tokens_to_ids(t) == i
        assert hf.encode(t, add_special_tokens=False) == [i]  # never split into bytes
    chat = hf.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|user|>\nhi<|endoftext|>\n<|assistant|>\n"
    gen = json.loads((target_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 0


def test_split_is_deterministic_disjoint_and_matches_model_card():
    a, b = zdata.CorpusSplit.build(), zdata.CorpusSplit.build()
    assert a == b
    assert not set(a.train) & set(a.heldout)
    assert all(zdata.is_heldout(f) for f in a.heldout) and not any(zdata.is_heldout(f) for f in a.train)
    assert list(a.train) == sorted(a.train)
    assert not any(p in zdata.EXCLUDED_DIRS for f in a.train for p in f.split("/")[:-1])
    assert [p.relative_to(a.root).as_posix() for p in zdata.heldout_files()] == list(a.heldout)
    meas = json.loads((DEMO_DIR / "measurements.json").read_text())["corpus"]
    if meas["python"] != zdata.python_version():
        pytest.skip(f"demo pair was trained on Python {meas['python']}, running {zdata.python_version()}")
    assert a.summary()["train_list_sha256"] == meas["train_list_sha256"]
    assert a.summary()["heldout_list_sha256"] == meas["heldout_list_sha256"]


def test_is_heldout_rejects_bad_modulus():
    with pytest.raises(ValueError, match="heldout_modulus must be >= 2"):
        zdata.is_heldout("os.py", 1)


# ---------------------------------------------------------------- measurement code

@pytest.mark.parametrize("draft_len", [1, 3, 5])
def test_speculative_output_equals_target_greedy(draft_len):
    target, draft = _tiny_llama(0, 2), _tiny_llama(1, 1)
    for prompt in ([5, 17, 3], list(range(10, 41))):
        ref = greedy_generate(target, prompt, 23)
        res = speculative_generate(target, draft, prompt, draft_len, 23)
        assert res.tokens == ref
        assert all(0 <= n <= draft_len for n in res.accepted)
        # every verification step emits n + 1 tokens; the prefill emits 1; the last step may be cut
        assert 1 + sum(n + 1 for n in res.accepted) >= 23 > sum(n + 1 for n in res.accepted[:-1])


def test_draft_identical_to_target_accepts_everything():
    target = _tiny_llama(0, 2)
    res = speculative_generate(target, target, [1, 2, 3, 4], 4, 31)
    assert res.accepted == [4] * 6  # 1 + 6 * 5 = 31 tokens
    assert res.tokens == greedy_generate(target, [1, 2, 3, 4], 31)


def test_speculative_stops_at_eos():
    target = _tiny_llama(0, 2)
    ref = greedy_generate(target, [7, 8, 9], 40)
    eos = ref[5]
    first = ref.index(eos)
    res = speculative_generate(target, _tiny_llama(1, 1), [7, 8, 9], 3, 40, eos_id=eos)
    assert res.tokens == ref[: first + 1]


def test_acceptance_profile_from_counts():
    prof = acceptance_profile([0, 1, 2, 2, 4], 4, source="unit")
    assert prof["joint"] == [0.8, 0.6, 0.2, 0.2]
    assert prof["rates"] == [0.8, 0.75, pytest.approx(1 / 3, abs=1e-6), 1.0]
    assert prof["mean_al"] == pytest.approx((1 + 2 + 3 + 3 + 5) / 5)
    with pytest.raises(ValueError, match="accepted"):
        acceptance_profile([], 4, source="unit")


# ---------------------------------------------------------------- training script

def test_config_validation_names_the_argument():
    with pytest.raises(ValueError, match="seq_len"):
        TrainConfig(seq_len=1024, max_position=512)
    with pytest.raises(ValueError, match="hidden .* divisible by heads"):
        ModelShape(hidden=250, layers=1, heads=8, kv_heads=2, intermediate=256)
    with pytest.raises(ValueError, match="save_dtype"):
        TrainConfig(save_dtype="float16")
    with pytest.raises(SystemExit):
        main(["--smoke"])  # --smoke without --out must not overwrite the shipped pair


def test_smoke_training_run(tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "demo"
    t0 = time.perf_counter()
    assert main(["--smoke", "--out", str(out)]) == 0
    assert time.perf_counter() - t0 < 60
    assert not (tmp_path / "demo.partial").exists()
    for name in ("target", "draft"):
        m = AutoModelForCausalLM.from_pretrained(out / name, local_files_only=True)
        assert m.config.architectures == ["LlamaForCausalLM"]
    meas = json.loads((out / "measurements.json").read_text())
    assert meas["config"]["target_steps"] == 20
    assert math.isfinite(meas["heldout_loss"]["target"]) and meas["heldout_ppl"]["target"] > 1
    prof = json.loads((out / "acceptance.json").read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["draft_len"] == 4
    assert all(v == 1.0 for v in meas["acceptance"]["greedy_match"].values())
    assert not any((out / d).exists() for d in ("eagle3", "dflash", "dspark"))   # the smoke run trains no heads
    card = tmp_path / "demo_MODEL_CARD.md"
    assert verify_checksums(card, out) == []


# ---------------------------------------------------------------- runtime and CLI on the demo pair

def test_runtime_pipeline_on_demo_pair_matches_reference():
    """trtspec.runtime decodes the shipped pair exactly like the zoo's own greedy reference."""
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    from trtspec.runtime import load_pipeline

    target_dir, draft_dir = demo_paths()
    tok = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    prompts = zdata.function_prompts(zdata.CorpusSplit.build(), tok, num_prompts=3, prompt_tokens=64)
    pipe = load_pipeline(target_dir, draft_dir, drafter="draft_model", draft_len=4)
    outs = pipe.generate_ids(prompts, max_new_tokens=32)
    target = AutoModelForCausalLM.from_pretrained(target_dir, local_files_only=True, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, local_files_only=True, dtype=torch.float32)
    for p, (ids, stats) in zip(prompts, outs):
        ref = speculative_generate(target, draft, p, 4, 32, eos_id=0)
        assert ids == ref.tokens == greedy_generate(target, p, 32, eos_id=0)
        # same verification steps; only the last one may differ (the runtime drafts no further than the budget)
        assert stats.steps == len(ref.accepted)
        assert sum(ref.accepted[:-1]) <= stats.accepted_tokens <= sum(ref.accepted)
    assert pipe.last_stats.mean_al > 1.0


def test_generate_cli_defaults_to_demo_pair():
    from click.testing import CliRunner

    from trtspec.cli import main as cli

    target_dir, draft_dir = demo_paths()
    prompt = "class Stack:\n    def __init__(self, name):\n        self.name = name\n        self"
    res = CliRunner().invoke(cli, ["generate", prompt, "--max-new-tokens", "16", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert Path(out["target"]) == target_dir and Path(out["draft"]) == draft_dir
    gen = out["generations"][0]
    assert 1 <= len(gen["token_ids"]) <= 16 and gen["text"].strip()
    assert out["stats"]["mean_al"] >= 1.0
    # default sampling is greedy: the text is the target's own greedy continuation
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tok = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    target = AutoModelForCausalLM.from_pretrained(target_dir, local_files_only=True, dtype=torch.float32)
    ref = greedy_generate(target, tok.encode(prompt).ids, 16, eos_id=0)
    assert gen["token_ids"] == ref and gen["text"] == tok.decode(ref)
