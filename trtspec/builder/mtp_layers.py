"""Targets with MTP layers through Model-Optimizer: what is quantized, and how the MTP layers come back.

Hugging Face's ``DeepseekV3ForCausalLM`` has no MTP layers: ``from_pretrained`` drops the checkpoint's
``model.layers.{num_hidden_layers + k}.*`` tensors, so Model-Optimizer's export of the quantized model has
none. The serving engines read the MTP layers from exactly those names in the target's own checkpoint
(vLLM ``DeepSeekMTP``, SGLang ``DeepseekV3ForCausalLMNextN``, TensorRT-LLM ``DeepseekV3MTP``), so
:func:`reattach` copies them back from the source checkpoint, **unquantized** (as NVIDIA's published
DeepSeek NVFP4 checkpoints keep them: their ``exclude_modules`` list ``model.layers.61*``), and adds the
layers' pattern to the export's ``exclude_modules``.

For the NVFP4 formats, MLA's latent projections (``q_a_proj``, ``q_b_proj``, ``kv_a_proj_with_mqa``,
``kv_b_proj``) stay unquantized too, as in those checkpoints (``o_proj``, the dense MLPs and every expert
are quantized): :func:`quant_cfg_overrides`. Source: ``nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json`` and
``nvidia--DeepSeek-V3.2-NVFP4_hf_quant_config.json`` as shipped in aiconfigurator-core 0.12.0's
``model_configs`` (``exclude_modules``: ``lm_head``, those four projections of every layer, ``model.layers.61*``).
"""
from __future__ import annotations

import json
from pathlib import Path

#: architectures whose MTP layers live in the checkpoint as ``model.layers.{num_hidden_layers + k}``.
MTP_IN_LAYERS = ("DeepseekV3ForCausalLM",)
#: MLA projections NVIDIA's DeepSeek NVFP4 checkpoints leave unquantized.
MLA_LATENT_PROJECTIONS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
NVFP4_FORMATS = ("nvfp4", "w4a16_nvfp4")
MTP_SHARD = "model-mtp.safetensors"


def mtp_layer_ids(config: dict) -> list[int]:
    """Layer ids of the MTP layers a checkpoint's config declares (empty for other architectures)."""
    if not any(a in MTP_IN_LAYERS for a in config.get("architectures") or []):
        return []
    n = int(config.get("num_hidden_layers") or 0)
    return [n + k for k in range(int(config.get("num_nextn_predict_layers") or 0))]


def exclude_patterns(config: dict) -> list[str]:
    """``exclude_modules`` patterns of the MTP layers (``model.layers.{N}*``)."""
    return [f"model.layers.{i}*" for i in mtp_layer_ids(config)]


def quant_cfg_overrides(config: dict, quant: str) -> list[dict]:
    """Model-Optimizer ``quant_cfg`` entries to append for this target: NVFP4 leaves MLA's latent projections
    unquantized on DeepSeek-V3-layout targets; nothing otherwise."""
    if quant not in NVFP4_FORMATS or not config.get("kv_lora_rank"):
        return []
    return [{"quantizer_name": f"*self_attn.{p}*", "enable": False} for p in MLA_LATENT_PROJECTIONS]


def reattach(source: Path, export_dir: Path, config: dict) -> list[str]:
    """Copy the MTP layers' tensors of ``source`` into ``export_dir`` (shard :data:`MTP_SHARD`, index updated)
    and exclude them in ``hf_quant_config.json`` and ``config.json``; returns the tensor names copied."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    prefixes = tuple(f"model.layers.{i}." for i in mtp_layer_ids(config))
    if not prefixes:
        return []
    tensors = {}
    for f in sorted(Path(source).glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            tensors.update({k: st.get_tensor(k) for k in st.keys() if k.startswith(prefixes)})
    if not tensors:
        raise ValueError(f"--target {source}: config declares MTP layers {mtp_layer_ids(config)} but no tensor "
                         f"starts with {prefixes[0]}")
    export_dir = Path(export_dir)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(export_dir / MTP_SHARD),
              metadata={"format": "pt"})
    _index(export_dir, list(tensors))
    _exclude(export_dir, exclude_patterns(config))
    return sorted(tensors)


def _index(export_dir: Path, names: list[str]) -> None:
    """Write (or extend) ``model.safetensors.index.json`` so index-reading loaders see the MTP shard."""
    from safetensors import safe_open

    path = export_dir / "model.safetensors.index.json"
    if path.is_file():
        index = json.loads(path.read_text())
    else:
        weight_map = {}
        for f in sorted(export_dir.glob("*.safetensors")):
            if f.name != MTP_SHARD:
                with safe_open(str(f), "pt") as st:
                    weight_map.update({k: f.name for k in st.keys()})
        index = {"metadata": {}, "weight_map": weight_map}
    index["weight_map"].update({k: MTP_SHARD for k in names})
    index["metadata"]["total_size"] = sum(f.stat().st_size for f in export_dir.glob("*.safetensors"))
    path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _exclude(export_dir: Path, patterns: list[str]) -> None:
    """Add ``patterns`` to the quantization's ``exclude_modules`` (hf_quant_config.json) and ``ignore``
    (config.json's ``quantization_config``, where the export spells it that way) when not already listed."""
    hf = export_dir / "hf_quant_config.json"
    if hf.is_file():
        top = json.loads(hf.read_text())
        q = top.setdefault("quantization", {})
        if "quantized_layers" not in q:
            q["exclude_modules"] = list(q.get("exclude_modules") or []) + [p for p in patterns
                                                                           if p not in (q.get("exclude_modules") or [])]
        hf.write_text(json.dumps(top, indent=4) + "\n")
    cfg_path = export_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict):
        key = "ignore" if "ignore" in qc else "exclude_modules"
        qc[key] = list(qc.get(key) or []) + [p for p in patterns if p not in (qc.get(key) or [])]
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
