"""Model-Optimizer quantized checkpoints load into the runtime as Model-Optimizer defines them.

Each format: a tiny Llama is quantized with ``mtq.quantize`` and written with ``export_hf_checkpoint``;
the runtime's loaded weights and logits are compared with Model-Optimizer's own fake-quant model
(its quantizers applied, in the state the export writes: after ``requantize_resmooth_fused_llm_layers``).
NVFP4's fake-quant forward needs CUDA, so there the weights are compared with a dequantization
written here from the format's definition and with Model-Optimizer's ``NVFP4QTensor.dequantize``.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import warnings

import pytest
import torch

from runtime_fixtures import full_logits, make_model, single_thread  # noqa: F401

mtq = pytest.importorskip("modelopt.torch.quantization")
pytestmark = pytest.mark.filterwarnings("ignore:Using a non-tuple sequence:UserWarning")   # inside modelopt

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
LAYERS = 2


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 2-layer Llama whose in-features (128, 256) are multiples of the AWQ group of 128."""
    return make_model(tmp_path_factory.mktemp("quant") / "base", seed=3, hidden=128, layers=LAYERS, init=0.05)


@pytest.fixture(scope="module")
def quantized(base, tmp_path_factory):
    """``get(cfg_name, kv=False) -> (fake-quant reference, export dir)``, each made once per module."""
    made: dict = {}
    root = tmp_path_factory.mktemp("exports")

    def get(cfg_name: str, kv: bool = False):
        key = (cfg_name, kv)
        if key not in made:
            made[key] = quantize_export(base, root / f"{cfg_name}{'_kv' if kv else ''}", cfg_name, kv=kv)
        return made[key]

    return get


def _calib_loop(model):
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        model(input_ids=torch.randint(0, 256, (2, 32), generator=g))


def mixed_fp8_int8_cfg() -> dict:
    """FP8 attention and INT8 (per-channel weights, per-tensor inputs) MLPs: a MIXED_PRECISION export."""
    cfg = copy.deepcopy(mtq.FP8_DEFAULT_CFG)
    cfg["quant_cfg"] = list(cfg["quant_cfg"]) + [
        {"quantizer_name": "*mlp*weight_quantizer", "cfg": {"num_bits": 8, "axis": 0}},
        {"quantizer_name": "*mlp*input_quantizer", "cfg": {"num_bits": 8, "axis": None}}]
    return cfg


CUSTOM_CONFIGS = {"MIXED_FP8_INT8": mixed_fp8_int8_cfg}


def quantize_export(base_dir, out, cfg_name: str, kv: bool = False):
    """(fake-quant reference model, export directory) for Model-Optimizer config ``cfg_name``
    (a name in ``modelopt.torch.quantization`` or in :data:`CUSTOM_CONFIGS`)."""
    import transformers
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.export.unified_export_hf import requantize_resmooth_fused_llm_layers

    model = transformers.LlamaForCausalLM.from_pretrained(base_dir).eval()
    cfg = CUSTOM_CONFIGS[cfg_name]() if cfg_name in CUSTOM_CONFIGS else copy.deepcopy(getattr(mtq, cfg_name))
    if kv:
        cfg["quant_cfg"] = list(cfg["quant_cfg"]) + list(copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"]))
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mtq.quantize(model, cfg, _calib_loop)
        to_export = copy.deepcopy(model)
        with torch.no_grad():
            requantize_resmooth_fused_llm_layers(model)   # the export's first step, on the reference
            export_hf_checkpoint(to_export, dtype=torch.float32, export_dir=str(out))
    shutil.copy(base_dir / "tokenizer.json", out / "tokenizer.json")
    return model, out


def ref_weight(module) -> torch.Tensor:
    """The weight Model-Optimizer's fake-quant forward multiplies by (its weight quantizer applied)."""
    with torch.no_grad():
        return module.weight_quantizer(module.weight).float()


def pre_quant_scale(module):
    pqs = getattr(module.input_quantizer, "_pre_quant_scale", None)
    return None if pqs is None else pqs.detach().float().reshape(-1)


def probe_ids(n: int = 24, seed: int = 5) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def ref_logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def assert_weights_match(got: torch.Tensor, want: torch.Tensor, grid: str, what: str, pqs=None) -> None:
    """``got`` equals ``want`` (times ``pqs`` per input column when given: folded) to float32 rounding
    of the scale, except where Model-Optimizer's export (``x / (amax / q)``) and its fake quantizer
    (``x * (q / amax)``) round a tie differently: at most 0.1 % of the elements, each at most one
    quantization step away (``grid``: fp8 | int8 | int4)."""
    row_amax = want.abs().amax(1, keepdim=True).expand_as(want)
    step = {"fp8": want.abs() / 8 + row_amax * 2.0 ** -9 / 448, "int8": row_amax / 127, "int4": row_amax / 7}[grid]
    if pqs is not None:
        want, step = want * pqs[None, :], step * pqs[None, :]
    off = ~torch.isclose(got, want, rtol=1e-6, atol=0)
    assert off.float().mean().item() <= 1e-3, f"{what}: {int(off.sum())} of {off.numel()} elements differ"
    assert bool(((got - want).abs() <= step * 1.001)[off].all()), f"{what}: an element is more than one step off"


# (Model-Optimizer config, exported quant_algo, FP8 KV cache, weight grid, max |logit diff| allowed:
# float32 reordering noise, the logits are ~2 in magnitude; measured 6e-7 .. 1.5e-6)
FAKE_QUANT_FORMATS = [
    ("FP8_DEFAULT_CFG", "FP8", True, "fp8", 1e-5),
    ("INT4_AWQ_CFG", "W4A16_AWQ", False, "int4", 1e-5),
    ("W4A8_AWQ_BETA_CFG", "W4A8_AWQ", False, "int4", 1e-5),
    ("INT8_SMOOTHQUANT_CFG", "W8A8_SQ_PER_CHANNEL", False, "int8", 1e-5),
    ("FP8_PER_CHANNEL_PER_TOKEN_CFG", "FP8_PER_CHANNEL_PER_TOKEN", False, "fp8", 1e-5),
    ("FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", "FP8_PB_WO", False, "fp8", 1e-5),
    ("INT8_WEIGHT_ONLY_CFG", "W8A16", False, "int8", 1e-5),
    ("MIXED_FP8_INT8", "MIXED_PRECISION", False, {"self_attn": "fp8", "mlp": "int8"}, 1e-5),
]


@pytest.mark.parametrize("cfg_name,algo,kv,grid,tol", FAKE_QUANT_FORMATS, ids=[f[1] for f in FAKE_QUANT_FORMATS])
def test_weights_and_logits_match_modelopt_fake_quant(quantized, cfg_name, algo, kv, grid, tol):
    from trtspec.runtime.models import load_model

    ref, export = quantized(cfg_name, kv)
    assert json.loads((export / "hf_quant_config.json").read_text())["quantization"]["quant_algo"].upper() == algo
    model = load_model(export)
    assert model.quant.algo.upper() == algo and sum(c for _, c in model.quant.layers) >= LAYERS * len(LINEARS)
    assert model.quant.kv_cache == ("FP8" if kv else None)
    for i in range(LAYERS):
        for name in LINEARS:
            prefix = f"model.layers.{i}.{name}"
            mod = ref.get_submodule(prefix)
            pqs = pre_quant_scale(mod)
            folded = pqs is not None and not mod.input_quantizer.is_enabled   # nothing between scale and matmul
            layer_grid = grid if isinstance(grid, str) else grid[name.split(".")[0]]
            assert_weights_match(model.get_submodule(prefix).weight.detach(), ref_weight(mod), layer_grid,
                                 f"{algo} {prefix}", pqs if folded else None)
    ids = probe_ids()
    want, got = ref_logits(ref, ids), full_logits(model, ids)
    assert (got - want).abs().max().item() <= tol, f"{algo}: max |logit diff| {(got - want).abs().max().item():.2e}"
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("cfg_name", ["W4A8_AWQ_BETA_CFG", "INT8_SMOOTHQUANT_CFG"])
def test_weights_only_matches_modelopt_with_input_quantizers_off(quantized, cfg_name):
    """``quant_activations=False``: pre_quant_scale folds into the weight, and the forward equals
    Model-Optimizer's model with its input quantizers disabled (the scale itself still applied)."""
    from trtspec.runtime.models import load_model

    ref, export = quantized(cfg_name)
    model = load_model(export, quant_activations=False)
    assert model.quant.activations == "weights only"
    ids = probe_ids()
    simulated = ref_logits(ref, ids)
    off = copy.deepcopy(ref)
    mtq.disable_quantizer(off, "*input_quantizer")
    for i in range(LAYERS):
        for name in LINEARS:
            mod = off.get_submodule(f"model.layers.{i}.{name}")
            assert_weights_match(model.get_submodule(f"model.layers.{i}.{name}").weight.detach(), ref_weight(mod),
                                 "int4" if "W4A8" in cfg_name else "int8", name, pre_quant_scale(mod))
    want, got = ref_logits(off, ids), full_logits(model, ids)
    # 1e-3, not 1e-5: the one INT8 weight on a rounding tie (export one step from the fake quantizer)
    # moves these logits by 3.7e-4; with the reference's weights copied in they agree to 1.3e-6
    assert (got - want).abs().max().item() <= 1e-3
    assert (simulated - want).abs().max().item() > 1e-2     # the activation quantizers do change the forward


def test_fp8_kv_cache_scales_are_the_calibrated_ones_and_matter(quantized):
    from trtspec.runtime.models import load_model

    ref, export = quantized("FP8_DEFAULT_CFG", True)
    model = load_model(export)
    ids = probe_ids()
    with_kv = full_logits(model, ids)
    for i in range(LAYERS):
        attn = ref.get_submodule(f"model.layers.{i}.self_attn")
        k_scale, v_scale = model.get_submodule(f"model.layers.{i}.self_attn").kv_scales
        assert k_scale == pytest.approx(float(attn.k_bmm_quantizer.amax) / 448, rel=1e-6)
        assert v_scale == pytest.approx(float(attn.v_bmm_quantizer.amax) / 448, rel=1e-6)
        model.get_submodule(f"model.layers.{i}.self_attn").kv_scales = None
    assert (full_logits(model, ids) - with_kv).abs().max().item() > 1e-4


# -- NVFP4: the fake-quant forward needs CUDA; check against the format's definition -------------

def e2m1(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 value of 4-bit codes from the bit fields: sign s, exponent e (bias 1), mantissa m."""
    s, e, m = (codes >> 3) & 1, (codes >> 1) & 3, (codes & 1).float()
    mag = torch.where(e == 0, 0.5 * m, (1 + 0.5 * m) * torch.pow(2.0, (e - 1).float()))
    return torch.where(s == 1, -mag, mag)


def nvfp4_reference(packed: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    """Weight [O, I] of an NVFP4 layer: element 2j of byte j in the low nibble, 2j+1 in the high one;
    each 16-block times its FP8 scale times the per-tensor scale_2."""
    O, J = packed.shape
    codes = torch.empty(O, 2 * J, dtype=torch.int64)
    codes[:, 0::2] = (packed & 0x0F).long()
    codes[:, 1::2] = (packed >> 4).long()
    block = scale.float().repeat_interleave(16, dim=1) * scale_2.float()
    return e2m1(codes) * block


@pytest.mark.parametrize("cfg_name,algo,acts", [("NVFP4_DEFAULT_CFG", "NVFP4", "simulated"),
                                                ("W4A16_NVFP4_CFG", "W4A16_NVFP4", "none")])
def test_nvfp4_weights_match_the_format_definition(base, quantized, cfg_name, algo, acts):
    import transformers
    from modelopt.torch.quantization.qtensor import NVFP4QTensor
    from safetensors.torch import load_file

    from trtspec.runtime.models import load_model

    _, export = quantized(cfg_name)
    tensors = load_file(str(export / "model.safetensors"))
    original = transformers.LlamaForCausalLM.from_pretrained(base).state_dict()
    model = load_model(export)
    assert model.quant.algo == algo and model.quant.activations == acts
    for i in range(LAYERS):
        for name in LINEARS:
            p = f"model.layers.{i}.{name}"
            packed, scale, scale_2 = tensors[f"{p}.weight"], tensors[f"{p}.weight_scale"], tensors[f"{p}.weight_scale_2"]
            assert packed.dtype == torch.uint8 and scale.dtype == torch.float8_e4m3fn
            want = nvfp4_reference(packed, scale, scale_2)
            got = model.get_submodule(p).weight.detach()
            assert torch.equal(got, want), p
            theirs = NVFP4QTensor(want.shape, torch.float32, packed).dequantize(
                scale=scale, double_scale=scale_2, block_sizes={-1: 16})
            assert torch.equal(got, theirs), p
            # and it is the original weight to within half a step of each block's grid (6 = E2M1 max)
            w = original[f"{p}.weight"].float()
            step = scale.float().repeat_interleave(16, dim=1) * scale_2.float() * 2   # widest gap: 4 -> 6
            assert bool(((got - w).abs() <= step / 2 + 1e-9).all()), p


def test_nvfp4_activation_quantizer_matches_modelopt_qtensor():
    """Dynamic 16-blocks with the exported global scale, as ``NVFP4QTensor.quantize`` computes them
    (pure torch, so it runs on CPU) -- awkward values included: zeros, ties, a block over range."""
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    from trtspec.runtime.quant import fake_nvfp4

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 64, generator=g) * torch.logspace(-3, 1, 64)
    x[0, 0, :16] = 0.0                                         # an all-zero block
    x[1, 1, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2)   # ties on the E2M1 grid
    x[2, 2, :16] *= 1e4                                        # beyond the calibrated range
    global_scale = torch.tensor(float(x[:2].abs().max()) / (6 * 448))
    q, s, s2 = NVFP4QTensor.quantize(x, 16, None, global_scale)
    theirs = q.dequantize(scale=s, double_scale=s2, block_sizes={-1: 16})
    assert torch.equal(fake_nvfp4(x, float(global_scale)), theirs)


def test_nvfp4_logits_match_an_independent_forward(base, quantized):
    """NVFP4 with activations simulated = transformers' Llama with the definition's weights and
    Model-Optimizer's NVFP4 tensor quantization of every linear input (a forward pre-hook)."""
    import transformers
    from modelopt.torch.quantization.qtensor import NVFP4QTensor
    from safetensors.torch import load_file

    from trtspec.runtime.models import load_model

    _, export = quantized("NVFP4_DEFAULT_CFG")
    tensors = load_file(str(export / "model.safetensors"))
    hf = transformers.LlamaForCausalLM.from_pretrained(base).eval()
    state = hf.state_dict()
    for i in range(LAYERS):
        for name in LINEARS:
            p = f"model.layers.{i}.{name}"
            state[f"{p}.weight"] = nvfp4_reference(tensors[f"{p}.weight"], tensors[f"{p}.weight_scale"],
                                                   tensors[f"{p}.weight_scale_2"])
            gs = tensors[f"{p}.input_scale"].float()

            def quantize_input(module, args, gs=gs):
                q, s, s2 = NVFP4QTensor.quantize(args[0], 16, None, gs)
                return (q.dequantize(scale=s, double_scale=s2, block_sizes={-1: 16}).to(args[0].dtype),)

            hf.get_submodule(p).register_forward_pre_hook(quantize_input)
    hf.load_state_dict(state)
    ids = probe_ids()
    want, got = ref_logits(hf, ids), full_logits(load_model(export), ids)
    assert (got - want).abs().max().item() <= 1e-5


# -- the pipeline, and clear errors ---------------------------------------------------------------

def test_pipeline_loads_a_quantized_target_and_decodes_losslessly(base, quantized, tmp_path):
    from runtime_fixtures import ragged_prompts

    from trtspec.runtime import load_pipeline

    _, export = quantized("FP8_DEFAULT_CFG", True)
    draft = make_model(tmp_path / "draft", seed=4, hidden=64, layers=1, from_model=None)
    pipe = load_pipeline(export, draft, draft_len=3)
    assert pipe.target.quant.algo == "FP8" and pipe.drafter.model.quant is None
    assert "FP8" in pipe.target.quant.describe() and pipe.target.quant.to_dict()["kv_cache"] == "FP8"
    prompts = ragged_prompts(3, seed=1)
    base_pipe = load_pipeline(export, draft_len=0)
    got = [o for o, _ in pipe.generate_ids(prompts, max_new_tokens=10)]
    assert got == [o for o, _ in base_pipe.generate_ids(prompts, max_new_tokens=10)]
    assert pipe.last_stats.draft_tokens > 0
    bf16 = load_pipeline(export, draft_len=0, dtype=torch.bfloat16)
    assert bf16.target.lm_head.weight.dtype == torch.bfloat16 and bf16.target.quant.dtype == "bfloat16"
    assert pipe.target.quant.dtype == "float32" and "dequantized to float32" in pipe.target.quant.describe()


def _copy_export(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_json(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _edit_tensors(path, fn):
    from safetensors.torch import load_file, save_file

    t = load_file(str(path))
    fn(t)
    save_file(t, str(path))


def test_unknown_quant_algo_is_refused_by_name(quantized, tmp_path):
    from trtspec.runtime.config import ModelFormatError
    from trtspec.runtime.models import load_model

    ckpt = _copy_export(quantized("FP8_DEFAULT_CFG", True)[1], tmp_path / "c")
    _edit_json(ckpt / "hf_quant_config.json", lambda d: d["quantization"].update(quant_algo="MXFP8"))
    with pytest.raises(ModelFormatError, match=r"hf_quant_config.json: quant_algo MXFP8 is not supported.*FP8, "):
        load_model(ckpt)
    _edit_json(ckpt / "hf_quant_config.json", lambda d: d["quantization"].update(quant_algo="FP8",
                                                                                 kv_cache_quant_algo="NVFP4"))
    with pytest.raises(ModelFormatError, match="kv_cache_quant_algo 'NVFP4' is not supported"):
        load_model(ckpt)
    _edit_json(ckpt / "config.json", lambda d: d["quantization_config"].update(quant_method="gptq"))
    with pytest.raises(ModelFormatError, match=r"config.json: quantization_config.quant_method 'gptq' is not supported"):
        load_model(ckpt)


def test_missing_scale_is_named(quantized, tmp_path):
    from trtspec.runtime.config import ModelFormatError
    from trtspec.runtime.models import load_model

    ckpt = _copy_export(quantized("FP8_DEFAULT_CFG", True)[1], tmp_path / "c")
    _edit_tensors(ckpt / "model.safetensors", lambda t: t.pop("model.layers.1.mlp.up_proj.input_scale"))
    with pytest.raises(ModelFormatError, match=r"/c: missing tensor model.layers.1.mlp.up_proj.input_scale "
                                               r"\(FP8 layer model.layers.1.mlp.up_proj\)"):
        load_model(ckpt)
    ckpt2 = _copy_export(quantized("FP8_DEFAULT_CFG", True)[1], tmp_path / "d")
    _edit_tensors(ckpt2 / "model.safetensors", lambda t: t.pop("model.layers.0.self_attn.v_proj.v_scale"))
    with pytest.raises(ModelFormatError, match=r"FP8 KV cache needs a positive scalar model.layers.0.self_attn."
                                               r"v_proj.v_scale"):
        load_model(ckpt2)
    ckpt3 = _copy_export(quantized("FP8_DEFAULT_CFG", True)[1], tmp_path / "e")
    _edit_tensors(ckpt3 / "model.safetensors", lambda t: t.pop("model.layers.0.mlp.gate_proj.weight_scale"))
    with pytest.raises(ModelFormatError, match=r"missing tensor model.layers.0.mlp.gate_proj.weight_scale"):
        load_model(ckpt3)


def test_wrong_packed_shape_and_stray_tensors_are_named(quantized, tmp_path):
    from trtspec.runtime.config import ModelFormatError
    from trtspec.runtime.models import load_model

    ckpt = _copy_export(quantized("INT4_AWQ_CFG")[1], tmp_path / "c")
    key = "model.layers.0.mlp.down_proj.weight"
    _edit_tensors(ckpt / "model.safetensors", lambda t: t.update({key: t[key][:-1].contiguous()}))
    with pytest.raises(ModelFormatError, match=r"tensor model.layers.0.mlp.down_proj.weight has shape \(63, 256\), "
                                               r"expected \[O/2, I\] uint8 .*\(W4A16_AWQ layer"):
        load_model(ckpt)
    ckpt2 = _copy_export(quantized("INT4_AWQ_CFG")[1], tmp_path / "d")
    _edit_tensors(ckpt2 / "model.safetensors",
                  lambda t: t.update({"model.layers.0.mlp.down_proj.weight_scale": t[
                      "model.layers.0.mlp.down_proj.weight_scale"][:, :1].contiguous()}))
    with pytest.raises(ModelFormatError, match=r"weight_scale has shape \(-1, 1\), expected \[O, 256/128\]"):
        load_model(ckpt2)
    ckpt3 = _copy_export(quantized("INT4_AWQ_CFG")[1], tmp_path / "e")
    _edit_tensors(ckpt3 / "model.safetensors", lambda t: t.update({"model.norm.input_scale": torch.ones(())}))
    with pytest.raises(ModelFormatError, match=r"quantization tensors \['model.norm.input_scale'\] belong to no"):
        load_model(ckpt3)
