"""``trtspec train-draft``: settings derived from the target, Model-Optimizer's quirks corrected, exports that
the runtime loads and decodes losslessly with, nothing half-written on interruption, and the runtime's
drafters equal to Model-Optimizer's own ``pseudo_speculative_generate``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from runtime_fixtures import make_model, single_thread  # noqa: F401
from trtspec.train import derive as Dv
from trtspec.train.config import TrainDraftConfig, TrainInputError

TEXT = ("def add(a, b):\n    return a + b\n\n", "for i in range(10):\n    print(i * i)\n",
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("train") / "target", seed=2, layers=4, init=0.1, max_pos=256)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "data.jsonl"
    rows = [{"text": TEXT[i % 3] * 3 + f"# record {i}\n" + TEXT[(i + 1) % 3]} for i in range(120)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _args(target_dir, data_file, drafter, out, *extra):
    return ["train-draft", "--target", str(target_dir), "--drafter", drafter, "--out", str(out), "--data", str(data_file),
            "--steps", "3", "--batch-size", "2", "--seq-len", "32", "--warmup", "1", "--eval-prompts", "3",
            "--eval-new-tokens", "12", "--threads", "1", "--json", *extra]


# -- settings ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, msg", [
    ({"drafter": "medusa"}, "--drafter: expected one of eagle3, dflash, dspark"),
    ({"drafter": "dflash", "block_size": 1}, "--block-size: must be >= 2"),
    ({"drafter": "dflash", "seq_len": 30, "block_size": 8}, "--seq-len 30 must be a multiple of --block-size 8"),
    ({"drafter": "eagle3", "steps": 0}, "--steps: must be >= 1"),
    ({"drafter": "eagle3", "lr": 2.0}, r"--lr: must be in \(0, 1\)"),
    ({"drafter": "eagle3", "dtype": "fp8"}, "--dtype: expected one of"),
    ({"drafter": "eagle3", "data": Path("x.csv")}, "expected a .jsonl or .parquet file"),
    ({"drafter": "dspark", "markov_head": "lstm"}, "--markov-head: expected one of"),
])
def test_config_errors_name_the_option(kw, msg):
    with pytest.raises(TrainInputError, match=msg):
        TrainDraftConfig(**kw)


def test_layer_rules_follow_the_target_depth():
    assert Dv.eagle_aux_layers(6) == (1, 3, 5) and Dv.eagle_aux_layers(32) == (1, 16, 31)
    assert Dv.block_draft_layers(6) == 2 and Dv.block_draft_layers(36) == 5 and Dv.block_draft_layers(2) == 1
    assert Dv.block_target_layers(6, 2) == (1, 4)
    assert Dv.block_target_layers(32, 5) == (1, 8, 16, 23, 30)
    assert Dv.block_target_layers(3, 1) == (1,)
    assert Dv.block_target_layers(2, 2) == (0, 1)                # too shallow for 1..L-2: every layer
    with pytest.raises(TrainInputError, match="only 2 layers"):
        Dv.block_target_layers(2, 3)


def test_derive_checks_given_layer_ids(target_dir):
    t = Dv.TargetInfo.read(target_dir)
    with pytest.raises(TrainInputError, match=r"--layer-ids \[1, 7\]: target layers \[7\] outside the target's layers 0..3"):
        Dv.derive(TrainDraftConfig(drafter="dflash", layer_ids=(1, 7), seq_len=32, block_size=4), t)
    with pytest.raises(TrainInputError, match="one target layer per draft layer"):
        Dv.derive(TrainDraftConfig(drafter="dflash", layer_ids=(1, 2), draft_layers=3, seq_len=32, block_size=4), t)
    d = Dv.derive(TrainDraftConfig(drafter="eagle3"), t)
    assert d.layer_ids == (1, 2, 3) and d.draft_layers == 1 and d.intermediate == t.intermediate


def test_mask_token_choice_is_recorded(target_dir):
    t = Dv.TargetInfo.read(target_dir)
    counts = torch.ones(t.vocab, dtype=torch.long)
    counts[17] = 0
    cfg = TrainDraftConfig(drafter="dflash", seq_len=32, block_size=4)
    assert Dv.choose_mask_token(cfg, t, counts) == (17, "the least frequent token (id 17, 0 occurrences in the data)")
    t.tokenizer_vocab = {**t.tokenizer_vocab, "<|mask|>": 9}
    assert Dv.choose_mask_token(cfg, t, counts)[0] == 9
    t.vocab_extra = None
    t2 = Dv.TargetInfo.read(target_dir)
    t2.vocab = 260                                                    # rows no token uses: the first is "added"
    tid, how = Dv.choose_mask_token(cfg, t2, torch.ones(260, dtype=torch.long))
    assert tid == 256 and how.startswith("added")
    bad = TrainDraftConfig(drafter="dflash", seq_len=32, block_size=4, mask_token="300")
    with pytest.raises(TrainInputError, match="--mask-token 300: id 300 is outside the target's vocabulary 0..255"):
        Dv.choose_mask_token(bad, t, counts)


def test_draft_vocab_maps_back_through_d2t():
    ids, d2t = Dv.choose_draft_vocab(torch.tensor([5, 9, 0, 9, 1, 7]), 3)
    assert ids.tolist() == [1, 3, 5] and (torch.arange(3) + d2t).tolist() == [1, 3, 5]


# -- Model-Optimizer quirks -----------------------------------------------------------------------------------

def _converted(target_dir, drafter, **kw):
    from trtspec.train import modelopt_model as MM

    cfg = TrainDraftConfig(drafter=drafter, seq_len=32, block_size=4, **kw)
    t = Dv.TargetInfo.read(target_dir)
    d = Dv.derive(cfg, t)
    d.draft_vocab = t.vocab
    d.mask_token_id = 5
    model = MM.load_target(t, "cpu")
    MM.convert(model, cfg, t, d)
    return model, cfg, t, d


def test_eagle3_first_layer_sees_hidden_norm_of_g_as_the_engines_do(target_dir):
    model, cfg, t, d = _converted(target_dir, "eagle3")
    em = model.eagle_module
    with torch.no_grad():                                             # make the two norms differ
        em.layers[0].input_layernorm.weight.uniform_(0.5, 2.0)
        em.layers[0].hidden_norm.weight.uniform_(0.5, 2.0)
    seen = {}
    em.layers[0].self_attn.register_forward_hook(lambda m, a, kw, out: seen.update(x=kw["hidden_states"]),
                                                 with_kwargs=True)
    model.eval()
    x = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(0))
    model.pseudo_speculative_generate(x, steps=1)
    outs = {}                                                         # layer outputs (pre final norm), as
    hooks = [model.model.layers[i].register_forward_hook(                # Model-Optimizer's aux hooks see them
        lambda m, a, o, i=i: outs.update({i: o[0] if isinstance(o, tuple) else o})) for i in d.layer_ids]
    with torch.no_grad():
        model.model(input_ids=x)
    for h in hooks:
        h.remove()
    g = em.fc(torch.cat([outs[i] for i in d.layer_ids], -1))
    E = t.hidden
    e = model.model.embed_tokens(torch.cat([x[:, 1:], x[:, :1]], 1))[:, :-1]
    torch.testing.assert_close(seen["x"][..., E:], em.layers[0].hidden_norm(g))
    torch.testing.assert_close(seen["x"][0, :-1, :E], em.layers[0].input_layernorm(e)[0])


# -- end to end -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("drafter, extra", [("dflash", ["--block-size", "4"]),
                                            ("dspark", ["--block-size", "4", "--markov-rank", "8"]),
                                            ("eagle3", ["--draft-vocab", "128", "--ttt-steps", "2"])])
def test_train_draft_exports_a_head_the_runtime_decodes_losslessly_with(target_dir, data_file, tmp_path, drafter,
                                                                        extra):
    from trtspec.cli import main
    from trtspec.runtime import load_pipeline

    out = tmp_path / "d"
    res = CliRunner().invoke(main, _args(target_dir, data_file, drafter, out, *extra))
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["acceptance.json", "config.json", "model.safetensors",
                                                     "train_draft.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["d"]                 # no temporary sibling left
    assert rec["acceptance"]["greedy_match"] == 1.0
    prof = json.loads((out / "acceptance.json").read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["drafter"] == drafter
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16"
    if drafter == "eagle3":
        assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
        assert cfg["draft_vocab_size"] == 128 and cfg["rope_scaling"] is None
        assert any(f.startswith("bos_token_id") or f.startswith("eos_token_id") for f in rec["export_fixes"]) or \
            (cfg["bos_token_id"], cfg["eos_token_id"]) == (None, None)
    else:
        assert cfg["block_size"] == 4 and cfg["dflash_config"]["target_layer_ids"] == [1]
        assert rec["derived"]["how"]["mask_token"]
    from safetensors.torch import load_file

    assert {v.dtype for v in load_file(str(out / "model.safetensors")).values() if v.is_floating_point()} == \
        {torch.bfloat16}
    prompts = [[1, 2, 3, 4, 5], [40, 41]]
    base = load_pipeline(target_dir, draft_len=0).generate_ids(prompts, max_new_tokens=16)
    got = load_pipeline(target_dir, out, drafter=drafter).generate_ids(prompts, max_new_tokens=16)
    assert [g for g, _ in got] == [b for b, _ in base]


def test_interrupted_training_leaves_nothing(target_dir, data_file, tmp_path, monkeypatch):
    from trtspec.cli import main
    from trtspec.train import loop

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "train", stop)
    out = tmp_path / "d"
    res = CliRunner().invoke(main, _args(target_dir, data_file, "dflash", out, "--block-size", "4"))
    assert res.exit_code == 130 and "left as it was" in res.output
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_refused_before_training(target_dir, data_file, tmp_path):
    from trtspec.cli import main

    r = CliRunner().invoke(main, _args(target_dir, data_file, "dflash", tmp_path / "d", "--block-size", "1"))
    assert r.exit_code == 2 and "--block-size: must be >= 2" in r.output
    r = CliRunner().invoke(main, _args(target_dir, data_file, "eagle3", tmp_path / "d", "--layer-ids", "1,9"))
    assert r.exit_code == 2 and "--layer-ids [1, 9]: aux layers [9] outside the target's layers 0..3" in r.output
    r = CliRunner().invoke(main, _args(target_dir, data_file, "dflash", tmp_path / "d", "--mask-token", "999"))
    assert r.exit_code == 2 and "--mask-token 999: id 999 is outside" in r.output
    assert not (tmp_path / "d").exists()


def test_training_does_not_import_bench(target_dir, data_file, tmp_path):
    code = ("import sys, json; from pathlib import Path; from trtspec.train.config import TrainDraftConfig; "
            "from trtspec.train.run import train_draft; "
            f"train_draft(TrainDraftConfig(drafter='dflash', steps=1, batch_size=2, seq_len=32, block_size=4, "
            f"warmup=1, data=Path({str(data_file)!r}), eval_prompts=2, eval_new_tokens=4, threads=1), "
            f"Path({str(target_dir)!r}), Path({str(tmp_path / 'd')!r}), quiet=True, log=lambda s: None); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('trtspec.bench'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# -- the runtime's drafters equal Model-Optimizer's own drafting ----------------------------------------------

@pytest.mark.parametrize("drafter", ["dflash", "dspark", "eagle3"])
def test_runtime_drafts_equal_modelopt_pseudo_speculative_generate(target_dir, tmp_path, drafter):
    from trtspec.runtime import load_pipeline
    from trtspec.runtime.drafters.base import DraftMode
    from trtspec.train import export as X

    model, cfg, t, d = _converted(target_dir, drafter, markov_head="rnn" if drafter == "dspark" else "vanilla")
    with torch.no_grad():                                 # move the freshly initialised weights off their init
        g = torch.Generator().manual_seed(1)
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.3 * torch.randn(p.shape, generator=g) * (p.std() if p.numel() > 1 else 1.0))
    model.eval()
    X.export(model, tmp_path / "h", "float32")
    X.fix(tmp_path / "h", drafter, t, "float32")
    pipe = load_pipeline(target_dir, tmp_path / "h", drafter=drafter, draft_len=3)
    for seed in range(3):
        x = torch.randint(0, 256, (1, 6 + 3 * seed), generator=torch.Generator().manual_seed(seed))
        steps = {"dflash": 3, "dspark": 4, "eagle3": 3}[drafter]
        with torch.no_grad():
            base, drafts = model.pseudo_speculative_generate(x, steps=steps)
        eng = pipe.engine(max_batch_size=1)
        eng.add_request(0, x[0].tolist() + [int(base)], pipe.params(max_new_tokens=8))
        eng._admit()
        D = min(steps, eng.drafter.max_draft_len if hasattr(eng.drafter, "max_draft_len") else steps)
        prop = eng.drafter.propose(list(eng.running), [D], 1, DraftMode(sample=False))
        assert prop.tokens[0, 1:].tolist() == drafts[0, :D].tolist()
