"""``trtspec build`` through the command line, with the real recipe layer."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from runtime_fixtures import make_model

from trtspec.builder.engine_facts import engine_version
from trtspec.builder.trtllm_config import validate_llm_api_yaml
from trtspec.builder.trtllm_schedule import runtime_draft_len
from trtspec.cli import main

ACCEPTANCE = {"format": "trtspec.acceptance/v1", "drafter": "draft_model", "draft_len": 6,
              "rates": [0.8, 0.75, 0.7, 0.65, 0.6, 0.55], "joint": [0.8, 0.6, 0.42, 0.273, 0.164, 0.09],
              "mean_al": 3.35, "num_steps": 500, "per_category": {}, "source": "synthetic profile for tests"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("clipair")
    acc = root / "acceptance.json"
    acc.write_text(json.dumps(ACCEPTANCE))
    return make_model(root / "target", hidden=128, seed=0), make_model(root / "draft", hidden=128, seed=1), acc


def args(pair, tmp_path, *extra):
    t, d, acc = pair
    return ["build", "--target", str(t), "--draft", str(d), "--acceptance", str(acc), "--out", str(tmp_path / "b"),
            "--cache-dir", str(tmp_path / "cache"), "--calib-samples", "4", "--calib-seq-len", "32", *extra]


def test_cli_build_matches_recipe(tmp_path, pair):
    res = CliRunner().invoke(main, args(pair, tmp_path, "--json", "--max-batch-size", "64"))
    assert res.exit_code == 0, res.output
    manifest = json.loads(res.stdout)
    b = tmp_path / "b"
    assert manifest["outputs"]["llm_api.yaml"]
    recipe = yaml.safe_load((b / "recipe.yaml").read_text())
    spec = validate_llm_api_yaml(b / "llm_api.yaml").speculative_config
    trt = recipe["trtllm"]
    assert spec.max_draft_len == trt["max_draft_len"]
    planned = ({int(k): v for k, v in trt["draft_len_schedule"].items()}
               or {trt["max_concurrency"] or 64: trt["max_draft_len"]})
    facts = engine_version("trtllm")
    raw = yaml.safe_load((b / "llm_api.yaml").read_text())["speculative_config"]
    for batch in range(1, 65):  # the planned D per batch, with 1 where it is 0 (one-engine Draft_Target, no floor)
        want = next((planned[k] for k in sorted(planned) if batch <= k), 0)
        assert runtime_draft_len(raw, batch, facts) == (want or 1)
    vl = yaml.safe_load((b / "vllm.yaml").read_text())["speculative_config"]
    buckets = {int(k): v for k, v in recipe["vllm"]["num_speculative_tokens_per_batch_size"].items()}
    ranges = vl.get("num_speculative_tokens_per_batch_size") or [(1, max(buckets), vl["num_speculative_tokens"])]
    assert ranges[0][0] == 1 and ranges[-1][1] == max(buckets)
    for batch, k in buckets.items():  # every planned bucket falls in a range with its draft length
        assert [r[2] for r in ranges if r[0] <= batch <= r[1]] == [k]
    assert "trtllm-serve ./target --config llm_api.yaml" in (b / "README.md").read_text()


def test_cli_dry_run_writes_nothing(tmp_path, pair):
    res = CliRunner().invoke(main, args(pair, tmp_path, "--dry-run", "--json"))
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["stages"][0] == "validate" and plan["quantize"][0]["modelopt_config"] == "FP8_DEFAULT_CFG"
    assert not (tmp_path / "b").exists() and not (tmp_path / "cache").exists()


def test_cli_errors_name_the_argument(tmp_path, pair):
    t, _d, _acc = pair
    res = CliRunner().invoke(main, ["build", "--target", str(t), "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--draft is required for --drafter draft_model" in res.output
    res = CliRunner().invoke(main, ["build", "--target", str(t), "--drafter", "ngram", "--tp", "3",
                                    "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--tp 3: the target's 4 attention heads do not split evenly" in res.output


def test_cli_verify_says_what_it_needs(tmp_path, pair):
    res = CliRunner().invoke(main, args(pair, tmp_path, "--smoke-test", "--quant", "none"))
    assert res.exit_code == 0, res.output
    assert "verify: skipped - this step needs" in res.output


def test_sigterm_of_cli_build_leaves_no_bundle(tmp_path, pair):
    """SIGTERM in the middle of calibration (the child announces it): exit 143, a one-line message,
    nothing written. Other stages and SIGINT: tests/test_builder_interrupt.py."""
    marker = tmp_path / "calibrating"
    cli = args(pair, tmp_path, "--quant", "fp8", "--no-cache")
    cli[cli.index("--calib-samples") + 1] = "400"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "interrupt_child.py"), "cli-calibration",
                             str(marker), "--", *cli], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() is not None else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert "interrupted by SIGTERM: nothing was written to" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibrating"]


def _demo_available() -> bool:
    try:
        from trtspec.zoo import demo_paths

        demo_paths()
        return True
    except (ImportError, FileNotFoundError):
        return False


@pytest.mark.skipif(not _demo_available(), reason="the demo pair (trtspec.zoo) is not in this checkout yet")
def test_no_argument_build_of_the_demo_pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRTSPEC_CACHE_DIR", str(tmp_path / "cache"))
    t0 = time.perf_counter()
    res = CliRunner().invoke(main, ["build"])
    seconds = time.perf_counter() - t0
    assert res.exit_code == 0, res.output
    b = tmp_path / "trtspec-out" / "demo"
    cfg = json.loads((b / "target" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_algo"] == "FP8"
    assert validate_llm_api_yaml(b / "llm_api.yaml").speculative_config.decoding_type == "Draft_Target"
    assert seconds < 180, f"demo build took {seconds:.0f} s"


def test_demo_eagle3_build(tmp_path, monkeypatch):
    """`trtspec build --drafter eagle3` with no target: the demo target + its shipped EAGLE-3 head, planned
    from the head's measured profile, emitted as a TensorRT-LLM Eagle3 speculative_config."""
    from trtspec.zoo import demo_draft

    try:
        head = demo_draft("eagle3")
    except FileNotFoundError as e:
        pytest.skip(f"demo EAGLE-3 head not installed: {e}")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["build", "--drafter", "eagle3", "--quant", "none", "--out", "b",
                                    "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    b = tmp_path / "b"
    sc = validate_llm_api_yaml(b / "llm_api.yaml").speculative_config
    assert sc.decoding_type == "Eagle3" and sc.max_draft_len >= 1
    cfg = json.loads((b / "draft" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["draft_vocab_size"] == json.loads((head / "config.json").read_text())["draft_vocab_size"]
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["options"]["acceptance"] == str(head / "acceptance.json")
    rates = yaml.safe_load((b / "recipe.yaml").read_text())["acceptance"]["eagle3"]["rates"]
    assert rates == pytest.approx(json.loads((head / "acceptance.json").read_text())["rates"], abs=1e-6)
