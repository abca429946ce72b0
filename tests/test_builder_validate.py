"""Bad build inputs fail in stage 1 with an error naming the argument, before any quantization."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from runtime_fixtures import make_eagle3, make_model
from safetensors.torch import save_file
from test_builder_configs import FakeRecipe

from trtspec.builder import pipeline, quantize
from trtspec.builder.calib import CalibrationError, encode_batches, load_texts
from trtspec.builder.options import BuildOptions
from trtspec.builder.validate import BuildInputError


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "target": make_model(root / "target", hidden=128, seed=0),
        "draft": make_model(root / "draft", hidden=128, seed=1),
        "narrow": make_model(root / "narrow", hidden=64, seed=2),
        "vocab300": make_model(root / "vocab300", hidden=128, vocab=250, seed=3),
    }


@pytest.fixture(autouse=True)
def no_quantization(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("quantization started despite a bad input")

    monkeypatch.setattr(quantize, "quantize_and_export", fail)


def build(tmp_path, **kw):
    opts = BuildOptions(out=tmp_path / "out", cache_dir=tmp_path / "cache", **kw)
    return pipeline.build(opts, quiet=True, recipe_resolver=lambda spec, **k: FakeRecipe())


def test_vocab_mismatch(tmp_path, models):
    with pytest.raises(BuildInputError, match=r"--draft .*tokenizer vocabulary differs from --target"):
        build(tmp_path, target=models["target"], draft=models["vocab300"])


def test_awq_needs_in_features_multiple_of_128(tmp_path, models):
    with pytest.raises(BuildInputError, match=r"--quant int4_awq: needs every linear in-feature to be a multiple "
                                              r"of 128; narrow has 12 layers that are not, e.g. model.layers.0.mlp.gate_proj.weight with 64"):
        build(tmp_path, target=models["narrow"], drafter="ngram", quant="int4_awq")
    # the draft is checked too
    narrow_draft = make_model(tmp_path / "nd", hidden=64, seed=4)
    big = make_model(tmp_path / "bt", hidden=64, seed=5)
    with pytest.raises(BuildInputError, match="--draft-quant w4a8_awq: needs every linear in-feature"):
        build(tmp_path, target=big, draft=narrow_draft, draft_quant="w4a8_awq", quant="fp8")


def test_unknown_quant(tmp_path, models):
    with pytest.raises(ValueError, match="quant"):
        BuildOptions(target=models["target"], drafter="ngram", quant="int3")
    with pytest.raises(ValueError, match=r"--quant 'int3': unknown format; expected one of none, fp8"):
        quantize.check_quant("int3")
    res = CliRunner().invoke(_cli(), ["build", "--target", str(models["target"]), "--drafter", "ngram",
                                      "--quant", "int3"])
    assert res.exit_code == 2 and "Invalid value for '--quant'" in res.output


def test_missing_files(tmp_path, models):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BuildInputError, match="--target .*config.json is missing"):
        build(tmp_path, target=empty, drafter="ngram")
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    (noweights / "config.json").write_text((models["target"] / "config.json").read_text())
    with pytest.raises(BuildInputError, match=r"--draft .*no \*\.safetensors weights"):
        build(tmp_path, target=models["target"], draft=noweights)
    with pytest.raises(BuildInputError, match="--target .*not a directory"):
        build(tmp_path, target=tmp_path / "nowhere", drafter="ngram")
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "config.json").write_text((models["target"] / "config.json").read_text())
    (trunc / "model.safetensors").write_bytes((models["target"] / "model.safetensors").read_bytes()[:5000])
    with pytest.raises(BuildInputError, match="--target: weights file model.safetensors is unreadable: .*truncated"):
        build(tmp_path, target=trunc, drafter="ngram")
    with pytest.raises(ValueError, match="--draft is required for --drafter draft_model"):
        BuildOptions(target=models["target"])


def test_missing_architectures(tmp_path, models):
    d = tmp_path / "noarch"
    d.mkdir()
    cfg = json.loads((models["target"] / "config.json").read_text())
    cfg.pop("architectures")
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes((models["target"] / "model.safetensors").read_bytes())
    with pytest.raises(BuildInputError, match="config.json has no 'architectures'"):
        build(tmp_path, target=d, drafter="ngram")


def test_eagle3_hidden_size_must_match(tmp_path, models):
    head = make_eagle3(tmp_path / "head", models["narrow"], aux_ids=(0, 1))
    with pytest.raises(BuildInputError, match="EAGLE-3 head hidden_size 64 differs from the target's 128"):
        build(tmp_path, target=models["target"], draft=head, drafter="eagle3")


def test_eagle3_d2t_and_capture_layers(tmp_path, models):
    head = make_eagle3(tmp_path / "head", models["target"], aux_ids=(0, 5))
    with pytest.raises(BuildInputError, match=r"eagle_aux_hidden_state_layer_ids \[0, 5\] has indices outside "
                                              r"the target's 2 layers: \[5\]"):
        build(tmp_path, target=models["target"], draft=head, drafter="eagle3")
    head = make_eagle3(tmp_path / "head2", models["target"], aux_ids=(0, 1), draft_vocab=200)
    from safetensors.torch import load_file

    sd = load_file(str(head / "model.safetensors"))
    sd["d2t"] = sd["d2t"] + 100  # pushes ids past the 256-token target vocabulary
    save_file(sd, str(head / "model.safetensors"))
    with pytest.raises(BuildInputError, match="d2t maps draft ids outside the target vocabulary"):
        build(tmp_path, target=models["target"], draft=head, drafter="eagle3")


def test_dflash_target_layer_ids_and_mtp_layers(tmp_path, models):
    d = tmp_path / "dflash"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
                                               "hidden_size": 128, "dflash_config": {"target_layer_ids": [1, 7]}}))
    save_file({"fc.weight": __import__("torch").zeros(128, 256)}, str(d / "model.safetensors"))
    with pytest.raises(BuildInputError, match=r"dflash target_layer_ids \[1, 7\] has indices outside"):
        build(tmp_path, target=models["target"], draft=d, drafter="dflash")
    with pytest.raises(BuildInputError, match="--target .*no MTP layers"):
        build(tmp_path, target=models["target"], drafter="mtp")


def test_out_that_is_not_a_bundle_is_refused(tmp_path, models):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(BuildInputError, match="--out .*exists and is not a trtspec bundle"):
        build(tmp_path, target=models["target"], drafter="ngram")
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"


def test_disk_space_check(tmp_path, models, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10, 10, 1000))
    with pytest.raises(BuildInputError, match=r"--out .*needs about .* GiB free"):
        build(tmp_path, target=models["target"], drafter="ngram")


def test_calibration_files(tmp_path, models):
    good = tmp_path / "c.jsonl"
    good.write_text('{"text": "hello world"}\n\n{"turns": ["a b", "c"]}\n{"prompt": "p q"}\n')
    assert load_texts(good) == ["hello world", "a b\n\nc", "p q"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"question_id": [1, 2], "turns": [["x y"], ["z"]]}), tmp_path / "c.parquet")
    assert load_texts(tmp_path / "c.parquet") == ["x y", "z"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no text field"}\n')
    with pytest.raises(CalibrationError, match=r"--calib .*bad.jsonl:1: record has no"):
        build(tmp_path, target=models["target"], drafter="ngram", calib=bad)
    seqs = encode_batches(["ab", "cd", "ef"], models["target"], samples=2, seq_len=8, seed=0)
    assert len(seqs) == 2 and all(1 <= len(s) <= 8 for s in seqs)


def _cli():
    from trtspec.cli import main

    return main


def test_max_seq_len_beyond_the_model(tmp_path, models):
    with pytest.raises(BuildInputError, match=r"--max-seq-len 8192 exceeds the target's max_position_embeddings \(512\)"):
        build(tmp_path, target=models["target"], drafter="ngram", max_seq_len=8192)
