"""The ONNX speculative loop (onnxruntime + the plugin nodes as Python ops) against the torch runtime."""
from __future__ import annotations

import pytest

from onnx_fixtures import eagle3_exported, eagle3_pair, exported, one_thread, pair  # noqa: F401  (fixtures)
from runtime_fixtures import ragged_prompts
from trtspec.onnx.export import export_step_graphs
from trtspec.onnx.loop import OnnxRunError, OnnxSpecDecoder
from trtspec.runtime import load_pipeline


@pytest.mark.parametrize("batch", [1, 3])
def test_onnx_speculative_loop_equals_runtime_greedy(pair, exported, batch, one_thread):
    target, _ = pair
    prompts = ragged_prompts(batch, seed=batch, lo=1, hi=9)
    reference = [ids for ids, _ in load_pipeline(target, draft_len=0).generate_ids(prompts, max_new_tokens=24)]
    out, stats = OnnxSpecDecoder(exported, threads=1).generate(prompts, 24)
    assert out == reference
    assert stats.mean_al > 1.0   # the noisy-copy draft gets drafts accepted: the verify path is exercised


def test_onnx_loop_follows_a_draft_len_schedule(pair, exported, one_thread):
    """One graph serves every tier: D = 4 at batch 1, 2 at batches 2-3 (the tree size N is a dynamic axis)."""
    prompts = ragged_prompts(3, seed=7, lo=2, hi=6)
    reference = [ids for ids, _ in load_pipeline(pair[0], draft_len=0).generate_ids(prompts, max_new_tokens=16)]
    dec = OnnxSpecDecoder(exported, draft_len_schedule={1: 4, 3: 2}, threads=1)
    out, stats = dec.generate(prompts, 16)
    assert out == reference and stats.steps > 0
    with pytest.raises(OnnxRunError, match="needs 9 nodes; the graphs were exported for at most max_nodes=5"):
        OnnxSpecDecoder(exported, draft_len=8)


def test_onnx_eagle3_loop_equals_runtime_greedy(eagle3_pair, eagle3_exported, one_thread):
    target, head = eagle3_pair
    prompts = [[7, 7, 7, 7, 9], [1], [3, 4, 3, 4, 3, 4, 3]]   # a 1-token prompt: the head has no entry yet
    pipe = load_pipeline(target, head, drafter="eagle3", draft_len=3)
    reference = [ids for ids, _ in pipe.generate_ids(prompts, max_new_tokens=20)]
    out, stats = OnnxSpecDecoder(eagle3_exported, threads=1).generate(prompts, 20)
    assert out == reference
    assert stats.mean_al > 1.0   # the echo head is accepted where the target repeats itself


def test_generate_rejects_bad_prompts(exported):
    dec = OnnxSpecDecoder(exported)
    with pytest.raises(ValueError, match="prompt token ids must be in 0..255"):
        dec.generate([[1, 256]], 4)
    with pytest.raises(ValueError, match="non-empty"):
        dec.generate([[]], 4)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        dec.generate([[1]], 0)


@pytest.mark.slow   # exports the 6-layer demo target twice (about a minute on 2 cores)
def test_onnx_loops_on_the_demo_models_equal_runtime_greedy(tmp_path):
    """The shipped demo pair and the demo EAGLE-3 head: token for token the runtime's greedy output."""
    from trtspec.zoo import demo_pair

    target, draft = demo_pair("draft_model")
    _, head = demo_pair("eagle3")
    pipe = load_pipeline(target, draft_len=0)
    prompts = [pipe.tokenizer.encode(p) for p in ("def fibonacci(n):\n    ", "import os\n\n\nclass Config:\n")]
    reference = [ids for ids, _ in pipe.generate_ids(prompts, max_new_tokens=24)]
    for drafter, src in (("draft_model", draft), ("eagle3", head)):
        export_step_graphs(target, src, tmp_path / drafter, max_nodes=5, drafter=drafter)
        out, stats = OnnxSpecDecoder(tmp_path / drafter).generate(prompts, 24, eos_ids=pipe.stop_token_ids)
        assert out == reference, drafter
        assert stats.mean_al > 1.5, drafter   # both demo drafters are accepted often on code
