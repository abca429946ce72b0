"""``trtspec bench`` on a quantized target: a real ``trtspec build --quant fp8`` bundle of a tiny pair,
benched side by side with the unquantized source the bundle's manifest records."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runtime_fixtures import make_model, single_thread  # noqa: F401
from trtspec.bench import datasets as ds
from trtspec.bench import metrics as M
from trtspec.bench import report
from trtspec.bench.runners import LocalRunner, RunConfig, build_run_profile, unquantized_baseline
from trtspec.cli import main

pytest.importorskip("modelopt.torch.quantization")

ACCEPTANCE = {"format": "trtspec.acceptance/v1", "drafter": "draft_model", "draft_len": 3,
              "rates": [0.8, 0.7, 0.6], "joint": [0.8, 0.56, 0.336], "mean_al": 2.7, "num_steps": 100,
              "per_category": {}, "source": "synthetic profile for tests"}
CATS = ("math", "qa")
RUN = dict(max_new_tokens=8, concurrency=2)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """(bundle dir, source target dir): ``trtspec build --quant fp8`` of a tiny target and a close draft."""
    root = tmp_path_factory.mktemp("qbench")
    target = make_model(root / "target", seed=0, hidden=128, init=0.3)
    draft = make_model(root / "draft", seed=1, hidden=128, from_model=target, noise=0.05)
    (root / "acceptance.json").write_text(json.dumps(ACCEPTANCE))
    res = CliRunner().invoke(main, ["build", "--target", str(target), "--draft", str(draft), "--acceptance",
                                    str(root / "acceptance.json"), "--out", str(root / "b"), "--cache-dir",
                                    str(root / "cache"), "--calib-samples", "4", "--calib-seq-len", "32",
                                    "--quant", "fp8"])
    assert res.exit_code == 0, res.output
    return root / "b", target


def bench(tmp_path, *extra):
    args = ["bench", "--json", "--no-plots", "--draft-len", "3", "--max-new-tokens", str(RUN["max_new_tokens"]),
            "--concurrency", str(RUN["concurrency"]), "--limit-per-category", "1", "--out", str(tmp_path / "out"),
            *[a for c in CATS for a in ("--category", c)], *extra]
    res = CliRunner().invoke(main, args)
    return res, (json.loads(res.stdout) if res.exit_code == 0 else None)


def direct(target, draft):
    """The same prompts through LocalRunner directly: per-category mean AL."""
    prompts = ds.load_prompts("builtin", categories=list(CATS), limit_per_category=1)
    run = LocalRunner.load(target, draft, draft_len=3).run(prompts, RunConfig(**RUN))
    prof = build_run_profile(run, drafter="draft_model", draft_len=3)
    return {c: s.mean_al for c, s in prof.per_category.items()}, prof.overall.mean_al


def test_bundle_benches_quantized_next_to_its_recorded_source(bundle, tmp_path):
    b, source = bundle
    res, out = bench(tmp_path, "--target", str(b))
    assert res.exit_code == 0, res.output
    cmp = out["comparison"]
    assert out["meta"]["target_quant"]["algo"] == "FP8" and out["meta"]["unquantized_target"] == str(source)
    assert cmp["quant"] == "FP8" and set(cmp["per_category"]) == set(CATS)
    # each side is exactly what the runtime measures on its own: the bundle, and its source with the bundle's draft
    q_cats, q_all = direct(b, None)
    u_cats, u_all = direct(source, b / "draft")
    assert cmp["overall"]["quantized"]["mean_al"] == pytest.approx(q_all, abs=1e-12)
    assert cmp["overall"]["unquantized"]["mean_al"] == pytest.approx(u_all, abs=1e-12)
    for c in CATS:
        row = cmp["per_category"][c]
        assert row["quantized"]["mean_al"] == pytest.approx(q_cats[c], abs=1e-12)
        assert row["unquantized"]["mean_al"] == pytest.approx(u_cats[c], abs=1e-12)
        assert row["delta"] == pytest.approx(q_cats[c] - u_cats[c], abs=1e-12)
    assert out["overall"]["mean_al"] == pytest.approx(q_all, abs=1e-12)   # acceptance.json is the quantized run's
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Quantized vs unquantized target" in text and report.verdict(cmp) in text


def test_comparison_can_be_skipped_or_pointed_elsewhere(bundle, tmp_path):
    b, source = bundle
    res, out = bench(tmp_path, "--target", str(b), "--unquantized-target", "none")
    assert res.exit_code == 0, res.output
    assert "comparison" not in out and out["meta"]["unquantized_target"] == "none: no comparison asked for"
    # a quantized directory (not a bundle) with an explicit baseline and draft
    res, out = bench(tmp_path, "--target", str(b / "target"), "--draft", str(b / "draft"),
                     "--unquantized-target", str(source))
    assert res.exit_code == 0, res.output
    assert out["comparison"]["unquantized_target"] == str(source)
    # an unquantized target has nothing to compare
    res, out = bench(tmp_path, "--target", str(source), "--draft", str(b / "draft"))
    assert res.exit_code == 0, res.output
    assert "comparison" not in out and out["meta"]["unquantized_target"] == "none: the target is unquantized"
    assert out["meta"]["target_quant"] is None


def test_bad_baselines_are_refused_before_loading(bundle, tmp_path):
    b, _ = bundle
    res, _ = bench(tmp_path, "--target", str(b), "--unquantized-target", str(b / "target"))
    assert res.exit_code == 2 and "--unquantized-target" in res.output and "is quantized (FP8)" in res.output
    res, _ = bench(tmp_path, "--target", str(b), "--unquantized-target", str(tmp_path / "nowhere"))
    assert res.exit_code == 2 and "no config.json there" in res.output
    res, _ = bench(tmp_path, "--triton", "localhost:8001", "--unquantized-target", str(b / "target"))
    assert res.exit_code == 2 and "compares local-runtime runs" in res.output


def test_auto_baseline_needs_a_recorded_existing_source(bundle, tmp_path):
    b, source = bundle
    assert unquantized_baseline(b)[0] == source
    path, why = unquantized_baseline(b / "target")
    assert path is None and "no bundle manifest records its source" in why
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["inputs"]["target"]["path"] = str(tmp_path / "gone")
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "manifest.json").write_text(json.dumps(manifest))
    (moved / "target").symlink_to(b / "target")
    path, why = unquantized_baseline(moved)
    assert path is None and "is not there any more" in why


def _records(als, steps=10, cat="math"):
    """One request per AL value: ``steps`` drafts of D=3 with ``round((al - 1) * steps)`` accepted."""
    out = []
    for i, al in enumerate(als):
        acc = round((al - 1) * steps)
        out.append(M.RequestRecord(f"q{i}", cat, steps, acc, None, steps + acc, 0.1))
    return out


def test_paired_delta_interval():
    base = _records([1.5, 2.0, 2.5, 3.0, 3.5, 2.2, 1.8, 2.9])
    assert report.paired_delta(base, base) == (0.0, 0.0, 8)          # identical runs: exactly zero
    lower = _records([a - 0.3 for a in [1.5, 2.0, 2.5, 3.0, 3.5, 2.2, 1.8, 2.9]])
    lo, hi, n = report.paired_delta(lower, base)
    assert n == 8 and lo == pytest.approx(-0.3) and hi == pytest.approx(-0.3)   # a constant shift, paired
    noisy = _records([1.6, 1.9, 2.6, 2.9, 3.6, 2.1, 1.9, 2.8])
    lo, hi, _ = report.paired_delta(noisy, base)
    assert lo < 0 < hi                                                # noise around zero
    assert report.paired_delta(base[:1], base[:1]) is None
    assert report.paired_delta(_records([2.0, 2.0]), _records([2.0], cat="qa")) is None   # nothing paired twice
