"""Triton repository writer, request validation and server discovery (no server needed)."""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from trtspec.triton import install
from trtspec.triton.bundle import BundleError, read_bundle
from trtspec.triton.protocol import (INPUTS, OUTPUTS, GenerationRequest, IncrementalText, ModelSettings,
                                     RequestError, parse_request)
from trtspec.triton.repository import config_pbtxt, write_repository
from trtspec.triton.server import ServerNotFoundError, find_server


def _fake_bundle(root: Path, *, context: int = 512, llm_api: dict | None = None, draft: bool = True) -> Path:
    for sub in ("target",) + (("draft",) if draft else ()):
        (root / sub).mkdir(parents=True)
        (root / sub / "config.json").write_text(json.dumps(
            {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": context}))
    api = llm_api if llm_api is not None else {
        "speculative_config": {"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "draft"}}
    (root / "llm_api.yaml").write_text(yaml.safe_dump(api))
    return root


SETTINGS = ModelSettings(bundle=Path("/nonexistent"), default_max_tokens=8, max_tokens_limit=16,
                         max_prompt_tokens=32, max_prompt_bytes=100)


# -- request validation -------------------------------------------------------------------------
def test_parse_request_defaults_and_batch_shapes():
    r = parse_request({"text_input": np.array([[b"hello"]], dtype=object)}, SETTINGS)
    assert r == GenerationRequest(prompt="hello", max_tokens=8)
    r = parse_request({"text_input": np.array([b"x"], dtype=object),
                       "sampling_param_max_tokens": np.array([[16]], dtype=np.int32),
                       "sampling_param_temperature": np.array([[0.5]], dtype=np.float32),
                       "sampling_param_top_p": np.array([[0.9]], dtype=np.float32),
                       "sampling_param_top_k": np.array([[5]], dtype=np.int32),
                       "sampling_param_seed": np.array([[7]], dtype=np.uint64),
                       "stream": np.array([[True]]), "sampling_param_return_perf_metrics": np.array([[True]])},
                      SETTINGS)
    assert (r.max_tokens, r.top_k, r.seed, r.stream, r.perf_metrics) == (16, 5, 7, True, True)
    assert r.temperature == pytest.approx(0.5) and r.top_p == pytest.approx(0.9)
    # no seed given -> None (the engine picks one per request); the full UINT64 range is accepted
    assert parse_request({"text_input": np.array([b"x"], dtype=object)}, SETTINGS).seed is None
    big = parse_request({"text_input": np.array([b"x"], dtype=object),
                         "sampling_param_seed": np.array([2**64 - 1], dtype=np.uint64)}, SETTINGS)
    assert big.seed == 2**64 - 1


@pytest.mark.parametrize("inputs, message", [
    ({}, "text_input: required input is missing"),
    ({"text_input": np.array([b""], dtype=object)}, "text_input: the prompt is empty"),
    ({"text_input": np.array([b"\xff\xfe"], dtype=object)}, "text_input: not valid UTF-8"),
    ({"text_input": np.array([b"a" * 101], dtype=object)}, "exceeds the limit of 100 bytes"),
    ({"text_input": np.array([b"a", b"b"], dtype=object)}, "expected one value per request"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_max_tokens": np.array([0])},
     "sampling_param_max_tokens: expected 1..16, got 0"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_max_tokens": np.array([-3])},
     "sampling_param_max_tokens: expected 1..16, got -3"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_max_tokens": np.array([17])},
     "sampling_param_max_tokens: expected 1..16, got 17"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_temperature": np.array([-1.0])},
     "sampling_param_temperature"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_temperature": np.array([np.nan])},
     "sampling_param_temperature: expected a finite value >= 0, got nan"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_top_p": np.array([0.0])},
     "sampling_param_top_p: expected a value in (0, 1]"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_top_p": np.array([1.5])},
     "sampling_param_top_p: expected a value in (0, 1], got 1.5"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_seed": np.array([-2])},
     "sampling_param_seed: expected 0..2**64-1, got -2"),
    ({"text_input": np.array([7], dtype=np.int32)}, "text_input: expected BYTES, got int32"),
    ({"text_input": np.array([b"a"], dtype=object), "sampling_param_top_k": np.array([-1])},
     "sampling_param_top_k"),
])
def test_parse_request_rejects_bad_input_naming_it(inputs, message):
    with pytest.raises(RequestError) as e:
        parse_request(inputs, SETTINGS)
    assert message in str(e.value)


def test_incremental_text_holds_back_split_characters():
    data = "añ€😀b".encode()
    decode = lambda ids: bytes(ids).decode("utf-8", errors="replace")  # noqa: E731
    inc = IncrementalText(decode)
    pieces = [inc.push([b]) for b in data]
    pieces.append(inc.finish())
    assert "".join(pieces) == "añ€😀b"
    assert all("\ufffd" not in p for p in pieces)
    assert pieces[:3] == ["a", "", "ñ"]  # the 2-byte character appears once complete


def test_model_settings_validate_and_round_trip(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        ModelSettings(bundle=tmp_path, backend="vllm")
    with pytest.raises(ValueError, match="max_tokens_limit"):
        ModelSettings(bundle=tmp_path, max_tokens_limit=0)
    with pytest.raises(ValueError, match="default_max_tokens=64 exceeds"):
        ModelSettings(bundle=tmp_path, max_tokens_limit=8)
    with pytest.raises(ValueError, match="verify: expected one of greedy, sample, block, got 'beam'"):
        ModelSettings(bundle=tmp_path, verify="beam")
    with pytest.raises(ValueError, match="draft_len: expected null .* or an integer >= 0, got -1"):
        ModelSettings(bundle=tmp_path, draft_len=-1)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"bundle": "b", "max_tokens_limit": 128}))
    s = ModelSettings.load(tmp_path / "m.yaml")
    assert s.bundle == (tmp_path / "b").resolve() and s.max_tokens_limit == 128
    assert (s.verify, s.draft_len) == ("greedy", None)
    full = ModelSettings(bundle=tmp_path / "b", verify="block", draft_len=0)
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(full.to_dict()))
    assert ModelSettings.load(tmp_path / "full.yaml") == full
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"bundle": "b", "max_token": 1}))
    with pytest.raises(ValueError, match="unknown keys"):
        ModelSettings.load(tmp_path / "bad.yaml")


# -- bundles and repositories -------------------------------------------------------------------
def test_read_bundle_maps_llm_api_to_runtime(tmp_path):
    b = read_bundle(_fake_bundle(tmp_path / "b", llm_api={"speculative_config": {
        "decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "draft",
        "draft_len_schedule": {4: 4, 16: 2}}}))
    assert (b.drafter, b.draft_len, b.draft_len_schedule) == ("draft_model", 4, {4: 4, 16: 2})
    assert b.draft == (tmp_path / "b" / "draft").resolve()
    with pytest.raises(BundleError, match="target/config.json"):
        read_bundle(tmp_path)
    with pytest.raises(BundleError, match="needs a draft checkpoint"):
        read_bundle(_fake_bundle(tmp_path / "c", llm_api={}, draft=False))
    ngram = read_bundle(_fake_bundle(tmp_path / "d", llm_api={"speculative_config": {
        "decoding_type": "NGram", "max_draft_len": 3}}, draft=False))
    assert (ngram.drafter, ngram.draft) == ("ngram", None)
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({"options": {"drafter": "eagle3"}}))
    with pytest.raises(BundleError, match="manifest.json says drafter 'eagle3'"):
        read_bundle(tmp_path / "b")


def test_config_pbtxt_names_every_tensor_like_trtllm():
    text = config_pbtxt("m")
    assert "decoupled: true" in text and 'backend: "python"' in text
    for name, dtype, optional in INPUTS:
        line = next(line for line in text.splitlines() if f'"{name}"' in line)
        assert dtype in line and (("optional: true" in line) == optional)
    for name, dtype in OUTPUTS:
        assert any(f'"{name}"' in line and dtype in line for line in text.splitlines())
    assert [n for n, _, _ in INPUTS][:1] == ["text_input"]


def test_write_repository_layout_relative_inside_bundle(tmp_path):
    bundle = _fake_bundle(tmp_path / "bundle", context=300)
    model = write_repository(bundle, bundle / "triton", "spec")
    assert sorted(p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()) == [
        "1/model.py", "1/model.yaml", "config.pbtxt"]
    data = yaml.safe_load((model / "1" / "model.yaml").read_text())
    assert data["bundle"] == "../../.."  # relocatable with the bundle
    settings = ModelSettings.load(model / "1" / "model.yaml")
    assert settings.bundle == bundle.resolve()
    assert (settings.max_tokens_limit, settings.max_prompt_tokens) == (150, 150)  # context 300 split
    assert 'name: "spec"' in (model / "config.pbtxt").read_text()
    # rewriting replaces the model and leaves other models alone
    (tmp_path / "bundle" / "triton" / "other").mkdir()
    write_repository(bundle, bundle / "triton", "spec")
    assert (tmp_path / "bundle" / "triton" / "other").is_dir()
    assert not list((bundle / "triton").glob(".spec.*"))


def test_write_repository_outside_bundle_uses_absolute_path(tmp_path):
    bundle = _fake_bundle(tmp_path / "bundle")
    model = write_repository(bundle, tmp_path / "repo")
    assert yaml.safe_load((model / "1" / "model.yaml").read_text())["bundle"] == str(bundle.resolve())
    with pytest.raises(ValueError, match="model_name"):
        write_repository(bundle, tmp_path / "repo", "a/b")
    with pytest.raises(BundleError):
        write_repository(tmp_path / "repo", tmp_path / "repo2")


# -- server discovery and install --------------------------------------------------------------
def test_find_server_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TRTSPEC_TRITONSERVER", raising=False)
    import importlib.util

    if importlib.util.find_spec("pytriton") is not None:
        pytest.skip("nvidia-pytriton is installed in this environment")
    with pytest.raises(ServerNotFoundError, match="trtspec triton install-server"):
        find_server(cache_dir=tmp_path / "empty")
    monkeypatch.setenv("TRTSPEC_TRITONSERVER", str(tmp_path / "nope"))
    with pytest.raises(ServerNotFoundError, match="TRTSPEC_TRITONSERVER"):
        find_server(cache_dir=tmp_path / "empty")


def test_unpack_wheel_keeps_only_server_files(tmp_path):
    wheel = tmp_path / "nvidia_pytriton-0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pytriton/__init__.py", "")
        zf.writestr("pytriton/tritonserver/bin/tritonserver", "#!/bin/sh\n")
        zf.writestr("pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub", "x")
        zf.writestr("nvidia_pytriton.libs/libx.so", "x")
        zf.writestr("numpy/__init__.py", "")
    root = tmp_path / "root"
    install.unpack_wheel(wheel, root)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == ["nvidia_pytriton.libs/libx.so", "pytriton/tritonserver/bin/tritonserver",
                     "pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub"]
    assert os.access(root / "pytriton/tritonserver/bin/tritonserver", os.X_OK)
    bad = tmp_path / "bad.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("pytriton/__init__.py", "")
    with pytest.raises(ValueError, match="no pytriton/tritonserver/bin/tritonserver"):
        install.unpack_wheel(bad, tmp_path / "r2")


# -- commands ------------------------------------------------------------------------------------
def test_triton_command_writes_repository_json(tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main

    bundle = _fake_bundle(tmp_path / "bundle")
    res = CliRunner().invoke(main, ["triton", "--bundle", str(bundle), "--out", str(tmp_path / "repo"),
                                    "--max-tokens-limit", "32", "--verify", "block", "--draft-len", "0", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["model"] == "trtspec" and Path(out["model_dir"], "1", "model.py").is_file()
    assert out["settings"]["max_tokens_limit"] == 32 and out["settings"]["default_max_tokens"] == 32
    written = ModelSettings.load(Path(out["model_dir"], "1", "model.yaml"))
    assert (written.verify, written.draft_len) == ("block", 0)
    res = CliRunner().invoke(main, ["triton", "--bundle", str(tmp_path), "--out", str(tmp_path / "r2")])
    assert res.exit_code == 2 and "target/config.json" in res.output
    res = CliRunner().invoke(main, ["triton", "--out", str(tmp_path / "r2")])
    assert res.exit_code == 2 and "--bundle and --out are required" in res.output


def test_serve_without_server_says_how_to_get_one(tmp_path, monkeypatch):
    import importlib.util

    from click.testing import CliRunner

    from trtspec.cli import main

    if importlib.util.find_spec("pytriton") is not None:
        pytest.skip("nvidia-pytriton is installed in this environment")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TRTSPEC_TRITON_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("TRTSPEC_TRITONSERVER", raising=False)
    res = CliRunner().invoke(main, ["serve", "--bundle", str(_fake_bundle(tmp_path / "b"))])
    assert res.exit_code == 1
    assert "No tritonserver found" in res.output and "trtspec triton install-server" in res.output
    res = CliRunner().invoke(main, ["serve", "--bundle", str(tmp_path / "b"), "--http-port", "9000",
                                    "--grpc-port", "9000"])
    assert res.exit_code == 2 and "must differ" in res.output
