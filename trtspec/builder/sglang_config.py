"""Typed model of the ``sglang.args`` that ``trtspec build`` emits
(``python -m sglang.launch_server $(cat sglang.args)``).

SGLang server options trtspec writes, each cited with the version it was read at in
``trtspec/builder/engines/sglang-<version>.yaml`` (fact ``keys``; validate with the version's facts in the pydantic
context, :func:`validate_sglang`): ``--speculative-algorithm`` (``EAGLE3``, ``STANDALONE`` for a separate draft
model, ``NEXTN`` for MTP layers, ``NGRAM``, ``DFLASH``, ``DSPARK`` where the version has them),
``--speculative-num-steps`` (draft depth), ``--speculative-eagle-topk`` (branching per step; 1 = chain),
``--speculative-num-draft-tokens`` (tokens verified per step including the root: ``num_steps + 1`` for a chain, at
most ``1 + topk * num_steps`` for a tree, ``D + 1`` for DFLASH / DSPARK whose steps and top-k are 1),
``--speculative-draft-model-path``, ``--speculative-dspark-block-size`` (DSPARK's gamma = D),
``--speculative-ngram-max-bfs-breadth`` (NGRAM: SGLang sets top-k to it, so 1 keeps a chain),
``--speculative-use-rejection-sampling`` / ``--speculative-use-block-verification`` (flags),
``--speculative-adaptive`` (flag) with ``--speculative-adaptive-config`` (a JSON of per-batch-size step tiers),
``--tp-size`` and ``--ep-size``. SGLang has no per-batch draft length: one setting, or its own adaptive tiers.
"""
from __future__ import annotations

import shlex
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationInfo, model_validator

from trtspec.builder.engine_facts import DEFAULT_VERSION, VERSIONS, EngineVersion, engine_version

#: Versions of SGLang whose server flags are encoded (facts under trtspec/builder/engines/).
SGLANG_VERSIONS: tuple[str, ...] = VERSIONS["sglang"]
#: The version ``--sglang-version`` defaults to.
DEFAULT_SGLANG_VERSION = DEFAULT_VERSION["sglang"]
#: algorithms whose draft is a separate checkpoint (``--speculative-draft-model-path``).
WITH_DRAFT = ("EAGLE3", "STANDALONE", "DFLASH", "DSPARK")
#: algorithms that verify one block of D + 1 tokens in one step (num_steps = top-k = 1).
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")


def sglang_algorithm(drafter: str, version: str = DEFAULT_SGLANG_VERSION) -> Optional[str]:
    """The SGLang ``--speculative-algorithm`` of a trtspec drafter, or None when the version has none for it."""
    return engine_version("sglang", version)["algorithms"].get(drafter)


def facts_of(info: Optional[ValidationInfo]) -> EngineVersion:
    """The SGLang facts in the validation context (``{"sglang": EngineVersion}``), else the default version's."""
    ctx = getattr(info, "context", None) or {}
    return ctx.get("sglang") or engine_version("sglang")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SglangArgs(_Strict):
    """The options in ``sglang.args`` (booleans are store-true flags: written bare when True, left out otherwise)."""

    model_path: str
    tp_size: PositiveInt = 1
    ep_size: Optional[PositiveInt] = None
    max_running_requests: PositiveInt
    context_length: PositiveInt
    kv_cache_dtype: Literal["auto", "fp8_e4m3"] = "auto"
    speculative_algorithm: Literal["EAGLE3", "STANDALONE", "NEXTN", "NGRAM", "DFLASH", "DSPARK"]
    speculative_num_steps: PositiveInt
    speculative_eagle_topk: PositiveInt = 1
    speculative_num_draft_tokens: PositiveInt
    speculative_draft_model_path: Optional[str] = None
    speculative_dspark_block_size: Optional[PositiveInt] = None
    speculative_ngram_max_bfs_breadth: Optional[PositiveInt] = None
    speculative_use_rejection_sampling: Optional[bool] = None
    speculative_use_block_verification: Optional[bool] = None
    speculative_adaptive: Optional[bool] = None
    speculative_adaptive_config: Optional[str] = None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        facts = facts_of(info)
        self._check_keys(facts)
        algo = self.speculative_algorithm
        needs = algo in WITH_DRAFT
        if needs and not self.speculative_draft_model_path:
            raise ValueError(f"--speculative-draft-model-path is required for {algo}")
        if not needs and self.speculative_draft_model_path:
            raise ValueError(f"--speculative-draft-model-path must be unset for {algo}")
        if (self.speculative_dspark_block_size is not None) != (algo == "DSPARK"):
            raise ValueError("--speculative-dspark-block-size is written exactly for DSPARK")
        if algo in BLOCK_ALGORITHMS:
            self._check_block_algorithm()
        else:
            self._check_steps()
        if algo == "NGRAM" and facts.get("ngram_breadth_flag") \
                and self.speculative_ngram_max_bfs_breadth != self.speculative_eagle_topk:
            raise ValueError(f"{facts.label} sets NGRAM's top-k to --speculative-ngram-max-bfs-breadth (default 10): "
                             f"write it equal to --speculative-eagle-topk {self.speculative_eagle_topk}")
        if self.speculative_ngram_max_bfs_breadth is not None and algo != "NGRAM":
            raise ValueError("--speculative-ngram-max-bfs-breadth applies to NGRAM only")
        self._check_verification(facts)
        self._check_adaptive(facts)
        if self.ep_size is not None and self.tp_size % self.ep_size:
            raise ValueError(f"--ep-size {self.ep_size} must divide --tp-size {self.tp_size}")
        return self

    def _check_keys(self, facts: EngineVersion) -> None:
        unknown = [k for k in self.model_dump(exclude_none=True) if k not in facts["keys"]]
        if unknown:
            raise ValueError(f"{facts.label} has no option {', '.join('--' + k.replace('_', '-') for k in unknown)}")
        if self.speculative_algorithm not in facts["algorithms"].values():
            raise ValueError(f"--speculative-algorithm {self.speculative_algorithm} is not mapped for {facts.label} "
                             f"(has: {sorted(set(facts['algorithms'].values()))})")

    def _check_block_algorithm(self) -> None:
        if (self.speculative_num_steps, self.speculative_eagle_topk) != (1, 1):
            raise ValueError(f"{self.speculative_algorithm} runs one step of top-k 1 (SGLang forces both to 1): write "
                             f"--speculative-num-steps 1 --speculative-eagle-topk 1")
        if self.speculative_num_draft_tokens < 2:
            raise ValueError(f"{self.speculative_algorithm} verifies D + 1 >= 2 tokens; got "
                             f"--speculative-num-draft-tokens {self.speculative_num_draft_tokens}")
        gamma = self.speculative_dspark_block_size
        if gamma is not None and self.speculative_num_draft_tokens != gamma + 1:
            raise ValueError(f"DSPARK verifies gamma + 1 = {gamma + 1} tokens; got --speculative-num-draft-tokens "
                             f"{self.speculative_num_draft_tokens}")

    def _check_steps(self) -> None:
        steps, topk, n = self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens
        if topk == 1 and n != steps + 1:
            raise ValueError(f"a chain (--speculative-eagle-topk 1) verifies num_steps + 1 = {steps + 1} tokens; "
                             f"got --speculative-num-draft-tokens {n}")
        if not (steps + 1 <= n <= 1 + topk * steps):
            raise ValueError(f"--speculative-num-draft-tokens {n} must be in [num_steps + 1, 1 + topk * num_steps] "
                             f"= [{steps + 1}, {1 + topk * steps}]")

    def _check_verification(self, facts: EngineVersion) -> None:
        algo = self.speculative_algorithm
        if self.speculative_use_block_verification:
            allowed = facts["block_verification"] or []
            if algo not in allowed:
                raise ValueError(f"{facts.label} has block verification for {allowed or 'no algorithm'}, not {algo}")
            if algo in facts.get("block_verification_needs_rejection_sampling", []) \
                    and not self.speculative_use_rejection_sampling:
                raise ValueError(f"{facts.label} turns --speculative-use-rejection-sampling on for block "
                                 f"verification of {algo}: write it")
        if (self.speculative_use_rejection_sampling or self.speculative_use_block_verification) \
                and self.speculative_eagle_topk != 1:
            raise ValueError("rejection sampling and block verification need --speculative-eagle-topk 1")

    def _check_adaptive(self, facts: EngineVersion) -> None:
        if not self.speculative_adaptive:
            if self.speculative_adaptive_config is not None:
                raise ValueError("--speculative-adaptive-config needs --speculative-adaptive")
            return
        ad = facts.get("adaptive")
        if not ad:
            raise ValueError(f"{facts.label} has no adaptive speculative decoding")
        if self.speculative_algorithm not in ad["algorithms"] or self.speculative_eagle_topk != ad["topk"]:
            raise ValueError(f"{facts.label} adapts {ad['algorithms']} chains (top-k {ad['topk']}) only; got "
                             f"{self.speculative_algorithm} top-k {self.speculative_eagle_topk}")

    def to_args(self) -> list[str]:
        """Command-line words in field order: ``--flag value`` per option, a bare ``--flag`` for a True switch
        (unset options and False switches left out)."""
        words: list[str] = []
        for name, value in self.model_dump(exclude_none=True).items():
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                words += [flag] if value else []
            else:
                words += [flag, str(value)]
        return words

    def to_text(self) -> str:
        """One option per line, values shell-quoted (what ``sglang.args`` holds)."""
        lines, words, i = [], self.to_args(), 0
        while i < len(words):
            if i + 1 < len(words) and not words[i + 1].startswith("--"):
                lines.append(f"{words[i]} {shlex.quote(words[i + 1])}")
                i += 2
            else:
                lines.append(words[i])
                i += 1
        return "".join(line + "\n" for line in lines)

    @classmethod
    def from_text(cls, text: str, version: Optional[str] = None) -> "SglangArgs":
        """Parse ``sglang.args`` back (a bare ``--flag`` is a True switch; unknown flags fail validation)."""
        words = shlex.split(text)
        data: dict = {}
        i = 0
        while i < len(words):
            if not words[i].startswith("--"):
                raise ValueError(f"expected a --flag, got {words[i]!r}")
            name = words[i][2:].replace("-", "_")
            if i + 1 < len(words) and not words[i + 1].startswith("--"):
                data[name], i = words[i + 1], i + 2
            else:
                data[name], i = True, i + 1
        return validate_sglang(data, version)


def validate_sglang(data: dict, version: Optional[str] = None) -> SglangArgs:
    """Validate an ``sglang.args`` mapping against the flags and rules of SGLang ``version``."""
    return SglangArgs.model_validate(data, context={"sglang": engine_version("sglang", version)})
