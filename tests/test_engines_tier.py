"""The ``engines`` tier: every bundle case, built from the demo pair by ``trtspec build``, fed to the released
engines' own config code (vLLM 0.33.0's ``serve`` parser, ``create_engine_config`` and scheduler expansion; SGLang
0.5.23's ``prepare_server_args``, ``resolve_once``, ``check_server_args`` and model configs; TensorRT-LLM's
``llm_args.py`` at main-0004396, the one stored whole: ``update_llm_args_with_extra_dict`` and ``TorchLlmArgs``) through
``tools/engines/check_<engine>.py``. Each case asserts that the engine accepts the config and changed none of the
fields trtspec wrote, that what it runs at every batch size is what trtspec's resolution rule says, and, where the
engine cannot serve the drafter, that no config is written and the README says why.

Set up the engines first: ``bash tools/engines/setup.sh`` (skipped with that hint otherwise).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from engines_helpers import (TRTLLM_CHECKED, check_bundles, engine_python, unchanged_sglang, unchanged_trtllm,
                             unchanged_vllm)

from trtspec.builder import pipeline
from trtspec.builder.engine_facts import DEFAULT_VERSION, engine_version
from trtspec.builder.engine_schedules import sglang_per_batch, vllm_per_batch
from trtspec.builder.options import BuildOptions
from trtspec.builder.sglang_config import SglangArgs
from trtspec.builder.trtllm_config import validate_llm_api_yaml
from trtspec.builder.trtllm_schedule import runtime_draft_len
from trtspec.zoo import demo_pair

pytestmark = [pytest.mark.engines, pytest.mark.slow]

RATES = "rates=0.7,0.6,0.5,0.45,0.4,0.35,0.3"
BLOCK = 4  # block size of the DFlash / DSpark drafts below
#: case -> build options (beyond the demo target and an h200 plan at max_batch_size 64).
CASES = {
    "draft_model-greedy": dict(drafter="draft_model"),
    "draft_model-sample": dict(drafter="draft_model", verify="sample"),
    "draft_model-block": dict(drafter="draft_model", verify="block"),
    "eagle3-greedy": dict(drafter="eagle3"),
    "eagle3-block": dict(drafter="eagle3", verify="block"),
    "eagle3-adaptive": dict(drafter="eagle3", speculation="adaptive"),
    "ngram": dict(drafter="ngram", acceptance=RATES),
    "sa": dict(drafter="sa", acceptance=RATES),
    "dspark": dict(drafter="dspark", acceptance=RATES),
    "dspark-adaptive": dict(drafter="dspark", acceptance=RATES, speculation="adaptive", verify="block"),
    "dflash": dict(drafter="dflash", acceptance=RATES),
    # the demo target's own heads, Model-Optimizer exports trained by `trtspec train-draft` (no --target / --draft)
    "dflash-demo": dict(drafter="dflash"),
    "dspark-demo": dict(drafter="dspark"),
    "draft_model-ep": dict(drafter="draft_model", tp=2, ep=2, quant="none", acceptance=RATES),  # MoE target below
    # the DeepSeek-V3-layout demo (MLA, MoE, its MTP layer re-attached unquantized by the build)
    "mtp-fp8": dict(drafter="mtp", quant="fp8"),
    "mtp-nvfp4": dict(drafter="mtp", quant="nvfp4", gpu="b200"),   # FP4 tensor cores: Blackwell
    "mtp-ep": dict(drafter="mtp", quant="fp8", tp=2, ep=2),
}


def block_draft(root: Path, drafter: str) -> Path:
    """A DFlash / DSpark draft in the layout both engines register (DFlashDraftModel; Qwen3DSparkModel), block
    size 4 reading target layers 1 and 4 of the demo target; the demo draft's weights stand in for its own (the
    engines' config code reads config.json only)."""
    _, draft = demo_pair("draft_model")
    cfg = json.loads((Path(draft) / "config.json").read_text())
    cfg.update(model_type="qwen3")
    if drafter == "dflash":
        cfg.update(architectures=["DFlashDraftModel"],
                   dflash_config={"target_layer_ids": [1, 4], "block_size": BLOCK, "mask_token_id": 0})
    else:
        cfg.update(architectures=["Qwen3DSparkModel"], dspark_block_size=BLOCK, dspark_target_layer_ids=[1, 4],
                   dspark_noise_token_id=0, dspark_markov_rank=8)
    root.mkdir(parents=True)
    shutil.copy(Path(draft) / "model.safetensors", root / "model.safetensors")
    (root / "config.json").write_text(json.dumps(cfg, indent=1))
    return root


def demo_block_facts(drafter: str) -> tuple[int, int, int | None]:
    """(block size, mask token, Markov rank) of the demo target's DFlash / DSpark head, read from its config.json."""
    cfg = json.loads((Path(demo_pair(drafter)[1]) / "config.json").read_text())
    return cfg["block_size"], cfg["dflash_config"]["mask_token_id"], cfg["dflash_config"].get("markov_rank")


def moe_target(root: Path) -> Path:
    """The demo target's files under a Mixtral config (4 routed experts, top-2): the engines' config code reads
    config.json only, and expert parallelism needs experts to spread (built with --quant none: the weights are the
    dense demo's)."""
    target, _ = demo_pair("draft_model")
    shutil.copytree(target, root)
    cfg = json.loads((root / "config.json").read_text())
    cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)
    (root / "config.json").write_text(json.dumps(cfg, indent=1))
    return root


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Every case built once with the real pipeline (planner, Model-Optimizer FP8, emitters)."""
    root = tmp_path_factory.mktemp("engines")
    target, _ = demo_pair("draft_model")
    out = {}
    for name, kw in CASES.items():
        kw = dict(kw)
        if kw["drafter"] in ("ngram", "sa", "dflash", "dspark") and not name.endswith("-demo"):
            kw["target"] = Path(target)
        if kw["drafter"] in ("dflash", "dspark") and not name.endswith("-demo"):
            kw["draft"] = block_draft(root / f"{name}-draft", kw["drafter"])
        if kw.get("ep", 1) > 1 and kw["drafter"] != "mtp":   # the DeepSeek-V3-layout demo has its own experts
            kw.update(target=moe_target(root / f"{name}-target"), draft=Path(demo_pair("draft_model")[1]))
        opts = BuildOptions(out=root / name, cache_dir=root / "cache", max_batch_size=64, calib_samples=4,
                            calib_seq_len=64, **kw)
        pipeline.build(opts, quiet=True)
        out[name] = root / name
    return out


def summary(engine: str, bundles: dict[str, Path], results: dict[str, dict], config: str, changed) -> None:
    """One line per case in the test log: accepted / changed (fields) / refused (the engine's message) / no config."""
    for name in CASES:
        r = results.get(name)
        if r is None:
            print(f"{engine} {name}: no {config} (the README says which engine cannot serve it and why)")
        elif not r["accepted"]:
            print(f"{engine} {name}: refused: {r['error'].splitlines()[0][:200]}")
        else:
            diffs = changed(bundles[name], r)
            print(f"{engine} {name}: " + (f"changed: {diffs}" if diffs else "accepted unchanged"))


@pytest.fixture(scope="module")
def vllm_results(bundles) -> dict[str, dict]:
    with_cfg = [n for n, b in bundles.items() if (b / "vllm.yaml").is_file()]
    results = dict(zip(with_cfg, check_bundles([bundles[n] for n in with_cfg], "vllm")))
    summary("vllm", bundles, results, "vllm.yaml", unchanged_vllm)
    return results


@pytest.fixture(scope="module")
def sglang_results(bundles) -> dict[str, dict]:
    with_cfg = [n for n, b in bundles.items() if (b / "sglang.args").is_file()]
    results = dict(zip(with_cfg, check_bundles([bundles[n] for n in with_cfg], "sglang")))
    aliases = engine_version("sglang", DEFAULT_VERSION["sglang"]).get("algorithm_aliases")
    summary("sglang", bundles, results, "sglang.args", lambda b, r: unchanged_sglang(b, r, aliases))
    return results


def cannot_serve(bundle: Path, label: str) -> bool:
    readme = (bundle / "README.md").read_text()
    section = readme.split("## Engines that cannot serve this bundle", 1)
    return len(section) == 2 and f"- {label} cannot serve" in section[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllm_accepts_the_bundle_unchanged(case, bundles, vllm_results):
    bundle, vv = bundles[case], engine_version("vllm", DEFAULT_VERSION["vllm"])
    if not (bundle / "vllm.yaml").is_file():
        assert cannot_serve(bundle, vv.label), f"{case}: no vllm.yaml and the README does not say why"
        return
    r = vllm_results[case]
    data = yaml.safe_load((bundle / "vllm.yaml").read_text())
    if data["speculative_config"]["method"] == "suffix" and not r["accepted"]:
        # suffix decoding needs its extra package; the bundle names the one vLLM names in its refusal
        package = vv["suffix_package"]
        assert f"pip install {package}" in r["error"] and f"pip install {package}" in (bundle / "README.md").read_text()
        pytest.skip(f"{package} is not installed in the vLLM environment: its refusal names the package the README "
                    "names")
    assert r["accepted"], f"{case}: vLLM refused vllm.yaml: {r['error']}"
    assert unchanged_vllm(bundle, r) == []
    runs = r["resolved"]["draft_len_per_batch"]  # the scheduler's own expansion, when the ranges survived
    k = r["resolved"]["speculative_config"]["num_speculative_tokens"]
    assert (runs or [k] * data["max_num_seqs"]) == vllm_per_batch(data, vv)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sglang_accepts_the_bundle_unchanged(case, bundles, sglang_results):
    bundle, sv = bundles[case], engine_version("sglang", DEFAULT_VERSION["sglang"])
    if not (bundle / "sglang.args").is_file():
        assert cannot_serve(bundle, sv.label), f"{case}: no sglang.args and the README does not say why"
        return
    r = sglang_results[case]
    assert r["accepted"], f"{case}: SGLang refused sglang.args: {r['error']}"
    assert unchanged_sglang(bundle, r, sv.get("algorithm_aliases")) == []
    args = SglangArgs.from_text((bundle / "sglang.args").read_text(), sv.version)
    adaptive = json.loads((bundle / "sglang_adaptive.json").read_text()) if args.speculative_adaptive else None
    ours = sglang_per_batch(args, args.max_running_requests, adaptive)
    if adaptive is not None:
        assert r["resolved"]["adaptive_steps_per_batch"] == ours
    else:
        assert r["resolved"]["adaptive_steps_per_batch"] is None and len(set(ours)) == 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_trtllm_yaml_still_validates(case, bundles):
    validate_llm_api_yaml(bundles[case] / "llm_api.yaml")


def test_engines_are_the_released_versions():
    """The environments hold the releases the facts files describe (no main-branch engine in the tier)."""
    for engine, version in (("vllm", DEFAULT_VERSION["vllm"]), ("sglang", DEFAULT_VERSION["sglang"])):
        py = engine_python(engine, version)
        if py is None:
            pytest.skip(f"{engine} {version} is not set up: bash tools/engines/setup.sh {engine}")
        import subprocess

        got = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version('{engine}'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert got == version == engine_version(engine, version).package.split("==")[1]


@pytest.fixture(scope="module")
def trtllm_results(bundles) -> dict[str, dict]:
    results = dict(zip(CASES, check_bundles([bundles[n] for n in CASES], "trtllm", TRTLLM_CHECKED)))
    summary(f"trtllm {TRTLLM_CHECKED}", bundles, results, "llm_api.yaml", unchanged_trtllm)
    return results


@pytest.mark.parametrize("case", sorted(CASES))
def test_trtllm_accepts_the_bundle_unchanged(case, bundles, trtllm_results):
    """TensorRT-LLM's own merge and validators accept ``llm_api.yaml`` and keep every field trtspec wrote; the
    engine's mode predicates are the facts trtspec planned with, and the draft length it runs at every batch (from
    what it resolved, e.g. max_concurrency turned into a schedule) is the one trtspec's rule gives for the file."""
    r, tv = trtllm_results[case], engine_version("trtllm", TRTLLM_CHECKED)
    assert r["accepted"], f"{case}: TensorRT-LLM refused llm_api.yaml: {r['error']}"
    assert unchanged_trtllm(bundles[case], r) == []
    data = yaml.safe_load((bundles[case] / "llm_api.yaml").read_text())
    written, spec = data["speculative_config"], r["resolved"]["speculative_config"]
    dtype = written["decoding_type"]
    assert spec["_mode"]["support_dynamic_draft_len"] == (dtype in tv["dynamic_draft_len"])
    assert spec["_mode"]["use_one_engine"] == (dtype in tv["one_engine"])
    resolved = {**spec, "draft_len_schedule": {int(k): v for k, v in (spec["draft_len_schedule"] or {}).items()}
                or None}
    for b in range(1, data["max_batch_size"] + 1):
        assert runtime_draft_len(resolved, b, tv) == runtime_draft_len(written, b, tv), (case, b)


@pytest.mark.parametrize("case", sorted(CASES))
def test_trtllm_rewrites_what_trtspec_leaves_to_it(case, bundles, trtllm_results):
    """Fields trtspec does not write because the engine sets them: a chain's max_total_draft_tokens is max_draft_len;
    DFlash / DSpark read their layer ids, mask token and (DSpark) block size from the draft's config.json."""
    written = yaml.safe_load((bundles[case] / "llm_api.yaml").read_text())["speculative_config"]
    spec = trtllm_results[case]["resolved"]["speculative_config"]
    assert "max_total_draft_tokens" not in written
    assert spec["max_total_draft_tokens"] == written["max_draft_len"]
    block, mask, rank = (BLOCK, 0, 8) if not case.endswith("-demo") else demo_block_facts(case.split("-")[0])
    if written["decoding_type"] == "DSpark":
        assert "block_size" not in written and (spec["block_size"], spec["max_draft_len"]) == (block, block)
        assert (spec["target_layer_ids"], spec["mask_token_id"], spec["markov_rank"]) == ([1, 4], mask, rank)
    if written["decoding_type"] == "DFlash":
        assert (spec["target_layer_ids"], spec["mask_token_id"]) == ([1, 4], mask)


def test_trtllm_refuses_or_overrides_what_trtspec_must_not_write(bundles, tmp_path):
    """The checker can fail: variants of real bundles' llm_api.yaml that trtspec never writes are refused by the
    engine with its own message, or rewritten (a chain's max_total_draft_tokens)."""
    variants = {  # name -> (bundle, change to speculative_config)
        "total_tokens": ("draft_model-greedy", {"max_total_draft_tokens": 6}),
        "spelling": ("draft_model-greedy", {"decoding_type": "DraftTarget"}),
        "smallest_key": ("draft_model-greedy", {"draft_len_schedule": {4: 2, 64: 1}}),
        "both_limits": ("eagle3-greedy", {"max_concurrency": 32}),
        "dspark_block": ("dspark", {"block_size": 2}),
    }
    dirs = []
    for name, (case, change) in variants.items():
        d = tmp_path / name
        d.mkdir()
        for sub in ("target", "draft"):
            if (bundles[case] / sub).exists():
                (d / sub).symlink_to(bundles[case] / sub)
        data = yaml.safe_load((bundles[case] / "llm_api.yaml").read_text())
        data["speculative_config"].update(change)
        (d / "llm_api.yaml").write_text(yaml.safe_dump(data))
        dirs.append(d)
    got = dict(zip(variants, check_bundles(dirs, "trtllm", TRTLLM_CHECKED)))
    assert got["total_tokens"]["accepted"]
    assert got["total_tokens"]["resolved"]["speculative_config"]["max_total_draft_tokens"] == 3
    assert not got["spelling"]["accepted"] and "Draft_Target" in got["spelling"]["error"]
    assert not got["smallest_key"]["accepted"] and "must equal max_draft_len" in got["smallest_key"]["error"]
    assert not got["both_limits"]["accepted"] and "mutually exclusive" in got["both_limits"]["error"]
    assert not got["dspark_block"]["accepted"] and "DSpark block_size must equal max_draft_len" in \
        got["dspark_block"]["error"]
