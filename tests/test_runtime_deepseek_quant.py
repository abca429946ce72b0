"""A Model-Optimizer quantized DeepSeek-V3-layout target in the runtime: FP8 logits equal Model-Optimizer's
own fake-quant model (MLA projections, dense MLP, shared and routed experts quantized); NVFP4 (whose fake-quant
forward needs CUDA) equals the format's definition and an independent forward built on transformers."""
from __future__ import annotations

import contextlib
import copy
import io
import warnings

import pytest
import torch

from deepseek_fixtures import QUANT_SHAPE, make_deepseek
from runtime_fixtures import full_logits, single_thread  # noqa: F401

mtq = pytest.importorskip("modelopt.torch.quantization")
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_deepseek(tmp_path_factory.mktemp("dsq") / "base", seed=5, std=0.1, **QUANT_SHAPE)


def _calib(model):
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        model(input_ids=torch.randint(0, 256, (2, 24), generator=g))


def quantize_export(base_dir, out, cfg_name):
    """(fake-quant reference in the state the export writes, export directory with the MTP layer re-attached)."""
    import json

    import transformers
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.export.unified_export_hf import requantize_resmooth_fused_llm_layers

    from trtspec.builder.mtp_layers import quant_cfg_overrides, reattach

    config = json.loads((base_dir / "config.json").read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    cfg = copy.deepcopy(getattr(mtq, cfg_name))
    cfg["quant_cfg"] = list(cfg["quant_cfg"]) + quant_cfg_overrides(config, "nvfp4" if "NVFP4" in cfg_name else "fp8")
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mtq.quantize(model, cfg, _calib)
        to_export = copy.deepcopy(model)
        with torch.no_grad():
            requantize_resmooth_fused_llm_layers(model)
            export_hf_checkpoint(to_export, dtype=torch.float32, export_dir=str(out))
    reattach(base_dir, out, config)
    (out / "tokenizer.json").write_bytes((base_dir / "tokenizer.json").read_bytes())
    return model, out


def probe() -> list[int]:
    return torch.randint(0, 256, (20,), generator=torch.Generator().manual_seed(9)).tolist()


def test_fp8_weights_and_logits_match_modelopt_fake_quant(base, tmp_path):
    from trtspec.runtime.models import load_model

    ref, export = quantize_export(base, tmp_path / "fp8", "FP8_DEFAULT_CFG")
    model = load_model(export)
    assert model.quant.algo == "FP8" and model.quant.activations == "simulated"
    with torch.no_grad():
        for name in ("self_attn.q_a_proj", "self_attn.kv_b_proj", "self_attn.o_proj", "mlp.shared_experts.down_proj"):
            mod = ref.get_submodule(f"model.layers.1.{name}")
            torch.testing.assert_close(model.get_submodule(f"model.layers.1.{name}").weight,
                                       mod.weight_quantizer(mod.weight), rtol=1e-6, atol=0)
        experts = ref.model.layers[1].mlp.experts
        inter = experts.gate_up_proj.shape[1] // 2
        for e in (0, 5):
            gate_up = experts.gate_up_proj_weight_quantizers[e](experts.gate_up_proj[e])
            torch.testing.assert_close(model.model.layers[1].mlp.experts[e].up_proj.weight, gate_up[inter:],
                                       rtol=1e-6, atol=0)
        ids = probe()
        want = ref(input_ids=torch.tensor([ids])).logits[0].float()
    got = full_logits(model, ids)
    assert (got - want).abs().max().item() <= 1e-5
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def _nvfp4_dequant(tensors, p):
    from test_runtime_quant import nvfp4_reference

    return nvfp4_reference(tensors[f"{p}.weight"], tensors[f"{p}.weight_scale"], tensors[f"{p}.weight_scale_2"])


def _quantize_input(x, gs):
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    q, s, s2 = NVFP4QTensor.quantize(x, 16, None, gs)
    return q.dequantize(scale=s, double_scale=s2, block_sizes={-1: 16}).to(x.dtype)


def test_nvfp4_logits_match_an_independent_forward(base, tmp_path):
    """transformers' DeepseekV3 with every quantized weight from the format's definition and Model-Optimizer's
    NVFP4 tensor quantization of every quantized input (linear pre-hooks; the fused experts by hand)."""
    import transformers
    from safetensors.torch import load_file

    from trtspec.runtime.models import load_model

    _, export = quantize_export(base, tmp_path / "nvfp4", "NVFP4_DEFAULT_CFG")
    t = load_file(str(export / "model.safetensors"))
    assert "model.layers.1.self_attn.q_a_proj.weight_scale" not in t           # MLA latent projections kept
    hf = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    for name, mod in hf.named_modules():
        if isinstance(mod, torch.nn.Linear) and f"{name}.weight_scale" in t:
            with torch.no_grad():
                mod.weight.copy_(_nvfp4_dequant(t, name))
            mod.register_forward_pre_hook(lambda m, a, gs=t[f"{name}.input_scale"].float(): (_quantize_input(a[0], gs),))
    for i, layer in enumerate(hf.model.layers):
        if not hasattr(layer.mlp, "experts"):
            continue
        ex, p = layer.mlp.experts, f"model.layers.{i}.mlp.experts"
        w = {(e, n): _nvfp4_dequant(t, f"{p}.{e}.{n}") for e in range(ex.num_experts)
             for n in ("gate_proj", "up_proj", "down_proj")}
        gs_in, gs_down = t[f"{p}.0.gate_proj.input_scale"].float(), t[f"{p}.0.down_proj.input_scale"].float()

        def forward(hidden, idx, weights, w=w, gs_in=gs_in, gs_down=gs_down, n=ex.num_experts):
            out = torch.zeros_like(hidden)
            for e in range(n):
                tok, slot = (idx == e).nonzero(as_tuple=True)
                if len(tok):
                    x = _quantize_input(hidden[tok], gs_in)
                    a = torch.nn.functional.silu(x @ w[e, "gate_proj"].T) * (x @ w[e, "up_proj"].T)
                    out.index_add_(0, tok, (_quantize_input(a, gs_down) @ w[e, "down_proj"].T) * weights[tok, slot, None])
            return out

        ex.forward = forward
    ids = probe()
    with torch.no_grad():
        want = hf(input_ids=torch.tensor([ids])).logits[0].float()
    model = load_model(export)
    assert model.quant.algo == "NVFP4"
    got = full_logits(model, ids)
    assert (got - want).abs().max().item() <= 1e-4
    assert torch.equal(got.argmax(-1), want.argmax(-1))
