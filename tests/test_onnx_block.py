"""The DFlash / DSpark step graph (``dflash_step.onnx`` / ``dspark_step.onnx``): it passes onnx.checker with the
target graph, and its onnxruntime loop drafts, step for step, the tokens the torch runtime's drafter drafts."""
from __future__ import annotations

import pytest

from block_fixtures import make_block_head
from onnx_fixtures import one_thread  # noqa: F401  (fixture)
from runtime_fixtures import make_model, ragged_prompts
from trtspec.onnx.export import ExportSpec, export_step_graphs
from trtspec.onnx.loop import OnnxSpecDecoder
from trtspec.onnx.loop_block import BlockSide
from trtspec.onnx.tiers import ExportError
from trtspec.runtime import load_pipeline
from trtspec.runtime.drafters.dflash import DFlashDrafter

HEADS = {"dflash": dict(drafter="dflash", block_size=4, layer_ids=(0, 2)),
         "dspark": dict(drafter="dspark", block_size=3, layer_ids=(1, 2), markov_head="rnn")}  # 2 = the last layer


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("onnx_block") / "target", seed=4, layers=3, init=0.15)


@pytest.fixture(scope="module", params=sorted(HEADS))
def exported_head(request, target_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"onnx_{request.param}")
    head = make_block_head(root / "head", target_dir, seed=2, **HEADS[request.param])
    out = root / "onnx"
    spec = export_step_graphs(target_dir, head, out, max_nodes=5, drafter=request.param)
    return request.param, head, out, spec


def _record(monkeypatch, cls, name):
    """Record every draft list ``cls.propose`` returns, in call order."""
    seen = []
    orig = getattr(cls, name)

    def wrapper(self, *a, **k):
        out = orig(self, *a, **k)
        seen.append(out)
        return out

    monkeypatch.setattr(cls, name, wrapper)
    return seen


def test_block_graph_loop_drafts_what_the_runtime_drafts(target_dir, exported_head, monkeypatch, one_thread):
    """Same batch, same lockstep: every proposal of the ONNX loop (one request per graph call) equals the
    runtime drafter's row for that request and step (the runtime caps D near the token budget: prefixes)."""
    drafter, head, out, spec = exported_head
    assert spec.draft_graph == f"{drafter}_step.onnx" and spec.aux_layer_ids == HEADS[drafter]["layer_ids"]
    prompts = [[5, 6, 7, 8, 9], [11], [40, 41, 40, 41, 40, 41, 40]] + ragged_prompts(2, seed=3, lo=2, hi=9)
    runtime_props = _record(monkeypatch, DFlashDrafter, "propose")
    onnx_drafts = _record(monkeypatch, BlockSide, "propose")
    pipe = load_pipeline(target_dir, head, drafter=drafter, draft_len=2)
    ref = [ids for ids, _ in pipe.generate_ids(prompts, max_new_tokens=14)]
    got, stats = OnnxSpecDecoder(out, draft_len=2, threads=1).generate(prompts, 14)
    assert got == ref
    rows = [(p.tokens[i, 1:p.num_nodes[i]].tolist()) for p in runtime_props for i in range(p.tokens.shape[0])]
    assert len(rows) == len(onnx_drafts) == len(stats.accepted)
    assert all(o[:len(r)] == r for o, r in zip(onnx_drafts, rows))
    assert sum(len(r) for r in rows) > len(rows)          # most rows drafted the full D


def test_block_graph_refuses_sampled_export(target_dir, tmp_path):
    head = make_block_head(tmp_path / "h", target_dir, drafter="dflash", block_size=4, layer_ids=(0, 1))
    with pytest.raises(ExportError, match="dflash step graphs export with --verify greedy"):
        export_step_graphs(target_dir, head, tmp_path / "o", max_nodes=5, drafter="dflash", verify="sample")
    with pytest.raises(ExportError, match="aux_layer_ids are given exactly when drafter is one of"):
        ExportSpec(max_nodes=5, num_layers=1, kv_heads=1, head_dim=4, hidden_size=4, vocab_size=8,
                   draft_num_layers=1, draft_kv_heads=1, draft_head_dim=4, draft_hidden_size=4, drafter="dspark")


@pytest.mark.slow   # exports the 6-layer demo target twice (about a minute each on 2 quiet cores)
@pytest.mark.parametrize("drafter", ["dflash", "dspark"])
def test_block_graph_loop_on_the_demo_heads_equals_runtime_greedy(tmp_path, drafter):
    from trtspec.zoo import demo_pair

    target, head = demo_pair(drafter)
    pipe = load_pipeline(target, draft_len=0)
    prompts = [pipe.tokenizer.encode(p) for p in ("def fibonacci(n):\n    ", "import os\n\n\nclass Config:\n")]
    reference = [ids for ids, _ in pipe.generate_ids(prompts, max_new_tokens=24)]
    D = load_pipeline(target, head, drafter=drafter).spec.draft_len             # the whole block
    export_step_graphs(target, head, tmp_path / drafter, max_nodes=D + 1, drafter=drafter)
    out, stats = OnnxSpecDecoder(tmp_path / drafter, draft_len=D).generate(prompts, 24, eos_ids=pipe.stop_token_ids)
    assert out == reference
    assert stats.mean_al > 1.5               # the demo heads are accepted often on code
