"""Model-Optimizer fake quantization exported as Q/DQ nodes by the dynamo exporter."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from onnx_fixtures import one_thread, pair  # noqa: F401  (fixtures)
from runtime_fixtures import make_model
from trtspec.onnx.export import ExportSpec, check_graph, export_step_graphs
from trtspec.onnx.loop import OnnxSpecDecoder
from trtspec.onnx import ort_ops


def _kinds(path):
    return {(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node}


@pytest.fixture(scope="module")
def int8_graphs(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("qdq") / "int8"
    export_step_graphs(*pair, out, max_nodes=3, quant="int8")
    return out


def test_int8_exports_as_onnx_qdq_and_runs_in_onnxruntime(int8_graphs, one_thread):
    for name in ("target_verify.onnx", "draft_step.onnx"):
        assert {("", "QuantizeLinear"), ("", "DequantizeLinear")} <= _kinds(int8_graphs / name)
    assert ("trtspec", "TrtSpecVerifyGreedy") in _kinds(int8_graphs / "target_verify.onnx")
    assert ExportSpec.load(int8_graphs).quant == "int8"
    out, _ = OnnxSpecDecoder(int8_graphs, threads=1).generate([[1, 2, 3]], 6)
    assert len(out[0]) == 6 and all(0 <= t < 256 for t in out[0])


def test_int8_graph_computes_the_fake_quantized_model(pair, int8_graphs, one_thread):
    """The Q/DQ translation (per-channel weight scales along axis 0, per-tensor activations) is exact:
    onnxruntime's K/V equal the eager fake-quantized model's, and both differ from the float model's."""
    from trtspec.onnx.graphs import DraftStep
    from trtspec.onnx.qdq import quantize_for_export, to_qdq
    from trtspec.runtime.models import load_model

    spec = ExportSpec.load(int8_graphs)
    g = np.random.default_rng(0)
    feed = {"tokens": g.integers(0, 256, size=(2, 5)), "cache_lens": np.array([3, 1]),
            "past_k": g.standard_normal((spec.num_layers, 2, spec.kv_heads, 3, spec.head_dim)).astype(np.float32),
            "past_v": g.standard_normal((spec.num_layers, 2, spec.kv_heads, 3, spec.head_dim)).astype(np.float32)}
    logits, nk, _ = ort_ops.session(int8_graphs / "draft_step.onnx", threads=1).run(None, feed)
    draft = load_model(pair[1])
    float_logits = DraftStep(draft)(*[torch.from_numpy(v) for v in feed.values()])[0].detach().numpy()
    quantize_for_export(draft, "int8")
    with torch.no_grad():
        ref, ref_k, _ = DraftStep(to_qdq(draft))(*[torch.from_numpy(v) for v in feed.values()])
    np.testing.assert_allclose(logits, ref.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_allclose(nk, ref_k.numpy(), rtol=0, atol=2e-5)
    assert np.abs(logits - float_logits).max() > 1e-4    # the quantization is really in the graph


@pytest.mark.slow   # its own export: ~40 s on 2 shared cores
def test_fp8_exports_as_trt_qdq_and_passes_full_check(pair, tmp_path):
    export_step_graphs(*pair, tmp_path / "fp8", max_nodes=3, quant="fp8")
    for name in ("target_verify.onnx", "draft_step.onnx"):
        check_graph(tmp_path / "fp8" / name)
        assert {("trt", "TRT_FP8QuantizeLinear"), ("trt", "TRT_FP8DequantizeLinear")} <= _kinds(tmp_path / "fp8" / name)


@pytest.mark.slow   # AWQ search + its own export: ~45 s on 2 shared cores
def test_int4_awq_exports_blocked_weight_dequantization(tmp_path):
    """INT4-AWQ (hidden/intermediate multiples of 128): weight-only trt::DequantizeLinear, blocks of 128 along
    the input dim, one scale per block (the scale has the weight's shape with axis 1 divided by 128)."""
    target = make_model(tmp_path / "t", seed=0, layers=1, hidden=128)
    draft = make_model(tmp_path / "d", seed=1, layers=1, hidden=128, from_model=target, noise=0.002)
    export_step_graphs(target, draft, tmp_path / "int4", max_nodes=3, quant="int4_awq")
    path = tmp_path / "int4" / "target_verify.onnx"
    check_graph(path)
    model = onnx.load(str(path))
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    dq = [n for n in model.graph.node if (n.domain, n.op_type) == ("trt", "DequantizeLinear")]
    assert len(dq) == 7   # q, k, v, o, gate, up, down of the one layer (lm_head stays unquantized)
    for n in dq:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs == {"axis": 1, "block_size": 128}
        w, s = inits.get(n.input[0]), inits.get(n.input[1])
        if w is not None and s is not None:
            assert s == (w[0], w[1] // 128)


def test_quantizers_calibrate_on_the_given_token_sequences(pair):
    """With calib sequences the scales come from them (the bundle's texts), not from random ids."""
    from trtspec.onnx.qdq import quantize_for_export, to_qdq
    from trtspec.runtime.models import load_model

    scales = []
    for calib in (None, [[65, 66, 67, 32] * 8, [10, 20, 30] * 5], [[65, 66, 67, 32] * 8, [10, 20, 30] * 5]):
        m = load_model(pair[0])
        quantize_for_export(m, "int8", calib)
        scales.append(float(to_qdq(m).model.layers[0].self_attn.q_proj.input_q.scale))
    assert scales[1] == scales[2] and scales[0] != scales[1]
    with pytest.raises(ValueError, match="calib must be a non-empty list of non-empty token-id sequences"):
        quantize_for_export(load_model(pair[0]), "int8", [[]])
