"""Where Model-Optimizer 0.47's speculative training needs a correction, each with its reason and when it goes.

1. :func:`single_hidden_norm` -- **EAGLE-3 first-layer input** (every transformers version). Model-Optimizer's
   Hugging Face EAGLE-3 layer feeds the attention ``cat(input_layernorm(embeds), hidden_norm(input_layernorm(g)))``:
   it replaces layer 0's ``input_layernorm`` and adds a pre-hook that norms the embeddings with it, but the
   decoder layer still runs that same ``input_layernorm`` over ``g`` first. The engines that serve the export
   (vLLM's ``llama_eagle3``, TensorRT-LLM's and SGLang's Eagle-3 layers, and the trtspec runtime) compute
   ``cat(input_layernorm(embeds), hidden_norm(g))``. A head trained with the extra norm drafts worse than it
   was trained to wherever it is deployed, so layer 0 is made to skip ``input_layernorm`` on ``g`` (the residual
   stays ``g``, as in the engines). Remove when Model-Optimizer's HF EAGLE-3 layer matches the engines'.
2. :func:`rotary_without_device` -- **transformers >= 5.15**: Model-Optimizer 0.47 builds rotary embeddings with
   ``LlamaRotaryEmbedding(config, device=...)`` / ``Qwen3RotaryEmbedding(...)``, an argument those classes lost
   in transformers 5.15 (Model-Optimizer's ``[hf]`` extra pins ``transformers<5.15``). The patch builds them
   without it and moves them to the device. A no-op where the installed transformers still takes ``device``;
   remove when Model-Optimizer > 0.47 stops passing it.

The rest of its CPU quirks need no patch, only settings (:mod:`trtspec.train.modelopt_model`): torch.compile
off, no ``tf32`` (its recipes' default fails on CPU), no Model-Optimizer acceptance validation (it calls
``torch.cuda``; the local runtime measures instead).
"""
from __future__ import annotations

import inspect
import types


def _takes_device(cls) -> bool:
    return "device" in inspect.signature(cls.__init__).parameters


def rotary_without_device() -> list[str]:
    """Patch Model-Optimizer's lazy rotary builders where the rotary classes lost ``device=``; returns what was patched."""
    from modelopt.torch.speculative.plugins import modeling_dflash, modeling_eagle

    patched = []
    if not _takes_device(modeling_eagle.LlamaRotaryEmbedding) and not getattr(
            modeling_eagle.EagleModule._maybe_init_rope, "_trtspec", False):
        def _maybe_init_rope(self, device=None):
            if self.config.eagle_decoder_type == "llama" and not hasattr(self, "rotary_emb"):
                self.rotary_emb = modeling_eagle.LlamaRotaryEmbedding(config=self.config).to(device)

        _maybe_init_rope._trtspec = True
        modeling_eagle.EagleModule._maybe_init_rope = _maybe_init_rope
        patched.append("EagleModule._maybe_init_rope")
    if not _takes_device(modeling_dflash._ROTARY_CLS) and not getattr(
            modeling_dflash.DFlashModule._maybe_init_rotary_emb, "_trtspec", False):
        def _maybe_init_rotary_emb(self, device=None):
            if not hasattr(self, "rotary_emb"):
                self.rotary_emb = modeling_dflash._ROTARY_CLS(config=self._rotary_config).to(device)

        _maybe_init_rotary_emb._trtspec = True
        modeling_dflash.DFlashModule._maybe_init_rotary_emb = _maybe_init_rotary_emb
        patched.append("DFlashModule._maybe_init_rotary_emb")
    return patched


def single_hidden_norm(eagle_module) -> None:
    """Make EAGLE-3 layer 0 feed its attention ``hidden_norm(g)`` instead of ``hidden_norm(input_layernorm(g))``.

    Layer 0's forward becomes the decoder layer's without the ``input_layernorm`` of ``g`` (Model-Optimizer's
    attention pre-hook still norms the embeddings with it and concatenates)::

        h = g + self_attn(g);  out = h + mlp(post_attention_layernorm(h))
    """
    layer = eagle_module.layers[0]
    if not eagle_module.config.use_aux_hidden_state or getattr(layer, "_trtspec_single_norm", False):
        return

    takes = inspect.signature(layer.self_attn.forward).parameters

    def forward(self, hidden_states, *args, **kwargs):
        if "past_key_values" in kwargs and "past_key_values" not in takes and "cache" in takes:
            kwargs["cache"] = kwargs.pop("past_key_values")     # the decoder layer's deprecate_kwarg does this
        attn = self.self_attn(hidden_states=hidden_states, *args, **kwargs)
        h = hidden_states + (attn[0] if isinstance(attn, tuple) else attn)
        return h + self.mlp(self.post_attention_layernorm(h))

    layer.forward = types.MethodType(forward, layer)
    layer._trtspec_single_norm = True
