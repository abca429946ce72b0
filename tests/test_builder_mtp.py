"""``trtspec build --drafter mtp`` on a DeepSeek-V3-layout target: Model-Optimizer quantizes the main model,
the MTP layer comes back unquantized where the engines read it, and the runtime decodes the bundle."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from deepseek_fixtures import QUANT_SHAPE, make_deepseek
from runtime_fixtures import single_thread  # noqa: F401
from test_builder_configs import FakeRecipe
from trtspec.builder import pipeline
from trtspec.builder.mtp_layers import MTP_SHARD
from trtspec.builder.options import BuildOptions
from trtspec.builder.trtllm_config import validate_llm_api_yaml
from trtspec.builder.validate import BuildInputError

pytest.importorskip("modelopt.torch.quantization")
pytestmark = pytest.mark.filterwarnings("ignore")   # Model-Optimizer's warnings about transformers versions

MTP = 3   # num_hidden_layers of the fixture: the MTP layer is model.layers.3


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return make_deepseek(tmp_path_factory.mktemp("ds") / "target", seed=2, std=0.1, **QUANT_SHAPE)


def build(tmp_path, target, **kw):
    opts = BuildOptions(target=target, drafter="mtp", out=tmp_path / "bundle", cache_dir=tmp_path / "cache",
                        calib_samples=4, calib_seq_len=32, **kw)
    return pipeline.build(opts, quiet=True, recipe_resolver=lambda spec, **k: FakeRecipe())


def table(ckpt) -> dict:
    out = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            out.update({k: (f.name, st.get_tensor(k)) for k in st.keys()})
    return out


@pytest.mark.parametrize("quant,algo", [("fp8", "FP8"), ("nvfp4", "NVFP4")])
def test_quantized_bundle_keeps_the_mtp_layer_unquantized_where_engines_read_it(tmp_path, target, quant, algo):
    res = build(tmp_path, target, quant=quant)
    out = res.out / "target"
    src, got = table(target), table(out)
    mtp = {k for k in src if k.startswith(f"model.layers.{MTP}.")}
    assert {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "shared_head.head.weight",
            "embed_tokens.weight", "mlp.experts.5.down_proj.weight"} <= {k.split(".", 3)[3] for k in mtp}
    for k in mtp:                                            # bit for bit, in the MTP shard, no scales added
        assert got[k][0] == MTP_SHARD and torch.equal(got[k][1], src[k][1]), k
    assert not [k for k in got if k.startswith(f"model.layers.{MTP}.") and k not in mtp]
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(got) and all(index[k] == MTP_SHARD for k in mtp)
    hq = json.loads((out / "hf_quant_config.json").read_text())["quantization"]
    cfg = json.loads((out / "config.json").read_text())
    assert hq["quant_algo"] == algo and f"model.layers.{MTP}*" in hq["exclude_modules"]
    assert f"model.layers.{MTP}*" in cfg["quantization_config"]["ignore"] and cfg["num_nextn_predict_layers"] == 1
    low = {"FP8": "F8_E4M3", "NVFP4": "U8"}[algo]
    expert = f"model.layers.1.mlp.experts.0.down_proj"
    with safe_open(str(out / "model.safetensors"), "pt") as st:
        assert st.get_slice(f"{expert}.weight").get_dtype() == low and f"{expert}.weight_scale" in st.keys()
        latent_quantized = "model.layers.1.self_attn.kv_b_proj.weight_scale" in st.keys()
        assert "model.layers.1.self_attn.o_proj.weight_scale" in st.keys()
    assert latent_quantized == (algo == "FP8")   # NVFP4 keeps MLA's latent projections, as NVIDIA's DeepSeek NVFP4
    spec = validate_llm_api_yaml(res.out / "llm_api.yaml").speculative_config
    assert spec.decoding_type == "MTP"


def test_fp8_bundle_decodes_with_its_mtp_layer_losslessly(tmp_path, target):
    from trtspec.runtime import load_pipeline

    res = build(tmp_path, target, quant="fp8")
    pipe = load_pipeline(res.out / "target", drafter="mtp", draft_len=3)
    assert pipe.target.quant.algo == "FP8" and pipe.target.quant.activations == "simulated"
    prompts = [[3, 4, 5, 6], [200], list(range(60, 71))]
    base = load_pipeline(res.out / "target", drafter="mtp", draft_len=0).generate_ids(prompts, max_new_tokens=12)
    got = pipe.generate_ids(prompts, max_new_tokens=12)
    assert [t for t, _ in got] == [t for t, _ in base] and pipe.last_stats.draft_tokens > 0


def test_mla_target_refuses_an_fp8_kv_cache_before_any_work(tmp_path, target):
    with pytest.raises(BuildInputError, match="--kv-cache-quant fp8: the target uses multi-head latent attention"):
        build(tmp_path, target, quant="fp8", kv_cache_quant="fp8")
    assert not (tmp_path / "bundle").exists()


def test_acceptance_measure_runs_the_mtp_drafter_and_writes_its_profile(tmp_path, target):
    opts = BuildOptions(target=target, drafter="mtp", out=tmp_path / "bundle", cache_dir=tmp_path / "cache",
                        acceptance="measure", measure_prompts=1, measure_new_tokens=8)
    seen = {}

    def resolver(spec, **kw):
        seen.update(kw)
        return FakeRecipe()

    res = pipeline.build(opts, quiet=True, recipe_resolver=resolver)
    doc = json.loads((res.out / "acceptance.json").read_text())
    assert doc["drafter"] == "mtp" and doc["num_steps"] > 0 and "drafter=mtp" in doc["source"]
    assert seen["acceptance"].drafter == "mtp"
