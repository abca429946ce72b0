"""How one engine instance spreads over GPUs: the parallelism options ``trtspec plan`` and ``trtspec build`` share.

``tp`` is the tensor-parallel size (the GPUs of one engine instance); ``ep`` is how many of them split the MoE
layers' experts (it divides ``tp``; the experts' own tensor parallelism is ``tp // ep``). TensorRT-LLM's
``moe_expert_parallel_size`` / ``moe_tensor_parallel_size``, SGLang's ``--ep-size`` and vLLM's expert-parallel
switch are written from these (``trtspec.builder.emit``); the planner prices MoE layers with them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parallelism:
    """Tensor and expert parallelism of one engine instance (validated on construction)."""

    tp: int = 1
    ep: int = 1

    def __post_init__(self):
        if not isinstance(self.tp, int) or self.tp < 1:
            raise ValueError(f"--tp must be a positive integer, got {self.tp!r}")
        if not isinstance(self.ep, int) or self.ep < 1 or self.tp % self.ep:
            raise ValueError(f"--ep must be a positive integer that divides --tp {self.tp}, got {self.ep!r}")

    @property
    def moe_tp(self) -> int:
        """Tensor parallelism inside each expert (``tp // ep``)."""
        return self.tp // self.ep


#: help texts of the options (units and defaults once, here).
HELP = {
    "tp": "Tensor-parallel GPUs of one engine instance.",
    "ep": "Expert-parallel GPUs of the MoE layers (divides --tp; each expert is tensor-parallel over --tp / --ep; "
          "1: experts tensor-parallel over all --tp GPUs).",
}
DEFAULTS = Parallelism()
