"""Mixture of experts in the DeepSeek-V3 layout: routed experts, shared experts, the grouped top-k router.

For the N tokens of a batch (``x`` ``[N, E]``)::

    s      = sigmoid(x W_gate^T)                        # [N, n_routed] scores, float32
    choice = s + e_score_correction_bias                # the bias steers the choice, never the weights
    group  = sum of the 2 best `choice` in each of n_group groups; keep the topk_group best groups
    idx    = top num_experts_per_tok experts of `choice` inside the kept groups
    w      = s[idx] (/ sum when norm_topk_prob) * routed_scaling_factor
    y      = sum_k w_k expert_{idx_k}(x) + shared_experts(x)

Experts are SwiGLU MLPs named as the checkpoint stores them (``experts.{e}.gate_proj`` ...), so a
quantized checkpoint's per-expert layers load through :mod:`trtspec.runtime.quant` like any linear.
Each expert runs once per forward on the tokens routed to it (gathered, computed, scattered back with
their weights), in ascending expert order.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.runtime.deepseek_config import DeepseekConfig


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with ``intermediate`` hidden units."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GroupedTopkRouter(nn.Module):
    """DeepSeek-V3's router (``mlp.gate``): ``weight`` ``[n_routed, E]``, ``e_score_correction_bias`` ``[n_routed]``."""

    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        self.n, self.k = cfg.n_routed_experts, cfg.num_experts_per_tok
        self.groups, self.topk_group = cfg.n_group, cfg.topk_group
        self.norm, self.scaling = cfg.norm_topk_prob, cfg.routed_scaling_factor
        self.weight = nn.Parameter(torch.zeros(self.n, cfg.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(self.n))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x ``[N, E]`` -> (expert ids int64 ``[N, k]``, weights float32 ``[N, k]``)."""
        N = x.shape[0]
        scores = F.linear(x.float(), self.weight.float()).sigmoid()                  # [N, n]
        choice = scores + self.e_score_correction_bias.float()
        grouped = choice.view(N, self.groups, self.n // self.groups)
        group_score = grouped.topk(2, dim=-1).values.sum(-1)                         # [N, groups]
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, group_score.topk(self.topk_group, dim=-1).indices, True)
        choice = choice.masked_fill(~keep.repeat_interleave(self.n // self.groups, dim=1), float("-inf"))
        idx = choice.topk(self.k, dim=-1).indices                                   # [N, k]
        w = scores.gather(1, idx)
        if self.norm:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * self.scaling


class MoE(nn.Module):
    """Routed experts (``experts.{e}``), shared experts (``shared_experts``, one SwiGLU of
    ``moe_intermediate_size * n_shared_experts``) and the router (``gate``)."""

    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        H, inter = cfg.hidden_size, cfg.moe_intermediate_size
        self.experts = nn.ModuleList(SwiGLU(H, inter) for _ in range(cfg.n_routed_experts))
        self.gate = GroupedTopkRouter(cfg)
        self.shared_experts = SwiGLU(H, inter * cfg.n_shared_experts) if cfg.n_shared_experts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., E]`` -> ``[..., E]``."""
        flat = x.reshape(-1, x.shape[-1])                                            # [N, E]
        idx, w = self.gate(flat)
        out = torch.zeros_like(flat)
        for e in torch.unique(idx).tolist():                                         # ascending
            tok, slot = (idx == e).nonzero(as_tuple=True)
            y = self.experts[e](flat[tok]) * w[tok, slot, None].to(flat.dtype)
            out.index_add_(0, tok, y)
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat)
        return out.view(x.shape)
