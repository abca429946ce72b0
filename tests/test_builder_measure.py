"""``trtspec build --acceptance measure`` on the demo pair: the measured profile lands in the bundle and drives
the recipe; pairs that cannot be measured here are refused before any weight loads, naming the other ways."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from trtspec.builder import measure, pipeline
from trtspec.builder.options import BuildOptions
from trtspec.builder.validate import BuildInputError
from trtspec.zoo import demo_pair

WAYS_OUT = ("--acceptance acceptance.json", "trtspec bench --server", "prior:NAME", "al=2.4@3", "curve=1.78,2.38,2.83")


def _opts(tmp_path, **kw) -> BuildOptions:
    kw.setdefault("quant", "none")  # nothing to quantize: the tests are about acceptance
    return BuildOptions(out=tmp_path / "bundle", cache_dir=tmp_path / "cache", use_cache=False, **kw)


def test_measured_acceptance_is_written_and_planned_from(tmp_path):
    from trtspec.bench.metrics import load_profile

    opts = _opts(tmp_path, acceptance="measure", measure_prompts=1, measure_new_tokens=8)
    result = pipeline.build(opts, quiet=True)
    bundle = result.out
    doc = load_profile(bundle / "acceptance.json")  # trtspec bench's own reader accepts it
    assert doc["drafter"] == "draft_model"
    assert doc["draft_len"] == 16 == len(doc["rates"])  # the largest D the planner considers
    assert doc["measurement"]["prompts"] == 11  # the first prompt of each of the sample's 11 categories
    assert doc["measurement"]["took_s"] > 0 and doc["num_steps"] > 0
    assert doc["source"].startswith("measured by trtspec build --acceptance measure in ")
    assert doc["mean_al"] == pytest.approx(1 + sum(doc["joint"]), abs=1e-6)

    # the bundle's recipe is the one planned from this file
    target, draft = demo_pair("draft_model")
    again = opts.model_copy(update={"acceptance": str(bundle / "acceptance.json"), "target": Path(target),
                                    "draft": Path(draft), "max_seq_len": 512})
    expected = pipeline.default_resolver("auto", **pipeline._recipe_kwargs(again))
    recipe = yaml.safe_load((bundle / "recipe.yaml").read_text())
    assert [(r["batch"], r["draft_len"], round(r["expected_al"], 6)) for r in recipe["rows"]] == \
        [(r["batch"], r["draft_len"], round(r["expected_al"], 6)) for r in expected.rows]
    acc = recipe["acceptance"]["draft_model"]
    assert acc["rates"] == [round(a, 6) for a in doc["rates"]]
    assert "measured by trtspec build --acceptance measure" in acc["source"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["options"]["acceptance"] == "measure" and "acceptance.json" in manifest["outputs"]
    assert "acceptance measured with the local runtime" in (bundle / "README.md").read_text()
    assert any(s.startswith("acceptance") and "took" in s for s in result.summaries)


def test_dry_run_measures_but_writes_nothing(tmp_path):
    result = pipeline.build(_opts(tmp_path, acceptance="measure", measure_prompts=1, measure_new_tokens=2),
                            dry_run=True, quiet=True)
    assert "acceptance.json" in result.plan["outputs"]
    assert any("acceptance measured" in n for n in result.plan["notes"])
    assert not (tmp_path / "bundle").exists()


def _refused(tmp_path, **kw) -> str:
    with pytest.raises(BuildInputError) as e:
        pipeline.build(_opts(tmp_path, acceptance="measure", **kw), quiet=True)
    assert not (tmp_path / "bundle").exists() and not (tmp_path / "cache").exists()
    msg = str(e.value)
    for way in WAYS_OUT:
        assert way in msg, (way, msg)
    return msg


def test_drafter_the_runtime_lacks_is_refused_with_the_ways_out(tmp_path):
    target, _ = demo_pair("draft_model")
    msg = _refused(tmp_path, target=target, drafter="sa", quant="fp8")
    assert "the local runtime has no sa drafter" in msg and "--drafter sa --draft-len" not in msg


def test_pair_too_big_for_the_device_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "available_memory", lambda device: (2**20, "test: a 1 MiB machine"))
    msg = _refused(tmp_path, quant="fp8")
    assert "does not fit on --device cpu" in msg and "float32" in msg and "1.5 headroom" in msg
    assert "--drafter draft_model --draft-len 16` on a machine where the pair fits" in msg


def test_architecture_the_runtime_does_not_run_is_refused(tmp_path):
    target, _ = demo_pair("draft_model")
    odd = tmp_path / "odd"
    shutil.copytree(target, odd)
    cfg = json.loads((odd / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (odd / "config.json").write_text(json.dumps(cfg))
    msg = _refused(tmp_path, target=odd, drafter="ngram")
    assert "GPT2LMHeadModel" in msg and "cannot run this pair" in msg


def test_inputs_the_recipe_needs_are_checked_before_measuring(tmp_path):
    with pytest.raises(BuildInputError, match="--gpu no-such-gpu: unknown GPU"):
        pipeline.build(_opts(tmp_path, acceptance="measure", gpu="no-such-gpu"), quiet=True)


def test_pair_needs_available_memory_from_parameter_bytes(tmp_path):
    from trtspec.builder.validate import validate

    target, draft = demo_pair("draft_model")
    opts = _opts(tmp_path, target=Path(target), draft=Path(draft), acceptance="measure")
    vi = validate(opts)
    job = measure.plan_measurement(opts, vi)
    params = measure.num_parameters(vi.target) + measure.num_parameters(vi.draft)
    assert job.need_bytes == int(params * 4 * measure.HEADROOM) and job.dtype == "float32"
    assert job.draft_len == 16 and job.turns == sum(len(p.turns) for p in job.prompts)
    assert params == sum(t.numel() for t in _load(target).values()) + sum(t.numel() for t in _load(draft).values())


def _load(model_dir):
    from safetensors.torch import load_file

    out = {}
    for f in Path(model_dir).glob("*.safetensors"):
        out.update(load_file(str(f)))
    return out


def test_option_is_validated_before_any_work(tmp_path):
    with pytest.raises(ValidationError, match="needs --recipe auto"):
        BuildOptions(acceptance="measure", recipe="some-book-recipe")
    with pytest.raises(ValidationError, match="--measure-prompts applies to --acceptance measure only"):
        BuildOptions(measure_prompts=2)
    from trtspec.cli.build import build

    res = CliRunner().invoke(build, ["--acceptance", "measure", "--drafter", "sa", "--target",
                                     str(demo_pair("draft_model")[0]), "--out", str(tmp_path / "b"), "--dry-run"])
    assert res.exit_code == 2 and "no sa drafter" in res.output


def test_missing_acceptance_points_at_measure(tmp_path):
    target, draft = demo_pair("draft_model")
    mine = tmp_path / "my-target"
    shutil.copytree(target, mine)  # not the demo: no shipped acceptance.json, no prior names it
    with pytest.raises(pipeline.BuildError) as e:
        pipeline.build(_opts(tmp_path, target=mine, draft=Path(draft)), dry_run=True, quiet=True)
    assert e.value.stage == "recipe" and "--acceptance measure" in str(e.value)
