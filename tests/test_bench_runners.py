"""Runners, report and CLI on tiny random Llama pairs (runtime_fixtures).

The OpenAI-server test talks to a FAKE server written below (http.server) that only exercises our
client: request shape, response parsing, concurrency and Prometheus before/after deltas. It says
nothing about how vLLM, SGLang or TensorRT-LLM behave.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runtime_fixtures import make_model
from trtspec.bench import datasets as ds
from trtspec.bench import metrics as M
from trtspec.bench.runners import LocalRunner, OpenAIRunner, RunConfig, build_run_profile


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    target = make_model(root / "target", seed=0, init=0.3)
    draft = make_model(root / "draft", seed=1, from_model=target, noise=0.02)
    return target, draft


def _prompts(n_per_cat=1, cats=("math", "roleplay", "qa")):
    return ds.load_prompts("builtin", categories=list(cats), limit_per_category=n_per_cat)


def test_identical_draft_accepts_every_position(pair):
    target, _ = pair
    runner = LocalRunner.load(target, target, draft_len=3)
    run = runner.run(_prompts(), RunConfig(max_new_tokens=8, concurrency=2))
    prof = build_run_profile(run, drafter="draft_model", draft_len=3)
    assert prof.overall.rates == (1.0, 1.0, 1.0)
    assert prof.overall.mean_al == pytest.approx(4.0)
    assert set(prof.per_category) == {"math", "roleplay", "qa"}


def test_local_records_match_runtime_stats_and_multiturn(pair):
    target, draft = pair
    runner = LocalRunner.load(target, draft, draft_len=4)
    prompts = _prompts(cats=("roleplay",))  # 2 turns
    assert len(prompts[0].turns) == 2
    cfg = RunConfig(max_new_tokens=12, concurrency=1)
    run = runner.run(prompts, cfg)
    (rec,) = run.records
    assert len(run.texts[rec.question_id]) == 2
    # same requests straight through the pipeline: the record is the sum of both turns' SpecStats
    first = runner.pipeline.generate_ids([runner.pipeline.tokenizer.encode(prompts[0].turns[0])], max_new_tokens=12)
    t1, s1 = first[0]
    second_text = ds.render_turn(prompts[0], 1, [runner.pipeline.tokenizer.decode(t1)])
    (t2, s2), = runner.pipeline.generate_ids([runner.pipeline.tokenizer.encode(second_text)], max_new_tokens=12)
    assert rec.num_drafts == s1.drafts + s2.drafts
    assert rec.accepted_tokens == s1.accepted_tokens + s2.accepted_tokens
    assert rec.output_tokens == len(t1) + len(t2)
    single = runner.run(prompts, RunConfig(max_new_tokens=12, multiturn=False))
    assert single.records[0].output_tokens == len(t1)


def test_long_prompts_are_left_truncated(pair):
    target, draft = pair
    runner = LocalRunner.load(target, draft, draft_len=2)
    long = ds.Prompt("long", "qa", "", ("word " * 400,), "", "", "", False)  # 2000 bytes > 512 context
    run = runner.run([long], RunConfig(max_new_tokens=4))
    assert run.records[0].output_tokens == 4
    assert "1 prompts left-truncated" in run.source


# ------------------------------------------------------------------------------------------------
# FAKE OpenAI-compatible server: tests our client only.

class _FakeServer:
    """Answers /v1/completions with a fixed text and usage, and /metrics with vLLM-named counters
    that grow by fixed amounts per request (category encoded in the prompt's first word)."""

    PER_REQUEST = {"math": (10, 25, (8, 5, 2)), "qa": (10, 10, (6, 3, 1))}  # drafts, accepted... per_pos

    def __init__(self):
        self.lock = threading.Lock()
        self.counters = {"drafts": 100, "dtoks": 300, "acc": 50, "pos": [30, 15, 5]}
        self.bodies = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                cat = body["prompt"].split()[0]
                drafts, _, pos = fake.PER_REQUEST.get(cat, (0, 0, (0, 0, 0)))
                with fake.lock:
                    fake.bodies.append(body)
                    c = fake.counters
                    c["drafts"] += drafts
                    c["dtoks"] += 3 * drafts
                    c["acc"] += sum(pos)
                    c["pos"] = [a + b for a, b in zip(c["pos"], pos)]
                out = json.dumps({"choices": [{"text": f"answer to {cat}"}],
                                  "usage": {"completion_tokens": 7}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self):
                c = fake.counters
                lines = ["# TYPE vllm:spec_decode_num_drafts counter",
                         f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {c["drafts"]}',
                         "# TYPE vllm:spec_decode_num_draft_tokens counter",
                         f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {c["dtoks"]}',
                         "# TYPE vllm:spec_decode_num_accepted_tokens counter",
                         f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {c["acc"]}',
                         "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
                lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{k}"}} {v}'
                          for k, v in enumerate(c["pos"])]
                out = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_openai_runner_against_fake_server_parses_responses_and_deltas():
    fake = _FakeServer()
    prompts = [ds.Prompt(f"{c}-{i}", c, "", (f"{c} question {i}",), "", "", "", False)
               for c in ("math", "qa") for i in range(4)]
    runner = OpenAIRunner(fake.url, "m", draft_len=3)
    run = runner.run(prompts, RunConfig(max_new_tokens=5, concurrency=3, temperature=0.5, seed=9))
    fake.httpd.shutdown()
    assert all(b["max_tokens"] == 5 and b["temperature"] == 0.5 and b["seed"] == 9 and b["model"] == "m"
               for b in fake.bodies)
    assert sorted(r.output_tokens for r in run.records) == [7] * 8
    assert run.texts["math-0"] == ["answer to math"]
    assert run.category_deltas["math"].num_steps == 40
    assert run.category_deltas["math"].accepted_per_pos == [32, 20, 8]
    prof = build_run_profile(run, drafter="draft_model", draft_len=3)
    assert prof.per_category["math"].mean_al == pytest.approx(1 + 60 / 40)
    assert prof.per_category["qa"].rates == pytest.approx((24 / 40, 12 / 24, 4 / 12))
    assert prof.overall.mean_al == pytest.approx(1 + (60 + 40) / 80)
    assert prof.overall.num_steps == 80


def test_openai_runner_rejects_bad_url():
    with pytest.raises(ValueError, match="base_url"):
        OpenAIRunner("localhost:8000", "m")


# ------------------------------------------------------------------------------------------------

def test_report_files(tmp_path):
    from trtspec.bench import report

    recs = [M.RequestRecord("a", "coding", 4, 6, (3, 2, 1), 10, 1.0), M.RequestRecord("b", "qa", 4, 2, (2, 0, 0), 6, 0.5)]
    prof = M.build_profile(recs, drafter="draft_model", draft_len=3, source="synthetic")
    paths = report.write_outputs(tmp_path, prof, M.throughput(recs, 1.0), {"runner": "synthetic"})
    for key in ("plot_al", "plot_ak", "plot_hist"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["report"].read_text()
    assert "| coding | 1 | 4 | 2.500 |" in md and "16 output tokens" in md
    data = json.loads(paths["result"].read_text())
    assert data["acceptance"]["format"] == "trtspec.acceptance/v1"
    assert data["throughput"]["per_user_tokens_per_s"] == pytest.approx((10 + 12) / 2)


def test_bench_cli_writes_profile_that_plan_reads(pair, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main
    from trtspec.recipes.acceptance import load_profile_file

    target, draft = pair
    res = CliRunner().invoke(main, ["bench", "--target", str(target), "--draft", str(draft), "--draft-len", "3",
                                    "--category", "qa", "--category", "coding", "--limit-per-category", "2",
                                    "--code-prompts", "2", "--max-new-tokens", "6", "--concurrency", "2",
                                    "--out", str(tmp_path), "--json", "--no-plots"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["meta"]["prompts"] == 4 and set(data["per_category"]) == {"qa", "coding"}
    prof = load_profile_file(tmp_path / "acceptance.json")
    assert len(prof.rates) == 3 and prof.rates == pytest.approx(tuple(data["acceptance"]["rates"]))


def test_bench_cli_errors_name_the_option(tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main

    res = CliRunner().invoke(main, ["bench", "--target", str(tmp_path), "--dataset", str(tmp_path / "none.jsonl")])
    assert res.exit_code == 2 and "no such file" in res.output
    res = CliRunner().invoke(main, ["bench", "--server", "http://x:1", "--triton", "x:2"])
    assert res.exit_code == 2 and "exclusive" in res.output


def test_bench_and_profile_default_to_the_demo_pair(tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main
    from trtspec.zoo import demo_paths

    try:
        demo_paths()
    except FileNotFoundError as e:
        pytest.skip(f"demo pair not installed: {e}")
    res = CliRunner().invoke(main, ["bench", "--limit-per-category", "1", "--code-prompts", "1", "--single-turn",
                                    "--max-new-tokens", "8", "--concurrency", "4", "--out", str(tmp_path / "b"),
                                    "--no-plots", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data["per_category"]) == set(ds.CATEGORIES) and data["meta"]["prompts"] == 11
    res = CliRunner().invoke(main, ["profile", "--batch", "1,2", "--tokens", "1,3", "--repeats", "2",
                                    "--out", str(tmp_path / "cost_table.json")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "cost_table.json").read_text())["format"] == "trtspec.cost_table/v1"


def test_bench_eagle3_defaults_to_the_demo_head(tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main
    from trtspec.zoo import demo_draft

    try:
        head = demo_draft("eagle3")
    except FileNotFoundError as e:
        pytest.skip(f"demo EAGLE-3 head not installed: {e}")
    res = CliRunner().invoke(main, ["bench", "--drafter", "eagle3", "--draft-len", "3", "--category", "coding",
                                    "--limit-per-category", "2", "--code-prompts", "0", "--single-turn",
                                    "--max-new-tokens", "8", "--out", str(tmp_path / "b"), "--no-plots", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["meta"]["draft"] == str(head) and data["meta"]["drafter"] == "eagle3"
    assert json.loads((tmp_path / "b" / "acceptance.json").read_text())["drafter"] == "eagle3"


def test_profile_eagle3_head(tmp_path):
    """`trtspec profile --drafter eagle3` (demo head by default) times engine steps with the head; the
    forward method, which loads --draft as a model, is refused for a head before any work."""
    from click.testing import CliRunner

    from trtspec.cli import main
    from trtspec.zoo import demo_draft

    try:
        demo_draft("eagle3")
    except FileNotFoundError as e:
        pytest.skip(f"demo EAGLE-3 head not installed: {e}")
    res = CliRunner().invoke(main, ["profile", "--drafter", "eagle3", "--method", "forward",
                                    "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--drafter eagle3" in res.output and "--method engine" in res.output
    assert not (tmp_path / "x.json").exists()
    res = CliRunner().invoke(main, ["profile", "--drafter", "eagle3", "--batch", "1", "--tokens", "1,3",
                                    "--repeats", "2", "--clock", "cpu", "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "c.json").read_text())
    assert table["method"] == "engine" and "eagle3" in table["source"] and set(table["draft"]) == {"1"}
