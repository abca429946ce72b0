"""``trtspec build --drafter dflash|dspark``: bundles of Model-Optimizer block heads that TensorRT-LLM's
validation rules (trtspec's typed model of its llm_args) accept, whose D stays within the head's block, and
that the runtime (and so the Triton backend) loads; ``--acceptance measure`` measures them at their block."""
from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from block_fixtures import make_block_head
from runtime_fixtures import make_model
from trtspec.builder.trtllm_config import validate_llm_api_yaml
from trtspec.cli import main
from trtspec.runtime.block_head import block_drafts


def _acceptance(path, drafter, D):
    rates = [0.8 - 0.05 * k for k in range(D)]
    path.write_text(json.dumps({"format": "trtspec.acceptance/v1", "drafter": drafter, "draft_len": D,
                                "rates": rates, "mean_al": 3.0, "num_steps": 400, "per_category": {},
                                "source": "synthetic profile for tests"}))
    return path


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("bb") / "target", hidden=128, layers=4, seed=0)


@pytest.mark.parametrize("drafter, block", [("dflash", 6), ("dspark", 4)])
def test_block_bundle_is_valid_and_loads_in_the_runtime(tmp_path, target, drafter, block):
    from trtspec.runtime import load_pipeline
    from trtspec.triton.bundle import read_bundle

    head = make_block_head(tmp_path / "head", target, drafter=drafter, block_size=block, layer_ids=(1, 2))
    D = block_drafts(drafter, block)
    acc = _acceptance(tmp_path / "acc.json", drafter, D)
    out = tmp_path / "b"
    res = CliRunner().invoke(main, ["build", "--target", str(target), "--drafter", drafter, "--draft", str(head),
                                    "--acceptance", str(acc), "--out", str(out), "--cache-dir", str(tmp_path / "c"),
                                    "--quant", "none", "--json"])
    assert res.exit_code == 0, res.output
    spec = validate_llm_api_yaml(out / "llm_api.yaml").speculative_config
    assert spec.decoding_type == {"dflash": "DFlash", "dspark": "DSpark"}[drafter]
    assert 1 <= spec.max_draft_len <= D
    raw = yaml.safe_load((out / "llm_api.yaml").read_text())["speculative_config"]
    for v in (raw.get("draft_len_schedule") or {}).values():
        assert v <= D
    assert json.loads((out / "draft" / "config.json").read_text())["dflash_config"]["target_layer_ids"] == [1, 2]
    b = read_bundle(out)
    assert b.drafter == drafter and b.draft_len <= D
    pipe = load_pipeline(b.target, b.draft, drafter=b.drafter, draft_len=b.draft_len)
    base = load_pipeline(b.target, draft_len=0)
    prompts = [[1, 2, 3, 4], [9, 9]]
    assert [g for g, _ in pipe.generate_ids(prompts, max_new_tokens=10)] == \
        [g for g, _ in base.generate_ids(prompts, max_new_tokens=10)]

