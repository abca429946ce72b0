"""``trtspec bench --drafter dflash|dspark`` on the local runtime: AL per category, profile of the block drafter."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from block_fixtures import make_block_head
from runtime_fixtures import make_model, single_thread  # noqa: F401
from trtspec.cli import main


@pytest.mark.parametrize("drafter", ["dflash", "dspark"])
def test_bench_reports_al_per_category_for_a_block_drafter(tmp_path, drafter):
    target = make_model(tmp_path / "target", seed=1, layers=2, init=0.2)
    head = make_block_head(tmp_path / "head", target, drafter=drafter, block_size=4, layer_ids=(0, 1))
    res = CliRunner().invoke(main, ["bench", "--target", str(target), "--draft", str(head), "--drafter", drafter,
                                    "--draft-len", "3", "--limit-per-category", "1", "--code-prompts", "0",
                                    "--max-new-tokens", "8", "--single-turn", "--no-plots", "--json",
                                    "--unquantized-target", "none", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    prof = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    assert prof["drafter"] == drafter and prof["draft_len"] == 3
    assert len(prof["per_category"]) >= 5
    for c in prof["per_category"].values():
        assert 1.0 <= c["mean_al"] <= 4.0
    assert out["meta"]["drafter"] == drafter and out["per_category"].keys() == prof["per_category"].keys()
    r = CliRunner().invoke(main, ["bench", "--target", str(target), "--draft", str(head), "--drafter", drafter,
                                  "--draft-len", "5", "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "draft_len 5 exceeds" in r.output
