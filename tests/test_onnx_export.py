"""The dynamo export of the step graphs: plugin nodes, schemas, dynamic axes, exactness, errors.

The plugin nodes run on CPU through onnxruntime-extensions bound to trtspec.ops; TensorRT itself
is not exercised here (see the ``tensorrt``-marked tests in test_plugins.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from onnx_fixtures import eagle3_exported, eagle3_pair, exported, one_thread, pair  # noqa: F401  (fixtures)
from trtspec.onnx import ort_ops
from trtspec.onnx.export import ExportError, ExportSpec, check_graph, export_step_graphs
from trtspec.onnx.loop import OnnxRunError, check_verdict
from trtspec.onnx.tiers import MAX_BLOCK_DRAFT, MAX_NODES, check_tree_size

REPO = Path(__file__).resolve().parents[1]


def _dims(values):
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def test_graphs_pass_full_check_and_carry_plugin_nodes(exported):
    for name, ops in (("target_verify.onnx", ["TrtSpecTreeMask", "TrtSpecVerifyGreedy"]), ("draft_step.onnx", [])):
        check_graph(exported / name)
        model = onnx.load(str(exported / name))
        custom = [n for n in model.graph.node if n.domain == "trtspec"]
        assert sorted(n.op_type for n in custom) == ops
        for n in custom:
            attrs = _attrs(n)
            assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b"trtspec"
        assert {o.domain: o.version for o in model.opset_import}.get("trtspec", 1) == 1
    spec = json.loads((exported / "onnx_spec.json").read_text())
    assert spec["max_nodes"] == 5 and spec["verify"] == "greedy" and spec["drafter"] == "draft_model"


def test_batch_tree_size_and_past_length_are_dynamic(exported):
    model = onnx.load(str(exported / "target_verify.onnx"))
    ins, outs = _dims(model.graph.input), _dims(model.graph.output)
    assert ins["tokens"] == ["B", "N"] and ins["parents"] == ["B", "N"] and ins["cache_lens"] == ["B"]
    assert ins["past_k"][1] == "B" and ins["past_k"][3] == "P"
    assert outs["accepted_nodes"] == ["B", "N"] and outs["new_k"][3] == "N"
    draft = _dims(onnx.load(str(exported / "draft_step.onnx")).graph.input)
    assert draft["tokens"] == ["B", "T"]


@pytest.mark.parametrize("B,N,P", [(1, 1, 1), (2, 3, 16), (3, 7, 5)])
def test_target_graph_equals_the_eager_step(pair, exported, B, N, P, one_thread):
    """onnxruntime on the exported graph == the torch module it was traced from, on shapes other than the
    example's, with different past K and V (a graph that read one for the other would fail)."""
    from trtspec.onnx.graphs import TargetVerifyStep
    from trtspec.runtime.models import load_model

    g = np.random.default_rng(B * 100 + N)
    spec = ExportSpec.load(exported)
    feed = {"tokens": g.integers(0, spec.vocab_size, size=(B, N)),
            "parents": np.array([[-1] + [int(g.integers(0, i)) for i in range(1, N)] for _ in range(B)], dtype=np.int32),
            "cache_lens": g.integers(0, P + 1, size=B),
            "past_k": g.standard_normal((spec.num_layers, B, spec.kv_heads, P, spec.head_dim)).astype(np.float32),
            "past_v": g.standard_normal((spec.num_layers, B, spec.kv_heads, P, spec.head_dim)).astype(np.float32)}
    got = ort_ops.session(exported / "target_verify.onnx", threads=1).run(None, feed)
    with torch.no_grad():
        ref = TargetVerifyStep(load_model(pair[0]))(*[torch.from_numpy(feed[k]) for k in feed])
    for name, a, b in zip(("accepted_len", "accepted_nodes", "bonus_token", "new_k", "new_v"), got, ref):
        assert a.shape == tuple(b.shape), name
        np.testing.assert_allclose(a, b.numpy(), rtol=0, atol=1e-5, err_msg=name)


def test_verify_node_matches_trtspec_ops_on_a_tree(exported):
    """The exported verify graph on a branching tree follows parent links and agrees with trtspec.ops."""
    sess = ort_ops.session(exported / "target_verify.onnx")
    spec = ExportSpec.load(exported)
    g = np.random.default_rng(0)
    B, N, P = 2, 5, 4
    parents = np.array([[-1, 0, 0, 1, 1], [-1, 0, 1, 1, 0]], dtype=np.int32)
    tokens = g.integers(0, spec.vocab_size, size=(B, N), dtype=np.int64)
    kv = g.standard_normal((2, spec.num_layers, B, spec.kv_heads, P, spec.head_dim)).astype(np.float32)
    acc, nodes, bonus, nk, nv = sess.run(None, {"tokens": tokens, "parents": parents,
                                                "cache_lens": np.array([4, 2], dtype=np.int64),
                                                "past_k": kv[0], "past_v": kv[1]})
    assert nk.shape == (spec.num_layers, B, spec.kv_heads, N, spec.head_dim) and nodes.shape == (B, N)
    check_verdict(acc, bonus)
    for b in range(B):   # every accepted node is a child of the previous one; -1 after the path
        path = nodes[b, : acc[b] + 1]
        assert path[0] == 0 and all(parents[b, path[i]] == path[i - 1] for i in range(1, len(path)))
        assert (nodes[b, acc[b] + 1:] == -1).all()


def test_invalid_tree_is_reported_not_fatal(exported):
    sess = ort_ops.session(exported / "target_verify.onnx")
    spec = ExportSpec.load(exported)
    parents = np.array([[-1, 0, 1, 3, 2]], dtype=np.int32)   # node 3 names a later parent
    kv = np.zeros((spec.num_layers, 1, spec.kv_heads, 1, spec.head_dim), dtype=np.float32)
    acc, nodes, bonus, _, _ = sess.run(None, {"tokens": np.zeros((1, 5), dtype=np.int64), "parents": parents,
                                              "cache_lens": np.zeros(1, dtype=np.int64), "past_k": kv, "past_v": kv})
    assert acc.tolist() == [0] and bonus.tolist() == [-1] and (nodes == -1).all()
    with pytest.raises(OnnxRunError, match="rejected request"):
        check_verdict(acc, bonus)


def test_eagle3_target_graph_outputs_the_captured_layers(eagle3_pair, eagle3_exported, one_thread):
    """aux_hidden = the outputs of eagle_aux_hidden_state_layer_ids, as the runtime's target captures them."""
    from trtspec.runtime import masks
    from trtspec.runtime.models import load_model

    spec = ExportSpec.load(eagle3_exported)
    assert spec.drafter == "eagle3" and spec.aux_layer_ids == (0, 1) and spec.draft_num_layers == 1
    check_graph(eagle3_exported / "eagle3_step.onnx")
    model = onnx.load(str(eagle3_exported / "target_verify.onnx"))
    assert _dims(model.graph.output)["aux_hidden"] == ["B", "N", 2 * spec.hidden_size]
    tokens = np.array([[5, 17, 99, 3, 250, 8]], dtype=np.int64)
    T = tokens.shape[1]
    kv = np.zeros((spec.num_layers, 1, spec.kv_heads, 1, spec.head_dim), dtype=np.float32)
    out = ort_ops.session(eagle3_exported / "target_verify.onnx", threads=1).run(None, {
        "tokens": tokens, "parents": np.array([[-1] + list(range(T - 1))], dtype=np.int32),
        "cache_lens": np.zeros(1, dtype=np.int64), "past_k": kv, "past_v": kv.copy()})
    target = load_model(eagle3_pair[0])
    cache = target.new_cache(1, T)
    positions, write_idx, mask = masks.chain_block(torch.zeros(1, dtype=torch.int64), torch.tensor([T]), T, T)
    with torch.no_grad():
        _, aux = target(torch.from_numpy(tokens), positions, cache, torch.zeros(1, dtype=torch.int64), write_idx, mask,
                        spec.aux_layer_ids)
    np.testing.assert_allclose(out[5], aux.numpy(), rtol=0, atol=1e-5)


def test_export_rejects_bad_inputs_before_writing(pair, tmp_path):
    with pytest.raises(ExportError, match="5000 nodes; TrtSpecTreeMask and TrtSpecVerifyGreedy take 1..4096"):
        export_step_graphs(*pair, tmp_path / "x", max_nodes=5000)
    with pytest.raises(ExportError, match="quant must be one of"):
        export_step_graphs(*pair, tmp_path / "x", quant="int3")
    with pytest.raises(ExportError, match="drafter must be one of"):
        export_step_graphs(*pair, tmp_path / "x", drafter="ngram")
    with pytest.raises(ExportError, match="int4_awq needs hidden and intermediate sizes that are multiples of 128"):
        export_step_graphs(*pair, tmp_path / "x", quant="int4_awq")
    bad = tmp_path / "gpt2"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "vocab_size": 256}))
    with pytest.raises(ExportError, match="GPT2LMHeadModel"):
        export_step_graphs(bad, pair[1], tmp_path / "x")
    assert not any(tmp_path.glob("x*")) and not any(tmp_path.glob(".x.*"))


def test_tree_size_limits_name_the_plugin():
    check_tree_size(4096, "greedy")
    with pytest.raises(ExportError, match="4097 nodes; TrtSpecTreeMask and TrtSpecVerifySample take 1..4096"):
        check_tree_size(4097, "sample")
    with pytest.raises(ExportError, match="TrtSpecVerifyBlock verifies chains only: use --verify sample"):
        check_tree_size(13, "block", topk=3)
    with pytest.raises(ExportError, match="drafts 1025 tokens; TrtSpecVerifyBlock takes chains of at most 1024"):
        check_tree_size(1026, "block")
    with pytest.raises(ExportError, match="verify must be one of"):
        check_tree_size(5, "typical")


def test_plugin_limits_agree_with_the_kernels_header():
    header = (REPO / "cpp" / "include" / "trtspec" / "kernels.h").read_text()
    consts = {k: int(v) for k, v in re.findall(r"constexpr int32_t (kMax\w+) = (\d+);", header)}
    assert set(MAX_NODES.values()) == {consts["kMaxNodes"]}
    assert MAX_BLOCK_DRAFT == consts["kMaxBlockDraft"]


def test_no_torchscript_export_path_is_left():
    """The exporter is torch.onnx.export(dynamo=True) only: no TorchScript symbolics or dynamo=False anywhere."""
    for path in (REPO / "trtspec" / "onnx").glob("*.py"):
        text = path.read_text()
        assert "register_custom_op_symbolic" not in text and "dynamo=False" not in text, path
