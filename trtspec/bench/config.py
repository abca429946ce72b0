"""Typed settings of ``trtspec bench`` and ``trtspec profile``; the CLI takes its defaults and
help texts from here (``help_of``)."""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from trtspec.bench.metrics import CI_METHODS
from trtspec.runtime.params import DRAFTERS
ENGINES = ("auto", "vllm", "trtllm", "sglang")


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class BenchConfig:
    """What to measure and where. Generation settings are in ``runners.RunConfig``."""

    dataset: str = _f("builtin", "Prompts: 'builtin' (the project's SPEED-Bench-format sample) or a .jsonl/.parquet "
                                 "file or a directory in the SPEED-Bench layout.")
    config: str = _f("qualitative", "SPEED-Bench config inside a dataset directory: qualitative or throughput_<N>k.")
    limit_per_category: int | None = _f(None, "Keep the first N prompts of each category (default: all).")
    code_prompts: int = _f(8, "Held-out standard-library code prompts added to the builtin sample's coding category.")
    drafter: str = _f("draft_model", "Drafter of the local runtime: " + ", ".join(DRAFTERS) + ".")
    draft_len: int = _f(4, "Draft length D (tokens proposed per step); the acceptance profile has D rates.")
    verify: str = _f("greedy", "Verification of the local runtime: greedy, sample or block.")
    speculation: str = _f("static", "Draft lengths of the local runtime: static (--draft-len every step) or adaptive "
                                    "(each step 0..--draft-len, chosen from the device's step costs and each "
                                    "request's live acceptance).")
    device: str = _f("cpu", "Device of the local runtime: cpu or cuda.")
    dtype: str = _f("float32", "Weights/activations dtype of the local runtime: float32, bfloat16 or float16.")
    unquantized_target: str = _f("auto", "Local runtime, quantized --target: the unquantized checkpoint benched "
                                         "side by side on the same prompts and draft ('auto': the source checkpoint "
                                         "the bundle's manifest records; 'none': no comparison; or a directory).")
    engine: str = _f("auto", "Server metric names: auto, vllm, trtllm or sglang.")
    ci: str = _f("bootstrap", "Confidence intervals of mean AL: bootstrap (over requests, 2000 resamples, fixed seed) "
                              "or normal (delta method).")
    out: str = _f("bench_out", "Output directory: acceptance.json, bench.json, report.md, PNG plots.")

    def __post_init__(self) -> None:
        if self.limit_per_category is not None and self.limit_per_category < 1:
            raise ValueError(f"limit_per_category={self.limit_per_category}: expected >= 1")
        if self.code_prompts < 0:
            raise ValueError(f"code_prompts={self.code_prompts}: expected >= 0")
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter={self.drafter!r}: expected one of {DRAFTERS}")
        if not 0 <= self.draft_len <= 64:
            raise ValueError(f"draft_len={self.draft_len}: expected 0..64")
        if self.speculation not in ("static", "adaptive"):
            raise ValueError(f"speculation={self.speculation!r}: expected static or adaptive")
        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r}: expected one of {ENGINES}")
        if self.ci not in CI_METHODS:
            raise ValueError(f"ci={self.ci!r}: expected one of {CI_METHODS}")


def default_of(cls, name: str):
    for f in fields(cls):
        if f.name == name:
            return None if f.default is MISSING else f.default
    raise KeyError(name)


def help_of(cls, name: str) -> str:
    for f in fields(cls):
        if f.name == name:
            d = f.default
            return f"{f.metadata.get('help', '')} [default: {d}]" if d is not None else f.metadata.get("help", "")
    raise KeyError(name)


def parse_int_list(text: str, name: str) -> tuple[int, ...]:
    """``"1,4,16"`` -> (1, 4, 16); ``"0..8"`` -> (0, 1, ..., 8); both forms may be mixed."""
    out: list[int] = []
    try:
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            if ".." in part:
                lo, hi = (int(x) for x in part.split("..", 1))
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected integers like '1,4,16' or a range like '0..8'") from None
    if not out or any(v < 0 for v in out):
        raise ValueError(f"{name}={text!r}: expected at least one non-negative integer")
    return tuple(sorted(set(out)))
