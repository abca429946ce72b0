"""Block drafters' heads: DFlash (Chen et al. 2026, arXiv 2602.06036) and DSpark, as NVIDIA Model-Optimizer exports them.

A Model-Optimizer export (``DFlashDraftModel``, model type ``qwen3``) holds ``fc``, ``hidden_norm``, decoder
``layers.*`` (Qwen3-style: per-head ``q_norm`` / ``k_norm``), ``norm`` and, for DSpark
(``dflash_config.projector_type: dspark``), a Markov head (``markov_w1`` ``[V, r]``, ``markov_w2`` ``[V, r]``,
``gate_proj`` or ``joint_proj`` by ``markov_head_type``) and an optional ``confidence_proj``. The draft has
no embedding and no lm_head of its own: the target's are used.

One draft forward per block (the maths of Model-Optimizer's ``pseudo_speculative_generate``)::

    c_t   = hidden_norm(fc(cat(target layer outputs of token t at target_layer_ids)))   # context feature, t < n
    block = [root, mask, ..., mask]  (block_size tokens at positions n .. n + block_size - 1)
    h     = embed_target(block)
    per layer:  x = input_layernorm(h)
                q = rope(q_norm(q_proj(x)));  keys = [rope(k_norm(k_proj(c_t))) for t < n] + rope(k_norm(k_proj(x)))
                values = [v_proj(c_t)] + v_proj(x);  h += o_proj(attn(q, keys, values))   # whole block visible
                h += mlp(post_attention_layernorm(h))
    U     = lm_head_target(norm(h))                                                   # [block_size, V]

DFlash drafts ``argmax U[1..block_size-1]`` (``block_size - 1`` drafts; position 0 is the root). DSpark drafts
all ``block_size`` positions (position k predicts the token after block token k) with a Markov bias run left
to right: ``d_{k+1} = argmax(U[k] + markov(d_k, h_k))``, ``d_0`` = root. The context K/V of token t depends on
``c_t`` only, so it is computed once per committed token and cached.

The target layer outputs are the ones Hugging Face returns as ``hidden_states[id + 1]``: the output of layer
``id``, except for the last layer, where it is after the final norm.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from trtspec.runtime.config import ModelConfig, ModelFormatError, RopeConfig, _rope_from

#: ``architectures`` of a block-drafter export.
BLOCK_ARCHITECTURES = ("DFlashDraftModel",)
#: block drafter -> the Model-Optimizer ``projector_type`` it is exported with (None: plain DFlash).
PROJECTOR = {"dflash": None, "dspark": "dspark"}
MARKOV_HEAD_TYPES = ("vanilla", "gated", "rnn")


def block_drafts(drafter: str, block_size: int) -> int:
    """Draft tokens one block of ``block_size`` gives: DFlash ``block_size - 1`` (position 0 is the root),
    DSpark ``block_size`` (every position predicts the next token). The largest D such a draft can run."""
    if drafter not in PROJECTOR:
        raise ValueError(f"drafter must be one of {tuple(PROJECTOR)}, got {drafter!r}")
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2 (a block of 1 drafts nothing useful), got {block_size}")
    return block_size - 1 if drafter == "dflash" else block_size


@dataclass(frozen=True)
class BlockConfig:
    """A DFlash / DSpark draft's ``config.json`` (Model-Optimizer export layout).

    ``layer``: the draft's decoder-layer shape (hidden size = the target's); ``target_layer_ids``: target
    layers whose outputs ``fc`` fuses; ``block_size``: tokens per block (root + masks); ``mask_token_id``:
    the id of the mask token; ``causal``: causal attention inside the block (default bidirectional);
    ``drafter``: ``dflash`` or ``dspark``; DSpark only: ``markov_rank``, ``markov_head_type``,
    ``confidence_head``.
    """

    layer: ModelConfig
    target_layer_ids: tuple[int, ...]
    block_size: int
    mask_token_id: int
    drafter: str = "dflash"
    causal: bool = False
    attention_bias: bool = False
    markov_rank: int = 0
    markov_head_type: str = "vanilla"
    confidence_head: bool = False
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def drafts(self) -> int:
        """Draft tokens per block (:func:`block_drafts`)."""
        return block_drafts(self.drafter, self.block_size)

    def check_target(self, target: ModelConfig) -> None:
        """Refuse a head that cannot run on ``target`` (raises ModelFormatError naming the field)."""
        where = self.source
        L = target.num_hidden_layers
        bad = [i for i in self.target_layer_ids if not 0 <= i < L]
        if bad:
            raise ModelFormatError(f"{where}: dflash_config.target_layer_ids {bad} outside the target's layers "
                                   f"0..{L - 1}")
        if self.layer.vocab_size != target.vocab_size:
            raise ModelFormatError(f"{where}: vocab_size={self.layer.vocab_size} differs from the target's "
                                   f"{target.vocab_size} (the draft uses the target's embedding and lm_head)")
        if not 0 <= self.mask_token_id < target.vocab_size:
            raise ModelFormatError(f"{where}: dflash_config.mask_token_id={self.mask_token_id} is outside the "
                                   f"target's vocabulary 0..{target.vocab_size - 1}")
        if self.layer.hidden_size != target.hidden_size:
            raise ModelFormatError(f"{where}: hidden_size={self.layer.hidden_size} differs from the target's "
                                   f"{target.hidden_size} (the block is embedded with the target's embedding)")


def _int(raw, name: str, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ModelFormatError(f"{where}: {name} must be an integer, got {raw!r}")
    return raw


def read_block_config(model_dir: str | Path) -> BlockConfig:
    """Parse a DFlash / DSpark export's ``config.json``; every refusal names the field (no weights are read)."""
    model_dir = Path(model_dir)
    path = model_dir / "config.json"
    if not path.is_file():
        raise ModelFormatError(f"block draft directory {model_dir}: missing config.json")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelFormatError(f"{path}: not valid JSON ({e})") from e
    where = str(path)
    archs = cfg.get("architectures") or []
    if not any(a in BLOCK_ARCHITECTURES for a in archs):
        raise ModelFormatError(f"{where}: architectures={archs!r} is not a block draft; expected one of "
                               f"{BLOCK_ARCHITECTURES} (NVIDIA Model-Optimizer DFlash / DSpark export)")
    dc = cfg.get("dflash_config") or {}
    projector = dc.get("projector_type")
    if projector not in (None, "dspark"):
        raise ModelFormatError(f"{where}: dflash_config.projector_type {projector!r} is not supported "
                               "(supported: none = DFlash, 'dspark')")
    for key in ("attention_sink_bias", "use_swa"):
        if dc.get(key):
            raise ModelFormatError(f"{where}: dflash_config.{key} is set; the trtspec runtime runs full-attention "
                                   "drafts without attention sinks only")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ModelFormatError(f"{where}: hidden_act {cfg['hidden_act']!r} is not supported (expected 'silu')")
    ids = dc.get("target_layer_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ModelFormatError(f"{where}: dflash_config.target_layer_ids must be a non-empty list of layer ids, "
                               f"got {ids!r}")
    block = _int(cfg.get("block_size", dc.get("block_size")), "block_size", where)
    if block < 2:
        raise ModelFormatError(f"{where}: block_size={block}; a block drafter needs block_size >= 2 (the root "
                               "and at least one mask position)")
    mask = _int(dc.get("mask_token_id"), "dflash_config.mask_token_id", where)
    try:
        layer = _layer_config(cfg, where)
    except (KeyError, TypeError, ValueError) as e:
        raise ModelFormatError(f"{where}: {e}") from e
    rank = dc.get("markov_rank") or 0
    kind = str(dc.get("markov_head_type") or "vanilla").lower()
    if projector == "dspark":
        rank = _int(rank, "dflash_config.markov_rank", where)
        if rank < 1:
            raise ModelFormatError(f"{where}: dflash_config.markov_rank must be >= 1 for DSpark, got {rank}")
        if kind not in MARKOV_HEAD_TYPES:
            raise ModelFormatError(f"{where}: dflash_config.markov_head_type {kind!r}; supported: {MARKOV_HEAD_TYPES}")
    return BlockConfig(layer=layer, target_layer_ids=tuple(ids), block_size=block, mask_token_id=mask,
                       drafter="dspark" if projector == "dspark" else "dflash", causal=bool(dc.get("causal", False)),
                       attention_bias=bool(cfg.get("attention_bias", False)), markov_rank=int(rank),
                       markov_head_type=kind, confidence_head=bool(dc.get("use_confidence_head", False)),
                       source=where, extra={"num_target_layers": cfg.get("num_target_layers")})


def _layer_config(cfg: dict, where: str) -> ModelConfig:
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    rope: RopeConfig = _rope_from(cfg)
    return ModelConfig(
        architecture="DFlashDraftModel", vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=int(cfg["num_hidden_layers"]),
        num_attention_heads=heads, num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads), rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope=rope, max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)), qk_norm=True)


class _Attention(nn.Module):
    """The draft's attention weights (Qwen3 layout: per-head q_norm / k_norm, bias on all four when ``attention_bias``)."""

    def __init__(self, c: ModelConfig, bias: bool):
        super().__init__()
        from trtspec.runtime.models import RMSNorm

        self.h, self.hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.h * self.d, bias=bias)
        self.k_proj = nn.Linear(c.hidden_size, self.hkv * self.d, bias=bias)
        self.v_proj = nn.Linear(c.hidden_size, self.hkv * self.d, bias=bias)
        self.o_proj = nn.Linear(self.h * self.d, c.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.d, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.d, c.rms_norm_eps)

    def keys(self, x, cos, sin):
        """K ``[B, Hkv, T, d]`` (normed, rotated) and V ``[B, Hkv, T, d]`` of inputs ``x [B, T, E]``."""
        from trtspec.runtime.models import apply_rope

        B, T, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, T, self.hkv, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.hkv, self.d).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def queries(self, x, cos, sin):
        from trtspec.runtime.models import apply_rope

        B, T, _ = x.shape
        return apply_rope(self.q_norm(self.q_proj(x).view(B, T, self.h, self.d)).transpose(1, 2), cos, sin)


class BlockHead(nn.Module):
    """A DFlash / DSpark head. Parameter names match the export (``fc``, ``hidden_norm``, ``layers.*``, ``norm``,
    ``markov_*``, ``gate_proj`` / ``joint_proj``, ``confidence_proj``).

    :meth:`context_kv` gives each layer's K/V of context features; :meth:`block_hidden` runs one block over
    cached context K/V; :meth:`markov_step` / :meth:`confidence` are DSpark's heads.
    """

    def __init__(self, cfg: BlockConfig, target_hidden: int):
        super().__init__()
        from trtspec.runtime.models import MLP, RMSNorm

        c = cfg.layer
        self.config = cfg
        self.fc = nn.Linear(len(cfg.target_layer_ids) * target_hidden, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList()
        for _ in range(c.num_hidden_layers):
            layer = nn.Module()
            layer.self_attn = _Attention(c, cfg.attention_bias)
            layer.mlp = MLP(c)
            layer.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            layer.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.layers.append(layer)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if cfg.drafter == "dspark":
            r, V, E = cfg.markov_rank, c.vocab_size, c.hidden_size
            self.markov_w1 = nn.Embedding(V, r)
            self.markov_w2 = nn.Linear(r, V, bias=False)
            if cfg.markov_head_type == "gated":
                self.gate_proj = nn.Linear(E + r, r)
            elif cfg.markov_head_type == "rnn":
                self.joint_proj = nn.Linear(2 * r + E, 3 * r)
            if cfg.confidence_head:
                self.confidence_proj = nn.Linear(E + r, 1)
        self.register_buffer("inv_freq", c.rope.inv_freq(c.head_dim), persistent=False)

    def rope(self, positions: torch.Tensor, dtype):
        from trtspec.runtime.models import rope_cos_sin

        return rope_cos_sin(positions, self.inv_freq, dtype, self.config.layer.rope.attention_scale())

    def features(self, aux: torch.Tensor) -> torch.Tensor:
        """Context features ``hidden_norm(fc(aux))`` ``[..., E]`` of target layer outputs ``aux [..., k*E_t]``."""
        return self.hidden_norm(self.fc(aux.to(self.fc.weight.dtype)))

    def context_kv(self, feats: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (K, V) ``[B, Hkv, T, d]`` of context features ``feats [B, T, E]`` at ``positions [B, T]``."""
        cos, sin = self.rope(positions, feats.dtype)
        return [layer.self_attn.keys(feats, cos, sin) for layer in self.layers]

    def block_hidden(self, embeds, positions, ctx_k, ctx_v, ctx_visible) -> torch.Tensor:
        """Final-normed hidden states ``[B, T, E]`` of a block.

        Args:
            embeds: ``[B, T, E]`` target embeddings of the block tokens; positions: int64 ``[B, T]``;
            ctx_k, ctx_v: per layer ``[B, Hkv, W, d]`` cached context K/V; ctx_visible: bool ``[B, W]``,
                the context slots each request has (the rest is padding).
        """
        import torch.nn.functional as F

        B, T, _ = embeds.shape
        cos, sin = self.rope(positions, embeds.dtype)
        inner = torch.ones(T, T, dtype=torch.bool, device=embeds.device)
        if self.config.causal:
            inner = inner.tril()
        mask = torch.cat([ctx_visible[:, None, :].expand(B, T, -1), inner.expand(B, T, T)], dim=-1)[:, None]
        h = embeds
        for i, layer in enumerate(self.layers):
            att = layer.self_attn
            x = layer.input_layernorm(h)
            q = att.queries(x, cos, sin)
            k, v = att.keys(x, cos, sin)
            keys, values = torch.cat([ctx_k[i], k], dim=2), torch.cat([ctx_v[i], v], dim=2)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=att.h != att.hkv)
            h = h + att.o_proj(out.transpose(1, 2).reshape(B, T, att.h * att.d))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)

    def markov_step(self, prev: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor | None):
        """DSpark's bias for one block position: ``(bias [B, V], state)`` from the previous token ``prev [B]``,
        the position's hidden state ``[B, E]`` and (``rnn``) the recurrent state ``[B, r]``."""
        e = self.markov_w1(prev)
        kind = self.config.markov_head_type
        if kind == "vanilla":
            return self.markov_w2(e), state
        if kind == "gated":
            gate = torch.sigmoid(self.gate_proj(torch.cat([hidden, e], dim=-1)))
            return self.markov_w2(gate * e), state
        if state is None:
            state = e.new_zeros(e.shape[0], self.config.markov_rank)
        g, cand, out = self.joint_proj(torch.cat([state, e, hidden], dim=-1)).chunk(3, dim=-1)
        g = torch.sigmoid(g)
        state = g * state + (1.0 - g) * torch.tanh(cand)
        return self.markov_w2(torch.tanh(out)), state

    def confidence(self, prev: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """DSpark's confidence head: probability ``[B]`` that the draft at this position is accepted."""
        if not self.config.confidence_head:
            raise ValueError(f"{self.config.source}: this DSpark head has no confidence head "
                             "(dflash_config.use_confidence_head is false)")
        return torch.sigmoid(self.confidence_proj(torch.cat([hidden, self.markov_w1(prev)], dim=-1))[..., 0])


def capture_features(target, cfg: BlockConfig, aux: torch.Tensor) -> torch.Tensor:
    """Target layer outputs as the head was trained on them: the last layer's through the target's final norm
    (Hugging Face's ``hidden_states[-1]``). ``aux [..., k*E]`` in ``target_layer_ids`` order."""
    last = target.config.num_hidden_layers - 1
    if last not in cfg.target_layer_ids:
        return aux
    E = target.config.hidden_size
    i = cfg.target_layer_ids.index(last)
    aux = aux.clone()
    aux[..., i * E:(i + 1) * E] = target.model.norm(aux[..., i * E:(i + 1) * E])
    return aux


@torch.no_grad()
def load_block_head(model_dir: str | Path, target, *, device="cpu", dtype=torch.float32) -> BlockHead:
    """Load a DFlash / DSpark export for ``target`` (a runtime Transformer); checks run before the weights load."""
    from trtspec.runtime.config import read_quant_config
    from trtspec.runtime.models import _load_into
    from trtspec.runtime.weights import load_safetensors

    model_dir = Path(model_dir)
    cfg = read_block_config(model_dir)
    cfg.check_target(target.config)
    if read_quant_config(model_dir) is not None:
        raise ModelFormatError(f"{model_dir}: a quantized block draft is not supported (export it unquantized)")
    tensors = {k: v for k, v in load_safetensors(model_dir).items() if "rotary_emb" not in k}
    head = BlockHead(cfg, target.config.hidden_size)
    extra = sorted(set(tensors) - set(head.state_dict()) - {"embed_tokens.weight", "lm_head.weight"})
    if extra:
        raise ModelFormatError(f"{model_dir}: unexpected tensors {extra[:5]} for a {cfg.drafter} head "
                               f"(markov_head_type={cfg.markov_head_type}, confidence head {cfg.confidence_head})")
    _load_into(head, tensors, model_dir)
    return head.to(device=device, dtype=dtype).eval()
