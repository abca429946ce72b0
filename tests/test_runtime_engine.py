"""Continuous batching, the Pipeline API, the CLI, and clear errors on bad input before generation."""
from __future__ import annotations

import json

import pytest

from runtime_fixtures import byte_tokenizer, make_eagle3, make_model, single_thread  # noqa: F401
from trtspec.runtime import load_pipeline
from trtspec.runtime.config import ModelFormatError
from trtspec.runtime.params import SamplingParams


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    t = make_model(root / "target", seed=1, init=0.1, tie=True, max_pos=64)
    return {"target": t, "draft": make_model(root / "draft", seed=3, from_model=t, noise=0.03, max_pos=64),
            "eagle": make_eagle3(root / "eagle", t, seed=4), "root": root}


@pytest.fixture(scope="module")
def pipe(dirs):
    return load_pipeline(dirs["target"], dirs["draft"], draft_len=3)


def alone(pipe, prompt, n):
    eng = pipe.engine(max_batch_size=1)
    eng.add_request("x", prompt, SamplingParams(max_new_tokens=n))
    out = []
    while eng.has_work():
        for o in eng.step():
            out += o.new_token_ids
    return out


def test_requests_joining_and_leaving_match_running_alone(pipe):
    prompts = {"a": [5, 6, 7, 5, 6], "b": [9], "c": [1, 2, 3, 1, 2, 3, 1], "d": [200, 100] * 4, "e": [42] * 3}
    budget = {"a": 20, "b": 4, "c": 15, "d": 9, "e": 12}
    eng = pipe.engine(max_batch_size=3)                   # fewer rows than requests: some wait
    out = {k: [] for k in prompts}
    joins = {0: ["a", "b"], 2: ["c", "d"], 5: ["e"]}
    step, finished = 0, []
    while step in joins or eng.has_work():
        for rid in joins.get(step, []):
            eng.add_request(rid, prompts[rid], SamplingParams(max_new_tokens=budget[rid]))
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
            if o.finished:
                finished.append(o.request_id)
        assert len(eng.running) <= 3
        step += 1
    assert sorted(finished) == sorted(prompts)
    for rid in prompts:
        assert out[rid] == alone(pipe, prompts[rid], budget[rid]), rid


def test_two_engines_of_one_pipeline_are_independent(dirs):
    for drafter, draft in (("draft_model", dirs["draft"]), ("eagle3", dirs["eagle"])):
        p = load_pipeline(dirs["target"], draft, drafter=drafter, draft_len=3)
        e1, e2 = p.engine(max_batch_size=1), p.engine(max_batch_size=1)
        e1.add_request(1, [5, 6, 7], SamplingParams(max_new_tokens=12))
        e2.add_request(2, [9, 9], SamplingParams(max_new_tokens=12))
        out, accepted = {1: [], 2: []}, {}
        while e1.has_work() or e2.has_work():
            for e in (e1, e2):
                for o in e.step():
                    out[o.request_id] += o.new_token_ids
                    accepted[o.request_id] = o.stats.accepted_tokens
        assert out[1] == alone(p, [5, 6, 7], 12) and out[2] == alone(p, [9, 9], 12)
        # same drafts as alone, so the same acceptance (a shared drafter state would change them)
        for rid, prompt in ((1, [5, 6, 7]), (2, [9, 9])):
            (ids, st), = p.generate_ids([prompt], max_new_tokens=12)
            assert accepted[rid] == st.accepted_tokens, (drafter, rid)


def test_abort_frees_the_row(pipe):
    eng = pipe.engine(max_batch_size=1)
    eng.add_request(1, [3, 4], SamplingParams(max_new_tokens=50))
    eng.step()
    eng.abort(1)
    assert not eng.has_work()
    eng.add_request(2, [7, 8], {"max_new_tokens": 5})
    with pytest.raises(ValueError, match="already in the engine"):
        eng.add_request(2, [7, 8])
    with pytest.raises(TypeError):
        eng.add_request(3, [7], {"max_tokens": 5})
    out = []
    while eng.has_work():
        for o in eng.step():
            out += o.new_token_ids
    assert out == alone(pipe, [7, 8], 5)


def test_generate_returns_text_ids_and_stats(pipe):
    gens = pipe.generate(["hello", "abcabcabc"], max_new_tokens=10)
    assert [len(g.token_ids) for g in gens] == [10, 10]
    for g in gens:
        assert g.text == pipe.tokenizer.decode(g.token_ids)
        s = g.stats
        assert s.output_tokens == 10 and s.steps >= 1
        assert s.mean_al == pytest.approx(1 + s.accepted_tokens / s.steps)
        assert sum(s.accepted_per_pos[:1]) <= s.drafts and s.accepted_tokens == sum(s.accepted_per_pos)
        assert s.draft_time_s > 0 and s.verify_time_s > 0 and s.tokens_per_s > 0
    agg = pipe.last_stats
    assert agg.output_tokens == 20 and agg.accepted_tokens == sum(g.stats.accepted_tokens for g in gens)


def test_stop_token_ends_generation(dirs):
    p = load_pipeline(dirs["target"], dirs["draft"], draft_len=3)
    first = p.generate_ids([[5, 6, 7]], max_new_tokens=8)[0][0]
    p.stop_token_ids = (first[3],)
    out = p.generate_ids([[5, 6, 7]], max_new_tokens=8)[0][0]
    assert out == first[: first.index(first[3]) + 1]


def test_context_limit_stops_generation(dirs):
    p = load_pipeline(dirs["target"], dirs["draft"], draft_len=4)
    out = p.generate_ids([[1] * 60], max_new_tokens=50)[0][0]
    assert len(out) == 64 - 60                             # max_position_embeddings = 64


# ---------------------------------------------------------------------------------------------
# bad input: each a clear error before generation starts
# ---------------------------------------------------------------------------------------------
def test_vocab_mismatch(dirs):
    d = make_model(dirs["root"] / "small_vocab", seed=5, vocab=128)
    with pytest.raises(ModelFormatError, match="vocab mismatch.*vocab_size=128"):
        load_pipeline(dirs["target"], d)


def test_tokenizer_mismatch(dirs):
    d = make_model(dirs["root"] / "other_tok", seed=6)
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    keys = list(vocab)
    vocab[keys[0]], vocab[keys[1]] = vocab[keys[1]], vocab[keys[0]]
    (d / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ModelFormatError, match="tokenizer mismatch"):
        load_pipeline(dirs["target"], d)


def test_tokenizer_larger_than_model_vocab(dirs):
    d = make_model(dirs["root"] / "tok_big", seed=7, vocab=128)
    byte_tokenizer(256).save(str(d / "tokenizer.json"))
    with pytest.raises(ModelFormatError, match="tokenizer.json has 256 tokens.*vocab_size=128"):
        load_pipeline(d, draft_len=0)


def test_prompt_longer_than_context(pipe):
    with pytest.raises(ValueError, match="prompt of 70 tokens does not fit the context of 64"):
        pipe.generate_ids([[1] * 70], max_new_tokens=4)
    with pytest.raises(ValueError, match="token ids must be in 0..255"):
        pipe.generate_ids([[256]], max_new_tokens=4)


@pytest.mark.parametrize("kw,match", [
    (dict(draft_len=17), "draft_len must be in 0..max_draft_len=16"),
    (dict(draft_len=-1), "draft_len must be in 0..max_draft_len"),
    (dict(tree="topk=8,depth=6"), "has 329 nodes, over max_tree_nodes=256"),
    (dict(tree="topk=2,depth=20"), "tree depth 20 exceeds max_draft_len=16"),
    (dict(tree="topk=2"), "tree must look like 'topk=K,depth=L'"),
    (dict(tree="topk=2,depth=2", verify="block"), "verifies chains only"),
    (dict(draft_len_schedule={4: 20}), "draft_len_schedule values must be in 0..max_draft_len=16"),
    (dict(verify="beam"), "verify must be one of"),
    (dict(drafter="medusa"), "drafter must be one of"),
    (dict(drafter="ngram", tree="topk=2,depth=2"), "ngram.*chains only"),
])
def test_spec_limits(dirs, kw, match):
    with pytest.raises(ValueError, match=match):
        load_pipeline(dirs["target"], dirs["draft"], **kw)


def test_sampled_requests_under_greedy_verify_use_sample_verification(dirs):
    """verify='greedy' with temperature > 0 runs exactly as verify='sample'; greedy requests mixed
    into a sampled batch stay token-for-token greedy."""
    greedy = load_pipeline(dirs["target"], dirs["draft"], draft_len=3, verify="greedy")
    sample = load_pipeline(dirs["target"], dirs["draft"], draft_len=3, verify="sample")
    prompts = [[5, 6, 7], [1, 2]]
    a = greedy.generate_ids(prompts, max_new_tokens=10, temperature=0.7, seed=4)
    b = sample.generate_ids(prompts, max_new_tokens=10, temperature=0.7, seed=4)
    assert [o for o, _ in a] == [o for o, _ in b]
    eng = greedy.engine(max_batch_size=2, seed=4)
    eng.add_request("t", [5, 6, 7], SamplingParams(max_new_tokens=10, temperature=1.0))
    eng.add_request("g", [1, 2], SamplingParams(max_new_tokens=10))
    out = {"t": [], "g": []}
    while eng.has_work():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    assert out["g"] == alone(greedy, [1, 2], 10)


def test_missing_or_corrupt_draft(dirs, tmp_path):
    with pytest.raises(ValueError, match="needs draft=<directory>"):
        load_pipeline(dirs["target"], None, drafter="draft_model", draft_len=2)
    with pytest.raises(ModelFormatError, match="does not exist"):
        load_pipeline(dirs["target"], tmp_path / "none")
    bad = make_model(tmp_path / "bad", seed=8)
    f = bad / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(ModelFormatError, match="corrupt or truncated"):
        load_pipeline(dirs["target"], bad)


def test_eagle3_checks(dirs, tmp_path):
    e = make_eagle3(tmp_path / "e", dirs["target"], aux_ids=(0, 5))
    with pytest.raises(ModelFormatError, match=r"eagle_aux_hidden_state_layer_ids \[5\] outside"):
        load_pipeline(dirs["target"], e, drafter="eagle3")
    with pytest.raises(ModelFormatError, match="is not an EAGLE-3 head"):
        load_pipeline(dirs["target"], dirs["draft"], drafter="eagle3")
    p = load_pipeline(dirs["target"], dirs["eagle"], drafter="eagle3", tree="topk=2,depth=2")
    ref = load_pipeline(dirs["target"], draft_len=0)
    prompts = [[3, 4, 5], [7]]          # a 1-token prompt: the head has no entry before the first step
    got = p.generate_ids(prompts, max_new_tokens=9)
    assert [o for o, _ in got] == [o for o, _ in ref.generate_ids(prompts, max_new_tokens=9)]
    assert got[1][1].steps >= 2 and got[1][1].draft_tokens > 0      # step 1 plain, later steps draft


def test_unsupported_target_architecture(dirs, tmp_path):
    import shutil

    t = tmp_path / "t"
    shutil.copytree(dirs["target"], t)
    cfg = json.loads((t / "config.json").read_text())
    cfg["architectures"] = ["MixtralForCausalLM"]
    (t / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match="unsupported architecture.*supported: LlamaForCausalLM"):
        load_pipeline(t, draft_len=0)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def test_cli_generate_json(dirs, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.generate import generate

    batch = tmp_path / "prompts.jsonl"
    batch.write_text(json.dumps({"prompt": "abcabc"}) + "\n" + json.dumps("xyz") + "\n")
    res = CliRunner().invoke(generate, ["--target", str(dirs["target"]), "--draft", str(dirs["draft"]),
                                        "--draft-len", "3", "--max-new-tokens", "6", "--batch-file", str(batch),
                                        "--json", "hello"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [g["prompt"] for g in out["generations"]] == ["hello", "abcabc", "xyz"]
    ref = load_pipeline(dirs["target"], draft_len=0).generate(["hello", "abcabc", "xyz"], max_new_tokens=6)
    assert [g["token_ids"] for g in out["generations"]] == [g.token_ids for g in ref]
    assert out["stats"]["output_tokens"] == 18 and out["stats"]["mean_al"] >= 1.0


def test_cli_errors(dirs):
    from click.testing import CliRunner

    from trtspec.cli.generate import generate

    res = CliRunner().invoke(generate, ["--target", str(dirs["target"]), "--draft", str(dirs["draft"]),
                                        "--draft-len", "99", "hi"])
    assert res.exit_code == 2 and "draft_len must be in 0..max_draft_len=16" in res.output
    res = CliRunner().invoke(generate, ["--target", str(dirs["target"])])
    assert res.exit_code == 2 and "give at least one PROMPT" in res.output


def test_compiled_ops_and_reference_give_the_same_run(dirs, monkeypatch):
    """Sampling with tree verification, block verification and greedy: the runtime on trtspec.ops
    and on the pure-torch reference produce the same tokens (the ops are bit-exact to the spec)."""
    runs = {}
    for backend in ("compiled", "reference"):
        monkeypatch.setenv("TRTSPEC_OPS", backend)
        for verify, tree in (("sample", "topk=2,depth=2"), ("block", None), ("greedy", "topk=2,depth=3")):
            p = load_pipeline(dirs["target"], dirs["draft"], draft_len=3, tree=tree, verify=verify, seed=3)
            t = 0.0 if verify == "greedy" else 1.0
            runs[backend, verify] = p.generate_ids([[1, 2, 3], [7] * 5], max_new_tokens=8, temperature=t, seed=3)
    for verify in ("sample", "block", "greedy"):
        assert [o for o, _ in runs["compiled", verify]] == [o for o, _ in runs["reference", verify]]


def test_ngram_lookup_takes_latest_longest_match():
    from trtspec.runtime.drafters.ngram import lookup

    assert lookup([1, 2, 3, 9, 1, 2, 3, 7, 2, 3], 3) == [7, 2, 3]     # suffix (2,3) -> latest earlier match
    assert lookup([5, 1, 2, 8, 8, 1, 2], 2) == [8, 8]                  # 3-gram absent, 2-gram (1,2) found
    assert lookup([4, 5, 6], 3) == []                                  # nothing repeats
    assert lookup([1, 2, 1, 2], 5) == [1, 2]                           # the continuation may run to the end
    assert lookup([1, 1, 1], 0) == []


def test_cli_schedule_option(dirs):
    from click.testing import CliRunner

    from trtspec.cli.generate import generate

    args = ["--target", str(dirs["target"]), "--draft", str(dirs["draft"]), "--max-new-tokens", "5", "--json"]
    res = CliRunner().invoke(generate, args + ["--draft-len-schedule", "1:3", "a", "b"])   # B=2 > 1 -> D=0
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["stats"]["draft_tokens"] == 0
    res = CliRunner().invoke(generate, args + ["--draft-len-schedule", "2:3", "a", "b"])
    assert json.loads(res.output)["stats"]["draft_tokens"] > 0
    res = CliRunner().invoke(generate, args + ["--draft-len-schedule", "2-3", "a"])
    assert res.exit_code == 2 and "BATCH:D" in res.output


def test_cli_without_target_uses_demo_pair_or_says_it_is_missing(dirs, monkeypatch):
    from click.testing import CliRunner

    import trtspec.zoo
    from trtspec.cli.generate import generate

    def missing():
        raise FileNotFoundError("demo model missing: zoo/demo/target has no config.json")

    monkeypatch.setattr(trtspec.zoo, "demo_paths", missing)
    res = CliRunner().invoke(generate, ["def fib("])
    assert res.exit_code == 2 and "demo pair is not installed" in res.output
    monkeypatch.setattr(trtspec.zoo, "demo_paths", lambda: (dirs["target"], dirs["draft"]))
    res = CliRunner().invoke(generate, ["--max-new-tokens", "4", "--json", "def fib("])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["draft"] == str(dirs["draft"]) and len(out["generations"][0]["token_ids"]) == 4


def test_bench_runtime_rows_and_plot(pipe, tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_runtime.py"
    spec = importlib.util.spec_from_file_location("bench_runtime", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.bench(pipe, [1, 3], max_new_tokens=6)           # raises if outputs differ from plain decoding
    assert [r["batch"] for r in rows] == [1, 3]
    for r in rows:   # every prompt of the set is decoded once at every batch size
        assert r["output_tokens"] == 6 * len(bench.PROMPTS) and r["mean_al"] >= 1.0
        assert r["speedup"] == pytest.approx(r["tokens_per_s_spec"] / r["tokens_per_s_base"])
    assert [len(g) for g in bench.batches(list(range(8)), 3)] == [3, 3, 2]
    assert bench.batches([[1], [2]], 5) == [[[1], [2], [1], [2], [1]]]
    bench.plot(rows, "test", tmp_path / "bench.png")
    assert (tmp_path / "bench.png").stat().st_size > 1000
