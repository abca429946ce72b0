"""The TensorRT backend of a bundle without TensorRT: tiers from the recipe, profiles, the trtexec script,
runtime_config.json and ``trtspec build --backend tensorrt``. No engine is built or run here."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from onnx_fixtures import eagle3_pair, pair  # noqa: F401  (fixtures)
from trtspec.onnx.tiers import ExportError, Tier, tier_for_batch, tiers_from_recipe
from trtspec.recipes.recipe import Recipe


def _recipe(rows, max_batch):
    return Recipe.from_rows(rows=rows, max_batch_size=max_batch, name="t", model="m", gpu="h200", tp=1, quant="fp8",
                            drafter="draft_model", context=4096, acceptance={}, signature={}, provenance={})


def _row(batch, d, nodes=None, topk=1):
    return {"batch": batch, "draft_len": d, "num_nodes": nodes or d + 1, "topk": topk}


def test_tiers_follow_the_recipe_schedule_and_end_with_speculation_off():
    recipe = _recipe([_row(1, 4), _row(8, 2), _row(32, 1), _row(64, 0)], 64)
    assert recipe.draft_len_schedule == {1: 4, 8: 2, 32: 1}
    tiers = tiers_from_recipe(recipe, 64)
    assert tiers == [Tier(1, 1, 4, 5), Tier(2, 8, 2, 3), Tier(9, 32, 1, 2), Tier(33, 64, 0, 1)]
    assert tier_for_batch(tiers, 20).draft_len == 1 and tier_for_batch(tiers, 40).num_nodes == 1
    assert [t.opt_batch for t in tiers] == [1, 5, 21, 49]


def test_tiers_take_the_recipe_tree_where_the_schedule_kept_its_depth():
    recipe = _recipe([_row(1, 3, nodes=8, topk=2), _row(4, 3, nodes=6, topk=2), _row(16, 1)], 16)
    tiers = tiers_from_recipe(recipe, 16)
    assert tiers[0] == Tier(1, 4, 3, 8, 2)      # the larger of the tier's two trees
    assert tiers[1] == Tier(5, 16, 1, 2, 1)
    with pytest.raises(ExportError, match=r"batch tier 1..4 \(D=3\) is a tree \(topk=2, 8 nodes\); TrtSpecVerifyBlock"):
        tiers_from_recipe(recipe, 16, verify="block")


def test_tier_trees_over_the_plugin_limit_fail_at_export():
    recipe = _recipe([_row(1, 12, nodes=5000, topk=8)], 4)
    with pytest.raises(ExportError, match=r"batch tier 1..4 \(D=12\) has 5000 nodes; TrtSpecTreeMask and "
                                          "TrtSpecVerifyGreedy take 1..4096"):
        tiers_from_recipe(recipe, 4)


@pytest.mark.slow   # exports the step graphs: ~35 s on 2 shared cores
def test_backend_without_tensorrt_writes_one_profile_per_tier(pair, tmp_path):
    from trtspec.onnx.tensorrt import tensorrt_available, write_tensorrt_backend

    if tensorrt_available():
        pytest.skip("TensorRT is installed: engines are built instead of the script")
    tiers = [Tier(1, 4, 4, 5), Tier(5, 8, 2, 3), Tier(9, 16, 0, 1)]
    said = []
    cfg = write_tensorrt_backend(*pair, tmp_path / "trt", tiers=tiers, max_seq_len=256, log=said.append)
    assert cfg["engines_built"] is False and "engines need TensorRT and a GPU" in said[0]
    assert not list((tmp_path / "trt").glob("*.plan"))
    subprocess.run(["bash", "-n", str(tmp_path / "trt" / "build_engines.sh")], check=True)   # valid bash
    script = (tmp_path / "trt" / "build_engines.sh").read_text().replace('"', "").replace("\\\n    ", "")
    for name in ("target_verify", "draft_step"):
        assert f"--onnx={name}.onnx --saveEngine={name}.plan --staticPlugins=$TRTSPEC_PLUGIN_LIB" in script
    target_cmd = next(line for line in script.splitlines() if "target_verify.onnx" in line)
    # tier 0: batch 1..4 (opt 3) with a 5-node tree; tier 1: 5..8 with 3 nodes; tier 2: 9..16, one node
    assert ("--profile=0 --minShapes=tokens:1x5,parents:1x5,cache_lens:1,past_k:2x1x2x1x16,past_v:2x1x2x1x16 "
            "--optShapes=tokens:3x5,parents:3x5,cache_lens:3,past_k:2x3x2x128x16") in target_cmd
    assert "--profile=1 --minShapes=tokens:5x3," in target_cmd and "--maxShapes=tokens:8x3," in target_cmd
    assert "--profile=2 --minShapes=tokens:9x1," in target_cmd and "--maxShapes=tokens:16x1," in target_cmd
    assert "--profile=3 --minShapes=tokens:1x1," in target_cmd and "--maxShapes=tokens:1x5," in target_cmd  # prefill
    assert target_cmd.count("--profile=") == 4 and target_cmd.endswith("--fp16")
    saved = json.loads((tmp_path / "trt" / "runtime_config.json").read_text())
    assert saved == cfg
    assert [(t["batch"], t["num_nodes"], t["engine"], t["profile"]) for t in saved["tiers"]] == [
        ([1, 4], 5, "target_verify.plan", 0), ([5, 8], 3, "target_verify.plan", 1), ([9, 16], 1, "target_verify.plan", 2)]
    profiles = saved["graphs"]["target_verify"]["profiles"]
    assert profiles[1]["shapes"]["tokens"] == [[5, 3], [7, 3], [8, 3]] and profiles[3]["name"] == "prefill"
    assert saved["graphs"]["draft_step"]["profiles"][0]["shapes"]["tokens"] == [[1, 1], [8, 1], [16, 256]]


def test_backend_rejects_tiers_that_do_not_cover_the_batches(pair, tmp_path):
    from trtspec.onnx.tensorrt import write_tensorrt_backend

    with pytest.raises(ExportError, match="tiers must cover batches 1..max contiguously"):
        write_tensorrt_backend(*pair, tmp_path / "t", tiers=[Tier(2, 4, 2, 3)])
    with pytest.raises(ExportError, match="no tier drafts"):
        write_tensorrt_backend(*pair, tmp_path / "t", tiers=[Tier(1, 4, 0, 1)])
    assert not (tmp_path / "t").exists()


def _build(args, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.build import build

    out = tmp_path / "bundle"
    res = CliRunner().invoke(build, [*args, "--quant", "none", "--gpu", "h200", "--max-batch-size", "8",
                                     "--backend", "tensorrt", "--out", str(out), "--no-cache"])
    return res, out


@pytest.mark.slow   # a whole build with its export: ~30 s on 2 shared cores
def test_build_backend_tensorrt_adds_the_graphs_with_the_recipe_tiers(pair, tmp_path):
    import onnx

    target, draft = pair
    res, out = _build(["--target", str(target), "--draft", str(draft), "--drafter", "draft_model",
                       "--acceptance", "rates=0.8,0.7,0.6", "--verify", "block"], tmp_path)
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "tensorrt" / "runtime_config.json").read_text())
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    schedule = {int(k): v for k, v in recipe["trtllm"]["draft_len_schedule"].items()}
    # every batch 1..8 is served by the tier whose D is the recipe's scheduled D for it
    for b in range(1, 9):
        tier = next(t for t in cfg["tiers"] if t["batch"][0] <= b <= t["batch"][1])
        assert tier["draft_len"] == next((d for k, d in sorted(schedule.items()) if b <= k), 0)
    assert cfg["max_nodes"] == recipe["trtllm"]["max_draft_len"] + 1 and cfg["verify"] == "block"
    nodes = {n.op_type for n in onnx.load(str(out / "tensorrt" / "target_verify.onnx")).graph.node}
    assert "TrtSpecVerifyBlock" in nodes and "TrtSpecVerifyGreedy" not in nodes
    assert (out / "tensorrt" / "target_verify.onnx").is_file() and (out / "tensorrt" / "draft_step.onnx").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert any(k.startswith("tensorrt/") for k in manifest["outputs"])


@pytest.mark.slow   # a whole build with its export: ~25 s on 2 shared cores
def test_build_backend_tensorrt_exports_eagle3(eagle3_pair, tmp_path):
    target, head = eagle3_pair
    res, out = _build(["--target", str(target), "--draft", str(head), "--drafter", "eagle3",
                       "--acceptance", "rates=0.8,0.7,0.6"], tmp_path)
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "tensorrt" / "runtime_config.json").read_text())
    assert cfg["drafter"] == "eagle3" and "eagle3_step" in cfg["graphs"]
    assert (out / "tensorrt" / "eagle3_step.onnx").is_file()


def test_build_backend_tensorrt_rejects_unsupported_choices(pair, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.build import build

    target, draft = pair
    res = CliRunner().invoke(build, ["--target", str(target), "--drafter", "ngram", "--backend", "tensorrt",
                                     "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "--backend tensorrt exports step graphs for --drafter draft_model or eagle3" in res.output
    res = CliRunner().invoke(build, ["--target", str(target), "--draft", str(draft), "--quant", "nvfp4",
                                     "--backend", "tensorrt", "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "--backend tensorrt supports --quant" in res.output
    res = CliRunner().invoke(build, ["--target", str(target), "--draft", str(draft), "--verify", "tree",
                                     "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "Invalid value for '--verify'" in res.output
    res = CliRunner().invoke(build, ["--target", str(target), "--draft", str(draft), "--drafter", "eagle3",
                                     "--backend", "tensorrt", "--verify", "block", "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "exports EAGLE-3 step graphs with --verify greedy; got --verify block" in res.output
    assert not (tmp_path / "b").exists()
