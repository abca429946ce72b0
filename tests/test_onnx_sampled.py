"""Sampled and block verification in the exported graphs: in-graph target probabilities, the
version-2 TrtSpecVerifySample / TrtSpecVerifyBlock nodes, and the ONNX loop against the torch runtime."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
import torch

from onnx_fixtures import exported, one_thread, pair  # noqa: F401  (fixtures)
from runtime_fixtures import make_model, ragged_prompts
from trtspec.onnx import ort_ops
from trtspec.onnx.export import ExportSpec, check_graph, export_step_graphs
from trtspec.onnx.loop import OnnxRunError, OnnxSpecDecoder
from trtspec.onnx.loop_sampled import check_transform
from trtspec.onnx.sampling_graph import sampling_probs, sort_width
from trtspec.runtime import load_pipeline
from trtspec.runtime.sampling import probs

#: chi-square critical value, 7 degrees of freedom, significance 1e-3
CHI2_7DF_1E3 = 24.322


@pytest.fixture(scope="module")
def far_pair(pair, tmp_path_factory):
    """``pair``'s target and a draft that disagrees with it often (rejections, residual draws)."""
    draft = make_model(tmp_path_factory.mktemp("far") / "draft", seed=3, layers=2, from_model=pair[0], noise=0.05)
    return pair[0], draft


@pytest.fixture(scope="module", params=["sample", "block"])
def sampled(request, far_pair, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"onnx_{request.param}") / "onnx"
    export_step_graphs(*far_pair, out, max_nodes=5, verify=request.param)
    return request.param, out


def test_sampled_graphs_end_in_the_version_2_nodes(sampled):
    verify, out = sampled
    node = {"sample": "TrtSpecVerifySample", "block": "TrtSpecVerifyBlock"}[verify]
    for name in ("target_verify.onnx", "draft_step.onnx"):
        check_graph(out / name)
    model = onnx.load(str(out / "target_verify.onnx"))
    custom = {n.op_type: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
              for n in model.graph.node if n.domain == "trtspec"}
    assert set(custom) == {"TrtSpecTreeMask", node} and custom[node]["plugin_version"] == b"2"
    ins = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert ins["draft_probs"] == ["B", "D", 256] and ins["seed"] == ["B"] and ins["top_k"] == ["B"]
    spec = ExportSpec.load(out)
    assert spec.verify == verify and spec.sort_width == 256
    draft_outs = [o.name for o in onnx.load(str(out / "draft_step.onnx")).graph.output]
    assert draft_outs == ["logits", "probs", "new_k", "new_v"]


@pytest.mark.parametrize("kw", [dict(temperature=1.0), dict(temperature=0.7, top_k=8), dict(temperature=1.0, top_p=0.8),
                                dict(temperature=0.0)], ids=["t1", "topk8", "topp", "greedy"])
def test_sampled_loop_equals_the_runtime_for_the_same_seed(far_pair, sampled, kw, one_thread):
    """Drafts drawn from each request's generator, TrtSpecVerifySample / Block with its seed and step:
    the same tokens as the torch runtime for the same seed, ragged depths near the end included."""
    verify, out = sampled
    prompts = ragged_prompts(3, seed=5, lo=1, hi=8)
    pipe = load_pipeline(*far_pair, draft_len=4, verify=verify)
    reference = [ids for ids, _ in pipe.generate_ids(prompts, max_new_tokens=18, seed=21, **kw)]
    got, stats = OnnxSpecDecoder(out, threads=1).generate(prompts, 18, seed=21, **kw)
    assert got == reference
    if kw["temperature"] > 0:                                  # rejections and acceptances both happen
        assert 0 in stats.accepted and max(stats.accepted) > 0
    other, _ = OnnxSpecDecoder(out, threads=1).generate(prompts, 18, seed=22, **kw)
    assert (other != got) == (kw["temperature"] > 0)          # the seed matters exactly when sampling


def test_first_token_follows_the_target_distribution(far_pair, sampled, one_thread):
    """Lossless: over 320 requests (own streams) the first emitted token -- an accepted draft or a residual
    draw -- is distributed as the target's top-8 distribution at temperature 0.9 (chi-square, 7 df)."""
    from trtspec.runtime.models import load_model

    _, out = sampled
    prompt, n = [40, 2, 99], 320
    got, stats = OnnxSpecDecoder(out, threads=1).generate([prompt] * n, 5, seed=7, temperature=0.9, top_k=8)
    with torch.no_grad():
        from trtspec.onnx.graphs import DraftStep

        kv = torch.zeros(2, 1, 2, 0, 16)
        logits = DraftStep(load_model(far_pair[0]))(torch.tensor([prompt]), torch.zeros(1, dtype=torch.int64), kv, kv)[0]
    p = probs(logits, 0.9, 8)[0].numpy()
    support = np.nonzero(p)[0]
    counts = np.bincount([g[0] for g in got], minlength=p.size)
    assert counts[p == 0].sum() == 0                      # never a token outside the target's top-8
    expected = p[support] * n
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    assert support.size == 8 and chi2 < CHI2_7DF_1E3, (chi2, counts[support], expected)
    assert 0 < np.mean(stats.accepted[:n]) < 4            # the first step accepted some drafts, rejected others


def test_in_graph_probabilities_equal_the_runtime_transform(one_thread):
    """sampling_probs (one request's temperature / top-k / top-p per row) == trtspec.runtime.sampling.probs."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 3, 300, generator=g) * 3
    params = [(1.0, 0, 1.0), (0.7, 10, 1.0), (1.3, 0, 0.6), (0.0, 0, 1.0), (0.9, 40, 0.9), (2.0, 300, 0.95)]
    got = sampling_probs(logits, torch.tensor([t for t, _, _ in params]), torch.tensor([k for _, k, _ in params]),
                         torch.tensor([p for _, _, p in params]), sort_width(300))
    for b, (t, k, p) in enumerate(params):
        torch.testing.assert_close(got[b], probs(logits[b], t, k, p), rtol=0, atol=1e-6)


def test_draft_graph_probabilities_equal_the_runtime_transform(far_pair, sampled, one_thread):
    """The draft step graph's in-graph probs, a different transform per batch row, under onnxruntime."""
    from trtspec.onnx.graphs import DraftStep
    from trtspec.runtime.models import load_model

    _, out = sampled
    spec = ExportSpec.load(out)
    rng = np.random.default_rng(1)
    B = 4
    feed = {"tokens": rng.integers(0, 256, size=(B, 3)), "cache_lens": np.array([2, 0, 1, 2]),
            "past_k": rng.standard_normal((2, B, spec.draft_kv_heads, 2, 16)).astype(np.float32),
            "past_v": rng.standard_normal((2, B, spec.draft_kv_heads, 2, 16)).astype(np.float32),
            "temperature": np.array([1.0, 0.5, 0.0, 1.2], dtype=np.float32),
            "top_k": np.array([0, 5, 0, 50]), "top_p": np.array([1.0, 1.0, 1.0, 0.7], dtype=np.float32)}
    logits, q, _, _ = ort_ops.session(out / "draft_step.onnx", threads=1).run(None, feed)
    with torch.no_grad():
        ref = DraftStep(load_model(far_pair[1]))(*[torch.from_numpy(feed[k]) for k in ("tokens", "cache_lens",
                                                                                    "past_k", "past_v")])[0]
    np.testing.assert_allclose(logits, ref.numpy(), rtol=0, atol=1e-5)
    for b in range(B):
        want = probs(torch.from_numpy(logits[b]), float(feed["temperature"][b]), int(feed["top_k"][b]),
                     float(feed["top_p"][b]))
        np.testing.assert_allclose(q[b], want.numpy(), rtol=0, atol=1e-6)


def test_sampling_parameters_the_graphs_cannot_apply_are_refused(sampled, exported):
    _, out = sampled
    spec = dataclasses.replace(ExportSpec.load(out), sort_width=100)
    with pytest.raises(OnnxRunError, match="top_k=200 exceeds the graphs' in-graph sort width 100"):
        check_transform(spec, 1.0, 200, 1.0)
    check_transform(spec, 1.0, 256, 1.0)                  # top_k >= V is "off": nothing to sort
    with pytest.raises(ValueError, match="top_p must be in"):
        OnnxSpecDecoder(out).generate([[1]], 3, temperature=1.0, top_p=0.0)
    with pytest.raises(OnnxRunError, match="these graphs verify greedily"):
        OnnxSpecDecoder(exported).generate([[1]], 3, temperature=1.0)


def test_sampled_graph_equals_the_eager_step_on_a_ragged_tree(far_pair, sampled, one_thread):
    """onnxruntime on the sampled graph == the torch module it was traced from (TrtSpecVerifySample on a
    branching tree; TrtSpecVerifyBlock on a chain), with ragged draft_lens and per-request streams."""
    from trtspec.onnx.graphs import SampledVerifyStep
    from trtspec.runtime.models import load_model

    verify, out = sampled
    spec = ExportSpec.load(out)
    rng = np.random.default_rng(3)
    B, N, P = 3, 5, 4
    parents = np.array([[-1, 0, 0, 1, 1], [-1, 0, 1, 1, 0], [-1, 0, 1, 2, 3]] if verify == "sample"
                       else [[-1, 0, 1, 2, 3]] * B, dtype=np.int32)
    q = rng.dirichlet(np.ones(spec.vocab_size) * 0.3, size=(B, N - 1)).astype(np.float32)
    q /= q.sum(-1, keepdims=True)
    tokens = np.concatenate([rng.integers(0, 256, size=(B, 1)),
                             np.array([[rng.choice(256, p=q[b, j] / q[b, j].sum()) for j in range(N - 1)]
                                       for b in range(B)])], axis=1)
    feed = {"tokens": tokens, "parents": parents, "cache_lens": np.array([4, 1, 0]),
            "past_k": rng.standard_normal((2, B, 2, P, 16)).astype(np.float32),
            "past_v": rng.standard_normal((2, B, 2, P, 16)).astype(np.float32),
            "draft_probs": q, "draft_lens": np.array([4, 2, 0], dtype=np.int32),
            "seed": np.array([5, -7, 1 << 40]), "offset": np.array([0, 3, 9]),
            "temperature": np.array([1.0, 0.6, 1.0], dtype=np.float32), "top_k": np.array([0, 0, 20]),
            "top_p": np.array([1.0, 0.9, 1.0], dtype=np.float32)}
    got = ort_ops.session(out / "target_verify.onnx", threads=1).run(None, feed)
    step = SampledVerifyStep(load_model(far_pair[0]), verify=verify, width=spec.sort_width)
    with torch.no_grad():
        ref = step(*[torch.from_numpy(v) for v in feed.values()])
    for name, a, b in zip(("accepted_len", "accepted_nodes", "bonus_token"), got, ref):
        np.testing.assert_array_equal(a, b.numpy(), err_msg=name)
    assert got[0][2] == 0 and (got[1][2, 1:] == -1).all()   # no drafts: the bonus token only
