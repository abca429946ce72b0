"""Typed model of the ``sglang.args`` that ``trtspec build`` emits
(``python -m sglang.launch_server $(cat sglang.args)``).

Documented SGLang server options trtspec writes: ``--speculative-algorithm`` (``EAGLE3``,
``STANDALONE`` for a separate draft model, ``NEXTN`` for MTP layers, ``NGRAM``),
``--speculative-num-steps`` (draft depth), ``--speculative-eagle-topk`` (branching per step; 1 =
chain), ``--speculative-num-draft-tokens`` (tokens verified per step including the root, so a chain
has ``num_steps + 1`` and a tree at most ``1 + topk * num_steps``), ``--speculative-draft-model-path``.
SGLang has no per-batch draft length: one setting, chosen by the recipe. Each flag is cited, with
the commit it was read at, in ``trtspec/builder/engines/sglang-<version>.yaml`` (fact ``keys``);
the drafter -> algorithm map is that file's ``algorithms`` (:func:`sglang_algorithm`).
"""
from __future__ import annotations

import shlex
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

from trtspec.builder.engine_facts import DEFAULT_VERSION, engine_version

#: The SGLang version whose server flags are encoded (the only one so far).
DEFAULT_SGLANG_VERSION = DEFAULT_VERSION["sglang"]


def sglang_algorithm(drafter: str, version: str = DEFAULT_SGLANG_VERSION) -> Optional[str]:
    """The SGLang ``--speculative-algorithm`` of a trtspec drafter, or None when trtspec emits none for it."""
    return engine_version("sglang", version)["algorithms"].get(drafter)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SglangArgs(_Strict):
    """The options in ``sglang.args``."""

    model_path: str
    tp_size: PositiveInt = 1
    max_running_requests: PositiveInt
    context_length: PositiveInt
    kv_cache_dtype: Literal["auto", "fp8_e4m3"] = "auto"
    speculative_algorithm: Literal["EAGLE3", "STANDALONE", "NEXTN", "NGRAM"]
    speculative_num_steps: PositiveInt
    speculative_eagle_topk: PositiveInt = 1
    speculative_num_draft_tokens: PositiveInt
    speculative_draft_model_path: Optional[str] = None

    @model_validator(mode="after")
    def _check(self):
        needs = self.speculative_algorithm in ("EAGLE3", "STANDALONE")
        if needs and not self.speculative_draft_model_path:
            raise ValueError(f"--speculative-draft-model-path is required for {self.speculative_algorithm}")
        if not needs and self.speculative_draft_model_path:
            raise ValueError(f"--speculative-draft-model-path must be unset for {self.speculative_algorithm}")
        steps, topk, n = self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens
        if topk == 1 and n != steps + 1:
            raise ValueError(f"a chain (--speculative-eagle-topk 1) verifies num_steps + 1 = {steps + 1} tokens; "
                             f"got --speculative-num-draft-tokens {n}")
        if not (steps + 1 <= n <= 1 + topk * steps):
            raise ValueError(f"--speculative-num-draft-tokens {n} must be in [num_steps + 1, 1 + topk * num_steps] "
                             f"= [{steps + 1}, {1 + topk * steps}]")
        return self

    def to_args(self) -> list[str]:
        """Command-line words, ``--flag value`` per option, in field order (unset options left out)."""
        words: list[str] = []
        for name, value in self.model_dump(exclude_none=True).items():
            words += ["--" + name.replace("_", "-"), str(value)]
        return words

    def to_text(self) -> str:
        """One ``--flag value`` per line, shell-quoted (what ``sglang.args`` holds)."""
        w = self.to_args()
        return "".join(f"{w[i]} {shlex.quote(w[i + 1])}\n" for i in range(0, len(w), 2))

    @classmethod
    def from_text(cls, text: str) -> "SglangArgs":
        """Parse ``sglang.args`` back (unknown flags fail validation)."""
        words = shlex.split(text)
        if len(words) % 2:
            raise ValueError("sglang.args must hold --flag value pairs")
        data = {}
        for i in range(0, len(words), 2):
            if not words[i].startswith("--"):
                raise ValueError(f"expected a --flag, got {words[i]!r}")
            data[words[i][2:].replace("-", "_")] = words[i + 1]
        return cls.model_validate(data)
