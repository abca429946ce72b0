"""The sampled plugin nodes under onnxruntime (trtspec.onnx.ort_ops): one TrtSpecVerifySample /
TrtSpecVerifyBlock node per graph, run by onnxruntime-extensions, equals trtspec.ops on the same
inputs; an invalid request gets the plugins' documented verdict and leaves its neighbours'
verdicts unchanged (per-request streams); the node passes the ONNX checker against the OpSchema
built from the plugin YAML."""
from __future__ import annotations

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_extensions")

from onnx import TensorProto, helper  # noqa: E402

from trtspec import ops  # noqa: E402

B, D, V = 6, 5, 40


def _model(op, inputs, outputs, **attrs):
    from trtspec.onnx_schemas import register_schemas

    register_schemas()
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], domain="trtspec",
                            plugin_version="2", plugin_namespace="trtspec", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("trtspec", 1)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _session(model, tmp_path):
    from trtspec.onnx.ort_ops import session

    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return session(path)


def _inputs(seed=0, tree=True):
    g = torch.Generator().manual_seed(seed)
    parents = torch.full((B, D + 1), -1, dtype=torch.int32)
    for i in range(1, D + 1):
        parents[:, i] = torch.randint(max(0, i - 3), i, (B,), generator=g, dtype=torch.int32) if tree else i - 1
    target = torch.softmax(2 * torch.randn(B, D + 1, V, generator=g), -1)
    draft = torch.softmax(2 * torch.randn(B, D, V, generator=g), -1)
    tokens = torch.multinomial(draft.reshape(-1, V), 1, generator=g).view(B, D)
    seed_ = torch.randint(-2**63, 2**63 - 1, (B,), generator=g)
    offset = torch.randint(0, 1000, (B,), generator=g)
    lens = torch.tensor([5, 0, 3, 5, 1, 4], dtype=torch.int32)
    return tokens, parents, target, draft, seed_, offset, lens


SAMPLE_IO = ([("draft_tokens", TensorProto.INT64, ["B", D]), ("parents", TensorProto.INT32, ["B", D + 1]),
              ("target_probs", TensorProto.FLOAT, ["B", D + 1, V]), ("draft_probs", TensorProto.FLOAT, ["B", D, V]),
              ("seed", TensorProto.INT64, ["B"]), ("offset", TensorProto.INT64, ["B"]),
              ("draft_lens", TensorProto.INT32, ["B"])],
             [("accepted_len", TensorProto.INT32, ["B"]), ("accepted_nodes", TensorProto.INT32, ["B", D + 1]),
              ("bonus_token", TensorProto.INT64, ["B"])])
BLOCK_IO = ([SAMPLE_IO[0][0]] + SAMPLE_IO[0][2:],
            [("accepted_len", TensorProto.INT32, ["B"]), ("bonus_token", TensorProto.INT64, ["B"])])


def _feed(names, tensors):
    return {n: t.numpy() for n, t in zip(names, tensors)}


@pytest.mark.parametrize("wor", [0, 1])
def test_sample_node_under_onnxruntime_equals_the_op(tmp_path, wor):
    tokens, parents, target, draft, seed, offset, lens = _inputs(wor)
    sess = _session(_model("TrtSpecVerifySample", *SAMPLE_IO, max_depth=-1, siblings_without_replacement=wor), tmp_path)
    out = sess.run(None, _feed([n for n, _, _ in SAMPLE_IO[0]], (tokens, parents, target, draft, seed, offset, lens)))
    ref = ops.verify_sample(tokens, parents, target, draft, seed, offset, bool(wor), lens)
    for o, r in zip(out, ref):
        assert np.array_equal(o, r.numpy())


def test_sample_node_gives_an_invalid_request_the_verdict_and_keeps_its_neighbours(tmp_path):
    tokens, parents, target, draft, seed, offset, lens = _inputs(3)
    ref = ops.verify_sample(tokens, parents, target, draft, seed, offset, False, lens)
    target[2, 1, 0] = float("nan")    # request 2 uses node 1's row: invalid
    tokens[4, 0] = V + 5              # request 4's used draft: invalid
    tokens[1, 3] = -9                 # request 1 uses no draft: padding, still valid
    parents[0, 3] = 3                 # request 0: not topological
    lens[5] = D + 1                   # request 5: draft_lens past D
    sess = _session(_model("TrtSpecVerifySample", *SAMPLE_IO, max_depth=-1, siblings_without_replacement=0), tmp_path)
    acc, nodes, bonus = sess.run(None, _feed([n for n, _, _ in SAMPLE_IO[0]],
                                             (tokens, parents, target, draft, seed, offset, lens)))
    bad = [0, 2, 4, 5]
    assert (acc[bad] == 0).all() and (bonus[bad] == -1).all() and (nodes[bad] == -1).all()
    good = [1, 3]
    assert np.array_equal(acc[good], ref[0][good].numpy()) and np.array_equal(bonus[good], ref[2][good].numpy())
    assert np.array_equal(nodes[good], ref[1][good].numpy())


def test_block_node_under_onnxruntime_equals_the_op_and_flags_invalid_requests(tmp_path):
    tokens, _, target, draft, seed, offset, lens = _inputs(5, tree=False)
    names = [n for n, _, _ in BLOCK_IO[0]]
    sess = _session(_model("TrtSpecVerifyBlock", *BLOCK_IO), tmp_path)
    out = sess.run(None, _feed(names, (tokens, target, draft, seed, offset, lens)))
    ref = ops.verify_block(tokens, target, draft, seed, offset, lens)
    for o, r in zip(out, ref):
        assert np.array_equal(o, r.numpy())
    draft[3, 2] *= 2.0                # request 3 (5 drafts) reads draft row 2: sums to 2
    draft[1, 2] = -1.0                # request 1 (no drafts) never reads it
    acc, bonus = sess.run(None, _feed(names, (tokens, target, draft, seed, offset, lens)))
    assert acc[3] == 0 and bonus[3] == -1
    keep = [0, 1, 2, 4, 5]
    assert np.array_equal(acc[keep], ref[0][keep].numpy()) and np.array_equal(bonus[keep], ref[1][keep].numpy())


def test_the_schema_takes_int32_draft_tokens_and_an_omitted_draft_lens():
    """The OpSchema (from the YAML) is the plugins': int32 ids and no draft_lens are valid ONNX."""
    inputs = [("draft_tokens", TensorProto.INT32, ["B", D])] + BLOCK_IO[0][1:-1]
    _model("TrtSpecVerifyBlock", inputs, BLOCK_IO[1])
    bad = [("draft_tokens", TensorProto.FLOAT, ["B", D])] + BLOCK_IO[0][1:]
    with pytest.raises((onnx.checker.ValidationError, onnx.shape_inference.InferenceError), match="draft_tokens"):
        _model("TrtSpecVerifyBlock", bad, BLOCK_IO[1])
