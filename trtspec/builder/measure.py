"""``trtspec build --acceptance measure``: measure the pair's acceptance with the local reference runtime.

What runs: :class:`trtspec.bench.runners.LocalRunner` (the machinery of ``trtspec bench``) on the built-in
SPEED-Bench-format sample (``trtspec/bench/data/sample.jsonl`` plus ``BenchConfig.code_prompts`` held-out
standard-library code prompts), greedy, every turn, ``CONCURRENCY`` requests per batch, at the largest D the
planner considers (``PlanRequest.max_draft_len``; DFlash / DSpark: the drafts of their block). With greedy
verification the accepted prefix of a D-token chain does not depend on D for these chain drafters (draft_model,
eagle3 and ngram propose the same first k tokens at any D >= k; a DFlash / DSpark block is always run whole), so one
run at the largest D gives a_1..a_D for every smaller D. The profile is written into the bundle as ``acceptance.json``
(``trtspec.acceptance/v1``, what ``trtspec bench`` writes) and the recipe is planned from it.

When it runs: the drafter is one the runtime implements (``trtspec.runtime.params.DRAFTERS``), the runtime reads
both checkpoints (its own config readers), neither is already quantized, and the pair **fits**:
``need = (target + draft parameters) x bytes per element of the runtime dtype (float32 on --device cpu, bfloat16 on
cuda) x HEADROOM`` must not exceed the available memory (``MemAvailable`` of ``/proc/meminfo`` on cpu, the free
memory ``torch.cuda.mem_get_info`` reports on cuda). ``HEADROOM`` = 1.5 covers the KV cache of short sample
prompts, activations and the vocabulary-wide logits of D+1 positions. Otherwise :class:`BuildInputError` names the
three ways out (a measured file, a prior, or ``al=`` / ``curve=``). All of this is checked before any weight loads.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from trtspec.builder.options import BuildOptions
from trtspec.builder.validate import BuildInputError, Checkpoint, ValidatedInputs

MEASURE = "measure"
HEADROOM = 1.5
#: requests per batch of the measurement: greedy acceptance does not depend on it (up to float ties), run time does
#: (about 2.6x faster than one at a time for the demo pair on CPU).
CONCURRENCY = 8
ACCEPTANCE_FILE = "acceptance.json"
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


def runtime_dtype(device: str) -> str:
    """The dtype the measurement runs in: float32 on CPU (no fast bf16 matmuls there), bfloat16 on CUDA."""
    return "bfloat16" if device == "cuda" else "float32"


def num_parameters(ckpt: Checkpoint) -> int:
    """Elements of every tensor in the checkpoint's safetensors headers."""
    return sum(math.prod(int(x) for x in t.get("shape", ())) for t in ckpt.tensors.values())


def available_memory(device: str) -> tuple[int, str]:
    """(bytes, what was read) of memory the measurement may use on ``device``."""
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free), "free CUDA memory (torch.cuda.mem_get_info)"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable (/proc/meminfo)"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free physical pages (sysconf)"


def ways_out(reason: str, opts: BuildOptions, *, local_bench: bool = False) -> str:
    """The error of a pair that cannot be measured here: ``reason`` and the three other ways to give acceptance.
    ``local_bench``: the runtime can run this pair (elsewhere, e.g. on a machine with more memory)."""
    from trtspec.recipes.acceptance import prior_names

    draft = f" --draft {opts.draft}" if opts.draft else ""
    local = (f"`trtspec bench --target {opts.target}{draft} --drafter {opts.drafter} --draft-len 16` on a machine "
             "where the pair fits, or by " if local_bench else "")
    return (f"--acceptance measure: {reason}. Give the acceptance another way:\n"
            f"  1. a measured profile: --acceptance acceptance.json, written by {local}`trtspec bench --server "
            "http://HOST:PORT --model NAME --engine trtllm|vllm|sglang` against a server running the pair;\n"
            f"  2. a published prior: --acceptance prior:NAME (known: {', '.join(prior_names()) or 'none'});\n"
            "  3. a figure you have: --acceptance al=2.4@3 (mean AL 2.4 measured at D=3) or "
            "--acceptance curve=1.78,2.38,2.83 (mean AL at D=1, 2, 3).")


@dataclass
class Measurement:
    """A checked ``--acceptance measure`` job; :meth:`run` fills ``doc`` / ``profile`` / ``took_s``."""

    target: Path
    draft: Optional[Path]
    drafter: str
    draft_len: int
    device: str
    dtype: str
    prompts: list
    max_new_tokens: int
    need_bytes: int
    available_bytes: int
    memory_source: str
    doc: Optional[dict] = None
    profile: Any = None
    took_s: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def turns(self) -> int:
        return sum(len(p.turns) for p in self.prompts)

    def run(self, advance: Callable[[], None]) -> str:
        """Load the pair, generate, summarize; returns the stage's summary line."""
        from trtspec.bench.runners import LocalRunner, RunConfig, build_run_profile
        from trtspec.recipes.acceptance import profile_from_doc

        t0 = time.perf_counter()
        runner = LocalRunner.load(self.target, self.draft, drafter=self.drafter, draft_len=self.draft_len,
                                  verify="greedy", device=self.device, dtype=self.dtype)
        cfg = RunConfig(max_new_tokens=self.max_new_tokens, concurrency=CONCURRENCY)
        run = runner.run(self.prompts, cfg, progress=lambda n: [advance() for _ in range(n)])
        prof = build_run_profile(run, drafter=self.drafter, draft_len=self.draft_len, ci_method="bootstrap",
                                 seed=cfg.seed)
        self.took_s = time.perf_counter() - t0
        o = prof.overall
        what = (f"measured by trtspec build --acceptance measure in {self.took_s:.1f} s: {len(self.prompts)} prompts "
                f"({self.turns} turns) of the built-in SPEED-Bench-format sample x {self.max_new_tokens} new tokens, "
                f"greedy, D={self.draft_len}, {CONCURRENCY} requests per batch, {self.dtype} on {self.device}; "
                f"{run.source}")
        prof = dataclasses.replace(prof, source=what, extra={**prof.extra, "measurement": {
            "took_s": round(self.took_s, 3), "prompts": len(self.prompts), "turns": self.turns,
            "max_new_tokens": self.max_new_tokens, "concurrency": CONCURRENCY, "device": self.device,
            "dtype": self.dtype}})
        self.doc = prof.to_dict()
        self.profile = profile_from_doc(self.doc, f"bundle {ACCEPTANCE_FILE}")
        self.notes.append(f"acceptance measured with the local runtime in {self.took_s:.1f} s (mean AL "
                          f"{o.mean_al:.3f} at D={self.draft_len} over {o.num_steps} steps); written to "
                          f"{ACCEPTANCE_FILE} and used for the recipe")
        return (f"mean AL {o.mean_al:.3f} at D={self.draft_len} over {o.num_steps} steps, a_1..a_4 = "
                + ", ".join(f"{a:.2f}" for a in o.rates[:4]) + f"; took {self.took_s:.1f} s on {self.device}")

    def write(self, bundle_dir: Path) -> Path:
        """``<bundle_dir>/acceptance.json`` (the bundle directory is itself renamed into place atomically)."""
        if self.doc is None:
            raise RuntimeError("Measurement.write before run")
        path = Path(bundle_dir) / ACCEPTANCE_FILE
        path.write_text(json.dumps(self.doc, indent=2) + "\n", encoding="utf-8")
        return path


def _check_runtime_reads(opts: BuildOptions, vi: ValidatedInputs) -> None:
    from trtspec.runtime.config import ModelFormatError, read_eagle3_config, read_model_config
    from trtspec.runtime.params import DRAFTERS

    if opts.drafter not in DRAFTERS:
        raise BuildInputError(ways_out(f"the local runtime has no {opts.drafter} drafter (it runs "
                                       f"{', '.join(DRAFTERS)})", opts))
    for role, ckpt in (("--target", vi.target), ("--draft", vi.draft)):
        if ckpt is not None and ckpt.config.get("quantization_config"):
            qm = ckpt.config["quantization_config"].get("quant_method", "?")
            raise BuildInputError(ways_out(f"{role} {ckpt.path} is already quantized (quant_method {qm}); the "
                                           "local runtime runs unquantized checkpoints", opts))
    try:
        read_model_config(vi.target.path)
        if vi.draft is not None and opts.drafter in ("dflash", "dspark"):
            from trtspec.runtime.block_head import read_block_config

            read_block_config(vi.draft.path).check_target(read_model_config(vi.target.path))
        elif vi.draft is not None:
            (read_eagle3_config if opts.drafter == "eagle3" else read_model_config)(vi.draft.path)
    except ModelFormatError as e:
        raise BuildInputError(ways_out(f"the local runtime cannot run this pair ({e})", opts)) from None


def _check_plannable(opts: BuildOptions, vi: ValidatedInputs) -> None:
    """What the recipe stage reads besides acceptance, checked now so that a typo does not cost a measurement."""
    from trtspec.recipes.arch import load_architecture
    from trtspec.recipes.errors import RecipeError
    from trtspec.recipes.gpus import load_gpu

    try:
        load_gpu(opts.gpu)
    except RecipeError as e:
        raise BuildInputError(f"--gpu {opts.gpu}: {e}") from None
    for role, ckpt in (("--target", vi.target), ("--draft", vi.draft if opts.drafter == "draft_model" else None)):
        if ckpt is not None:
            try:
                load_architecture(str(ckpt.path))
            except RecipeError as e:
                raise BuildInputError(f"{role} {ckpt.path}: the planner cannot read it ({e})") from None


def plan_measurement(opts: BuildOptions, vi: ValidatedInputs) -> Measurement:
    """Check that ``--acceptance measure`` can run for the validated pair (module docstring) and that the recipe
    stage can use its result; loads no weights."""
    from trtspec.bench.config import BenchConfig
    from trtspec.bench.datasets import load_prompts
    from trtspec.recipes.optimizer import PlanRequest

    _check_runtime_reads(opts, vi)
    _check_plannable(opts, vi)
    dtype = runtime_dtype(opts.device)
    params = num_parameters(vi.target) + (num_parameters(vi.draft) if vi.draft is not None else 0)
    need = int(params * _DTYPE_BYTES[dtype] * HEADROOM)
    avail, source = available_memory(opts.device)
    if need > avail:
        raise BuildInputError(ways_out(
            f"the pair does not fit on --device {opts.device}: {params / 1e9:.2f} B parameters x "
            f"{_DTYPE_BYTES[dtype]} bytes ({dtype}) x {HEADROOM} headroom = {need / 2**30:.1f} GiB, "
            f"{source} is {avail / 2**30:.1f} GiB", opts, local_bench=True))
    prompts = load_prompts("builtin", limit_per_category=opts.measure_prompts,
                           code_prompts=BenchConfig().code_prompts)
    draft_len = int(PlanRequest.__dataclass_fields__["max_draft_len"].default)
    if opts.drafter in ("dflash", "dspark") and vi.draft is not None:   # a block drafts what its block gives
        from trtspec.runtime.block_head import read_block_config

        draft_len = read_block_config(vi.draft.path).drafts
    return Measurement(target=vi.target.path, draft=vi.draft.path if vi.draft is not None else None,
                       drafter=opts.drafter, draft_len=draft_len,
                       device=opts.device, dtype=dtype, prompts=prompts, max_new_tokens=opts.measure_new_tokens,
                       need_bytes=need, available_bytes=avail, memory_source=source)


def with_measure_hint(exc: Exception, opts: BuildOptions) -> Exception:
    """A 'no acceptance source' error of a build that gave no ``--acceptance``, pointing at ``--acceptance measure``."""
    from trtspec.recipes.errors import AcceptanceError

    if opts.acceptance is not None or not isinstance(exc, AcceptanceError):
        return exc
    return AcceptanceError(f"{exc}; or curve=AL1,AL2,... (mean AL at D=1, 2, ...); or let the build measure it on "
                           "the local runtime: --acceptance measure")
