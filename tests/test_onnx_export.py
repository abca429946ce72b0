"""ONNX export of the step graphs with trtspec plugin nodes, and the CPU loop over them.

The plugin nodes run on CPU through onnxruntime-extensions bound to trtspec.ops; TensorRT itself
is not exercised here (see the ``tensorrt``-marked tests in test_plugins.py).
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from runtime_fixtures import make_model, ragged_prompts
from trtspec.onnx.export import ExportError, check_graph, export_step_graphs
from trtspec.onnx.loop import OnnxRunError, OnnxSpecDecoder, check_verdict
from trtspec.onnx import ort_ops
from trtspec.runtime import load_pipeline


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_pair")
    target = make_model(root / "target", seed=0, layers=2)
    # a draft that agrees with the target often: the target's weights plus noise, one layer fewer
    draft = make_model(root / "draft", seed=1, layers=2, from_model=target, noise=0.002)
    return target, draft


@pytest.fixture(scope="module")
def exported(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx_out") / "onnx"
    export_step_graphs(*pair, out, max_nodes=5)
    return out


def test_graphs_pass_full_check_and_carry_plugin_nodes(exported):
    for name, ops in (("target_verify.onnx", {"TrtSpecTreeMask", "TrtSpecVerifyGreedy"}), ("draft_step.onnx", set())):
        check_graph(exported / name)
        model = onnx.load(str(exported / name))
        custom = [n for n in model.graph.node if n.domain == "trtspec"]
        assert {n.op_type for n in custom} == ops
        for n in custom:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b"trtspec"
    spec = json.loads((exported / "onnx_spec.json").read_text())
    assert spec["max_nodes"] == 5 and spec["max_depth"] == 4


def test_batch_and_past_length_are_dynamic(exported):
    model = onnx.load(str(exported / "target_verify.onnx"))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims["tokens"] == ["B", 5]
    assert dims["past_k"][1] == "B" and dims["past_k"][3] == "P"


@pytest.mark.parametrize("batch", [1, 3])
def test_onnx_speculative_loop_equals_runtime_greedy(pair, exported, batch):
    target, _ = pair
    prompts = ragged_prompts(batch, seed=batch, lo=1, hi=9)
    reference = load_pipeline(target, draft_len=0).generate_ids(prompts, max_new_tokens=24)
    out, stats = OnnxSpecDecoder(exported).generate(prompts, 24)
    assert out == [ids for ids, _ in reference]
    assert stats.mean_al > 1.0   # the noisy-copy draft gets drafts accepted: the tree path is exercised


def test_verify_node_matches_trtspec_ops_on_a_tree(exported):
    """The exported verify graph on a branching tree gives what trtspec.ops gives on its logits."""
    sess = ort_ops.session(exported / "target_verify.onnx")
    spec = json.loads((exported / "onnx_spec.json").read_text())
    g = np.random.default_rng(0)
    B, N = 2, 5
    parents = np.array([[-1, 0, 0, 1, 1], [-1, 0, 1, 1, 0]], dtype=np.int32)
    tokens = g.integers(0, spec["vocab_size"], size=(B, N), dtype=np.int64)
    P = 4
    past = g.standard_normal((spec["num_layers"], B, spec["kv_heads"], P, spec["head_dim"])).astype(np.float32)
    lens = np.array([4, 2], dtype=np.int64)
    acc, nodes, bonus, nk, nv = sess.run(None, {"tokens": tokens, "parents": parents, "cache_lens": lens,
                                                "past_k": past, "past_v": past})
    assert nk.shape == (spec["num_layers"], B, spec["kv_heads"], N, spec["head_dim"])
    check_verdict(acc, bonus)
    for b in range(B):   # every accepted node is a child of the previous one
        path = nodes[b, : acc[b] + 1]
        assert path[0] == 0 and all(parents[b, path[i]] == path[i - 1] for i in range(1, len(path)))


def test_invalid_tree_is_reported_not_fatal(exported):
    sess = ort_ops.session(exported / "target_verify.onnx")
    spec = json.loads((exported / "onnx_spec.json").read_text())
    parents = np.array([[-1, 0, 1, 3, 2]], dtype=np.int32)   # node 3 names a later parent
    kv = np.zeros((spec["num_layers"], 1, spec["kv_heads"], 0, spec["head_dim"]), dtype=np.float32)
    acc, nodes, bonus, _, _ = sess.run(None, {"tokens": np.zeros((1, 5), dtype=np.int64), "parents": parents,
                                              "cache_lens": np.zeros(1, dtype=np.int64), "past_k": kv, "past_v": kv})
    assert acc.tolist() == [0] and bonus.tolist() == [-1] and (nodes == -1).all()
    with pytest.raises(OnnxRunError, match="rejected request"):
        check_verdict(acc, bonus)


def test_export_rejects_bad_inputs(pair, tmp_path):
    with pytest.raises(ExportError, match="max_nodes"):
        export_step_graphs(*pair, tmp_path / "x", max_nodes=5000)
    with pytest.raises(ExportError, match="quant must be one of"):
        export_step_graphs(*pair, tmp_path / "x", quant="int3")
    with pytest.raises(ExportError, match="max_depth"):
        export_step_graphs(*pair, tmp_path / "x", max_nodes=4, max_depth=4)
    bad = tmp_path / "gpt2"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "vocab_size": 256}))
    with pytest.raises(ExportError, match="GPT2LMHeadModel"):
        export_step_graphs(bad, pair[1], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_tensorrt_backend_without_tensorrt_writes_a_trtexec_script(pair, tmp_path):
    from trtspec.onnx.tensorrt import tensorrt_available, write_tensorrt_backend

    if tensorrt_available():
        pytest.skip("TensorRT is installed: engines are built instead of the script")
    said = []
    cfg = write_tensorrt_backend(*pair, tmp_path / "trt", max_nodes=5, max_batch=8, max_seq_len=256, log=said.append)
    script = (tmp_path / "trt" / "build_engines.sh").read_text()
    assert cfg["engines_built"] is False and "engines need TensorRT and a GPU" in said[0]
    for name in ("target_verify", "draft_step"):
        assert f"--onnx={name}.onnx --saveEngine={name}.plan" in script
    assert '--staticPlugins=$TRTSPEC_PLUGIN_LIB' in script.replace('"', "")
    # the profile covers batch 1..8 with the fixed tree of 5 and past 1..256
    assert "--maxShapes=tokens:8x5,parents:8x5,cache_lens:8,past_k:2x8x2x256x16" in script
    saved = json.loads((tmp_path / "trt" / "runtime_config.json").read_text())
    assert saved["graphs"]["target_verify"]["profile"]["tokens"] == [[1, 5], [4, 5], [8, 5]]


@pytest.mark.parametrize("quant,qdq", [("int8", {("", "QuantizeLinear"), ("", "DequantizeLinear")}),
                                       ("fp8", {("trt", "TRT_FP8QuantizeLinear"), ("trt", "TRT_FP8DequantizeLinear")})])
def test_modelopt_quantized_weights_export_as_qdq(pair, tmp_path, quant, qdq):
    export_step_graphs(*pair, tmp_path / quant, max_nodes=3, quant=quant)
    for name in ("target_verify.onnx", "draft_step.onnx"):
        model = onnx.load(str(tmp_path / quant / name))
        kinds = {(n.domain, n.op_type) for n in model.graph.node}
        assert qdq <= kinds, f"{name}: no {qdq} in {sorted(kinds)[:12]}"
        assert {("trtspec", "TrtSpecTreeMask"), ("trtspec", "TrtSpecVerifyGreedy")} <= kinds or name == "draft_step.onnx"
    assert json.loads((tmp_path / quant / "onnx_spec.json").read_text())["quant"] == quant


def test_int8_qdq_graph_runs_in_onnxruntime(pair, tmp_path):
    export_step_graphs(*pair, tmp_path / "q", max_nodes=3, quant="int8")
    out, _ = OnnxSpecDecoder(tmp_path / "q").generate([[1, 2, 3]], 6)
    assert len(out[0]) == 6 and all(0 <= t < 256 for t in out[0])


def test_build_backend_tensorrt_adds_the_onnx_graphs_to_the_bundle(pair, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.build import build

    target, draft = pair
    out = tmp_path / "bundle"
    res = CliRunner().invoke(build, ["--target", str(target), "--draft", str(draft), "--drafter", "draft_model",
                                     "--quant", "none", "--gpu", "h200", "--acceptance", "rates=0.8,0.7,0.6",
                                     "--max-batch-size", "8", "--backend", "tensorrt", "--out", str(out),
                                     "--no-cache"])
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "tensorrt" / "runtime_config.json").read_text())
    spec = json.loads((out / "tensorrt" / "onnx_spec.json").read_text())
    recipe_d = __import__("yaml").safe_load((out / "recipe.yaml").read_text())
    # the graphs' chain is the recipe's max_draft_len long
    assert cfg["max_nodes"] == spec["max_nodes"] == recipe_d["trtllm"]["max_draft_len"] + 1
    assert (out / "tensorrt" / "target_verify.onnx").is_file() and (out / "tensorrt" / "draft_step.onnx").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert any(k.startswith("tensorrt/") for k in manifest["outputs"])


def test_build_backend_tensorrt_rejects_unsupported_choices(pair, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.build import build

    target, draft = pair
    res = CliRunner().invoke(build, ["--target", str(target), "--drafter", "ngram", "--backend", "tensorrt",
                                     "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "--backend tensorrt exports draft_model chains" in res.output
    res = CliRunner().invoke(build, ["--target", str(target), "--draft", str(draft), "--quant", "nvfp4",
                                     "--backend", "tensorrt", "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "--backend tensorrt supports --quant" in res.output


def test_onnx_loop_on_the_demo_pair_equals_runtime_greedy(tmp_path):
    from trtspec.zoo import demo_paths

    target, draft = demo_paths()
    export_step_graphs(target, draft, tmp_path / "demo", max_nodes=5)
    pipe = load_pipeline(target, draft_len=0)
    prompts = [pipe.tokenizer.encode(p) for p in ("def fibonacci(n):\n    ", "import os\n\n\nclass Config:\n",
                                                  "    for key, value in sorted(")]
    reference = [ids for ids, _ in pipe.generate_ids(prompts, max_new_tokens=32)]
    out, stats = OnnxSpecDecoder(tmp_path / "demo").generate(prompts, 32, eos_ids=pipe.stop_token_ids)
    assert out == reference
    assert stats.mean_al > 1.5   # the distilled draft is accepted often on code
