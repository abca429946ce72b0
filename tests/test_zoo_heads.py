"""The demo target's drafter heads (EAGLE-3, DFlash, DSpark) trained by ``trtspec train-draft``: their records,
their acceptance profiles (consistent with their counts, and at the card's goals), lossless decoding, and the
build defaults that pick them."""
from __future__ import annotations

import json

import pytest

from trtspec.zoo import HEAD_DRAFTERS, demo_acceptance_path, demo_draft, demo_paths
from trtspec.zoo.heads import DEMO_HEADS

#: AL at full block (DFlash, DSpark) / at D=4 (EAGLE-3) on the card's 32 held-out prompts
GOALS = {"eagle3": (4, 3.3), "dflash": (7, 2.0), "dspark": (8, 2.5)}


def _expected_al(rates, D):
    al, joint = 1.0, 1.0
    for r in rates[:D]:
        joint *= r
        al += joint
    return al


@pytest.mark.parametrize("drafter", HEAD_DRAFTERS)
def test_head_profile_is_consistent_and_meets_its_goal(drafter):
    prof = json.loads(demo_acceptance_path(drafter).read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["drafter"] == drafter
    c = prof["counts"]
    assert prof["rates"] == pytest.approx([a / r if r else 0.0 for a, r in zip(c["accepted"], c["reached"])])
    assert prof["mean_al"] == pytest.approx(1 + sum(c["accepted"]) / c["reached"][0])
    for d, al in prof["al_by_draft_len"].items():
        assert al == pytest.approx(_expected_al(prof["rates"], int(d)), abs=1e-5)
    assert prof["greedy_match"] == 1.0
    D, goal = GOALS[drafter]
    assert prof["al_by_draft_len"][str(D)] >= goal


@pytest.mark.parametrize("drafter", HEAD_DRAFTERS)
def test_head_record_states_how_it_was_trained(drafter):
    rec = json.loads((demo_draft(drafter) / "train_draft.json").read_text())
    assert rec["format"] == "trtspec.train_draft/v1" and rec["drafter"] == drafter
    assert rec["command"].startswith(f"trtspec train-draft --drafter {drafter} --out trtspec/zoo/demo/{drafter}")
    cfg = rec["config"]
    for key, value in DEMO_HEADS[drafter].items():
        assert cfg[key] == value, key
    assert rec["wall_s"]["train"] > 0 and rec["data"]["self_distill"] is True
    assert rec["versions"]["nvidia-modelopt"]
    from trtspec.runtime.drafters.block import vocab_digest
    from trtspec.train.derive import TargetInfo

    assert rec["target_tokenizer_vocab_sha256"] == vocab_digest(TargetInfo.read(demo_paths()[0]).tokenizer_vocab)


@pytest.mark.parametrize("drafter", HEAD_DRAFTERS)
def test_head_decodes_losslessly_on_held_out_prompts(drafter):
    from tokenizers import Tokenizer

    from trtspec.runtime import load_pipeline
    from trtspec.zoo import data

    target, _ = demo_paths()
    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    prompts = data.function_prompts(data.CorpusSplit.build(), tok, 32, 64)[::8]
    base = load_pipeline(target, draft_len=0)
    pipe = load_pipeline(target, demo_draft(drafter), drafter=drafter)
    got = [o for o, _ in pipe.generate_ids(prompts, max_new_tokens=32)]
    assert got == [o for o, _ in base.generate_ids(prompts, max_new_tokens=32)]
    assert pipe.last_stats.mean_al > 1.8


@pytest.mark.parametrize("drafter", HEAD_DRAFTERS)
def test_demo_build_options_pick_the_head_and_its_profile(tmp_path, drafter):
    from trtspec.builder.options import BuildOptions
    from trtspec.builder.pipeline import demo_options

    opts = demo_options(BuildOptions(drafter=drafter, out=tmp_path / "b", cache_dir=tmp_path / "c"))
    assert opts.draft == demo_draft(drafter) and opts.acceptance == str(demo_acceptance_path(drafter))
    with pytest.raises(ValueError, match="--target is required unless building the demo pair"):
        demo_options(BuildOptions(drafter="ngram", out=tmp_path / "b", cache_dir=tmp_path / "c"))


@pytest.mark.parametrize("drafter", ["dflash", "dspark"])
def test_demo_block_bundle_is_planned_from_the_head_profile_and_validates(tmp_path, drafter):
    """`trtspec build --drafter dflash|dspark` with no --target/--draft: the demo head, a recipe planned from its
    measured profile (D within its block), configs TensorRT-LLM's rules accept."""
    import yaml
    from click.testing import CliRunner

    from trtspec.builder.trtllm_config import validate_llm_api_yaml
    from trtspec.cli import main
    from trtspec.runtime.block_head import read_block_config

    out = tmp_path / "b"
    res = CliRunner().invoke(main, ["build", "--drafter", drafter, "--out", str(out), "--quant", "none",
                                    "--cache-dir", str(tmp_path / "c"), "--json"])
    assert res.exit_code == 0, res.output
    prof = json.loads(demo_acceptance_path(drafter).read_text())
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    assert recipe["acceptance"][drafter]["rates"] == pytest.approx(prof["rates"])
    spec = validate_llm_api_yaml(out / "llm_api.yaml").speculative_config
    drafts = read_block_config(demo_draft(drafter)).drafts
    assert spec.max_draft_len <= drafts and (drafter != "dspark" or spec.max_draft_len == drafts)
    if drafter == "dflash":
        assert (out / "vllm.yaml").is_file() and (out / "sglang.args").is_file()
    else:  # Model-Optimizer exports DSpark as DFlashDraftModel (projector_type dspark): neither engine registers it so
        readme = (out / "README.md").read_text()
        assert not (out / "vllm.yaml").exists() and not (out / "sglang.args").exists()
        assert "cannot serve --drafter dspark with this draft" in readme and "['DFlashDraftModel']" in readme


def test_acceptance_measure_runs_the_demo_block_drafter_at_its_block(tmp_path):
    from click.testing import CliRunner

    from trtspec.builder.trtllm_config import validate_llm_api_yaml
    from trtspec.cli import main

    out = tmp_path / "b"
    res = CliRunner().invoke(main, ["build", "--drafter", "dflash", "--acceptance", "measure", "--measure-prompts", "1",
                                    "--measure-new-tokens", "16", "--out", str(out), "--quant", "none",
                                    "--cache-dir", str(tmp_path / "c"), "--json"])
    assert res.exit_code == 0, res.output
    prof = json.loads((out / "acceptance.json").read_text())
    assert prof["drafter"] == "dflash" and prof["draft_len"] == 7              # a block of 8 gives 7 drafts
    assert prof["mean_al"] > 1.5
    assert validate_llm_api_yaml(out / "llm_api.yaml").speculative_config.max_draft_len <= 7
