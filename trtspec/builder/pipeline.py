"""``trtspec build`` as a sequence of stages, each with a progress bar and a one-line summary.

validate -> acceptance (only with ``--acceptance measure``: ``trtspec.builder.measure``) -> recipe -> quantize
(target, draft; cached) -> export (into the bundle) -> emit (llm_api.yaml, vllm.yaml, sglang.args, recipe.yaml,
README.md) -> triton (when ``trtspec.triton.repository`` is installed) -> manifest + atomic rename onto ``--out``.
"""
from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from trtspec.builder.bundle import AtomicDir, QuantCache, hash_files, sha256_file, tool_versions, write_manifest
from trtspec.builder.interrupt import interruptible
from trtspec.builder.options import TENSORRT_QUANTS, BuildOptions, HEAD_DRAFTERS

STAGES = ("validate", "acceptance", "recipe", "quantize", "export", "emit", "tensorrt", "triton", "manifest")


class BuildError(RuntimeError):
    """A stage failed; ``stage`` names it. Nothing was written to ``--out``."""

    def __init__(self, stage: str, cause: BaseException):
        super().__init__(f"build failed in stage '{stage}': {cause}")
        self.stage, self.cause = stage, cause


@dataclass
class BuildResult:
    """What a build (or a dry run) produced."""

    out: Path
    dry_run: bool
    summaries: list[str] = field(default_factory=list)
    manifest: Optional[dict] = None
    plan: Optional[dict] = None


def demo_options(opts: BuildOptions) -> BuildOptions:
    """Fill target/draft/acceptance from the demo pair (``trtspec.zoo.demo_paths()``; for ``--drafter mtp`` the
    DeepSeek-V3-layout demo, ``trtspec.zoo.deepseek_path()``) when no target is given."""
    if opts.target is not None:
        return opts
    if opts.drafter not in ("draft_model", "eagle3", "dflash", "dspark", "mtp"):
        raise ValueError("--target is required unless building the demo pair (--drafter draft_model, eagle3, "
                         "dflash or dspark) or the DeepSeek-V3-layout demo (--drafter mtp)")
    try:
        from trtspec.zoo import demo_acceptance_path, demo_pair
        target, demo_drafter = demo_pair(opts.drafter)
        draft = opts.draft if opts.draft is not None else demo_drafter
        acc = demo_acceptance_path(opts.drafter)
    except (ImportError, FileNotFoundError) as e:
        raise ValueError(f"--target not given and the demo pair is not available ({e})") from None
    update: dict[str, Any] = {"target": Path(target), "draft": None if draft is None else Path(draft)}
    if opts.acceptance is None and acc.is_file():
        update["acceptance"] = str(acc)
    return opts.model_copy(update=update)


def default_resolver(spec: str, *, draft=None, draft_quant="none", **kw):
    """``trtspec.recipes.api.resolve_recipe`` (imported on use).

    An ``auto`` recipe that needs more than ``resolve_recipe`` takes is planned through the same module's
    ``build_request`` / ``plan`` / ``recipe_from_plan``: a draft_model drafter (the planner needs the draft's
    architecture), a drafter with one possible D (DSpark: its block) or a largest D (DFlash: block_size - 1), and
    expert parallelism (``ep`` > 1, priced by the planner's MoE model as ``trtspec plan --ep`` prices it).
    """
    import inspect

    try:
        from trtspec.recipes import api
    except ImportError as e:
        raise RuntimeError(f"the recipe layer (trtspec.recipes.api) is not available: {e}") from None
    draft_len = kw.pop("draft_len", None)
    cap = kw.pop("max_draft_len", None)
    ep = kw.pop("ep", 1)
    extra: dict = {}
    if draft_len is not None:
        extra.update(max_draft_len=draft_len, draft_len=draft_len)
    elif cap is not None:
        extra["max_draft_len"] = cap
    if draft is not None and kw.get("drafter") == "draft_model":
        if "draft_model" in inspect.signature(api.resolve_recipe).parameters and not extra and ep == 1:
            return api.resolve_recipe(spec, draft_model=str(draft), **kw)
        extra.update(draft_model=str(draft), draft_quant=None if draft_quant == "none" else draft_quant)
    if spec != "auto" or (not extra and ep == 1):
        return api.resolve_recipe(spec, **kw)
    req = api.build_request(model=kw["model"], gpu=kw["gpu"], drafters=kw["drafter"], acceptance=kw["acceptance"],
                            tp=kw["tp"], ep=ep, quant=kw["quant"], context=kw["context"],
                            calibration=kw["calibration"], max_batch_size=kw["max_batch_size"], **extra)
    return api.recipe_from_plan(api.plan(req), model_label=Path(kw["model"]).name, max_batch_size=kw["max_batch_size"])


class _Stages:
    """Runs named stages under one rich Progress; prints one summary line per stage."""

    def __init__(self, console, quiet: bool):
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console, self.quiet = console, quiet
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description:<28}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                 console=console, transient=True, disable=quiet)
        self.summaries: list[str] = []

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def run(self, name: str, fn: Callable[[Callable[[], None]], str], total: int = 1):
        task = self.progress.add_task(name, total=total)
        t0 = time.perf_counter()

        def advance():
            self.progress.advance(task)

        try:
            summary = fn(advance)
        except KeyboardInterrupt:
            raise
        except BuildError:
            raise
        except Exception as e:
            raise BuildError(name, e) from e
        finally:
            self.progress.remove_task(task)
        line = f"{name:<9} {summary} ({time.perf_counter() - t0:.1f} s)"
        self.summaries.append(line)
        if not self.quiet:
            self.console.print(f"[green]✓[/green] {line}", highlight=False)
        return summary


#: formats the planner has no cost entry for -> the format with the same bytes per weight / activation.
PLANNER_QUANT = {"w4a16_nvfp4": "int4_awq", "int8_sq": "fp8"}


def _recipe_kwargs(opts: BuildOptions) -> dict:
    quant = PLANNER_QUANT.get(opts.quant, opts.quant)
    return dict(model=str(opts.target), gpu=opts.gpu, tp=opts.tp, ep=opts.ep, quant=quant, drafter=opts.drafter,
                acceptance=opts.acceptance, max_batch_size=opts.max_batch_size, context=opts.max_seq_len,
                calibration=None if opts.calibration is None else str(opts.calibration), draft=opts.draft,
                draft_quant=opts.draft_quant)


def _calibration_kind(path) -> str:
    """What a --calibration file is, for the bundle README."""
    from trtspec.recipes.user_calibration import DeploymentCalibration, read_calibration

    cal = read_calibration(path)
    if isinstance(cal, DeploymentCalibration):
        s = cal.setup
        return (f"trtspec calibrate: {s.engine} figures fitted on {cal.fit.get('points')} points measured on "
                f"{s.model} / {s.gpu} x{s.tp} / {s.quant} / {s.drafter}")
    return f"trtspec profile cost table of {cal.device}"


def _describe_recipe(recipe) -> str:
    s = getattr(recipe, "draft_len_schedule", None)
    return (f"max_draft_len {recipe.max_draft_len}, schedule {dict(s) if s else None}, "
            f"max_concurrency {getattr(recipe, 'max_concurrency', None)}")


def _quant_jobs(opts: BuildOptions, vi) -> list[tuple[str, Path, str, str]]:
    """(role, source dir, quant, kv quant) of each checkpoint that goes through Model-Optimizer."""
    jobs = []
    if opts.quant != "none" or opts.kv_cache_quant != "none":
        jobs.append(("target", vi.target.path, opts.quant, opts.kv_cache_quant))
    if opts.drafter == "draft_model" and opts.draft_quant != "none":
        jobs.append(("draft", vi.draft.path, opts.draft_quant, opts.kv_cache_quant))
    return jobs


def build(opts: BuildOptions, *, dry_run: bool = False, console=None, quiet: bool = False,
          recipe_resolver: Callable[..., Any] = default_resolver) -> BuildResult:
    """Build the bundle described by ``opts`` (or only plan it with ``dry_run``).

    Raises :class:`trtspec.builder.validate.BuildInputError` for bad inputs (before any heavy work)
    and :class:`BuildError` when a later stage fails; in both cases ``opts.out`` is untouched.
    SIGINT and SIGTERM raise :class:`trtspec.builder.interrupt.BuildInterrupted` (a
    ``KeyboardInterrupt``) at whatever stage the build is, after the temporary bundle is removed.
    """
    with interruptible():
        return _build(opts, dry_run=dry_run, console=console, quiet=quiet, recipe_resolver=recipe_resolver)


def _build(opts: BuildOptions, *, dry_run: bool, console, quiet: bool,
           recipe_resolver: Callable[..., Any]) -> BuildResult:
    from rich.console import Console

    from trtspec.builder import calib as calib_mod
    from trtspec.builder import emit, export, measure, quantize
    from trtspec.builder.validate import BuildInputError, validate

    console = console or Console(stderr=True)
    opts = demo_options(opts)
    out = Path(opts.out).expanduser()
    result = BuildResult(out=out, dry_run=dry_run)
    state: dict[str, Any] = {}

    with _Stages(console, quiet) as st:
        def s_validate(adv):
            try:
                vi = validate(opts)
            except BuildInputError:
                raise
            state["vi"] = vi
            t = vi.target
            extra = f", draft {vi.draft.path.name} ({vi.draft.config.get('architectures')})" if vi.draft else ""
            return (f"target {t.path.name} {t.config.get('architectures')} {t.num_layers} layers hidden "
                    f"{t.hidden_size} vocab {t.vocab_size}{extra}; quant {opts.quant} fits")

        try:
            st.run("validate", s_validate)
        except BuildError as e:
            if isinstance(e.cause, BuildInputError):
                raise e.cause from None
            raise
        vi = state["vi"]
        opts = opts.model_copy(update={"max_seq_len": vi.max_seq_len,
                                       "calib_seq_len": min(opts.calib_seq_len, vi.max_seq_len)})
        measured = None
        if opts.acceptance == measure.MEASURE:  # checked before any weight loads; BuildInputError names the ways out
            measured = measure.plan_measurement(opts, vi)
            st.run("acceptance", measured.run, total=measured.turns)
            vi.notes.extend(measured.notes)

        def s_recipe(adv):
            kw = _recipe_kwargs(opts)
            if measured is not None:
                kw["acceptance"] = measured.profile
            if vi.fixed_draft_len:  # DSpark: D is the checkpoint's block size
                kw["draft_len"] = vi.fixed_draft_len
            elif vi.draft_len_cap:  # DFlash: D at most block_size - 1, in the planner's schedule too
                kw["max_draft_len"] = vi.draft_len_cap
            try:
                recipe = recipe_resolver(opts.recipe, **kw)
            except ValueError as e:
                hinted = measure.with_measure_hint(e, opts)
                if hinted is e:
                    raise
                raise hinted from e
            state["recipe"] = recipe
            if opts.calibration is not None:  # the bundle README says what the recipe was planned with
                vi.notes.append(f"recipe planned with --calibration {opts.calibration} "
                                f"({_calibration_kind(opts.calibration)})")
            if int(recipe.max_draft_len) < 1:
                raise ValueError(f"--recipe {opts.recipe}: speculation pays at no batch size for this model, GPU and "
                                 f"acceptance (max_draft_len {recipe.max_draft_len}); nothing to deploy with "
                                 f"--drafter {opts.drafter}")
            state["configs"] = emit.plan_configs(recipe, opts, vi.drafter_facts)  # refuses before any quantization
            if opts.backend == "tensorrt":   # the engine tiers' trees against the plugins' limits, before quantizing
                from trtspec.onnx.tiers import tiers_from_recipe

                state["tiers"] = tiers_from_recipe(recipe, opts.max_batch_size, opts.verify)
            planned = PLANNER_QUANT.get(opts.quant)
            return _describe_recipe(recipe) + (f" (planned with {planned} costs: same bytes per weight and "
                                               f"activation as {opts.quant})" if planned else "")

        st.run("recipe", s_recipe)
        recipe = state["recipe"]
        versions = tool_versions()
        cache = QuantCache(opts.cache_dir)
        jobs = _quant_jobs(opts, vi)
        input_hashes = {"target": hash_files(vi.target.path, vi.target.weight_files + (vi.target.path / "config.json",))}
        if vi.draft is not None:
            input_hashes["draft"] = hash_files(vi.draft.path, vi.draft.weight_files + (vi.draft.path / "config.json",))
        calib_fp = calib_mod.calib_fingerprint(opts.calib, opts.calib_samples, opts.calib_seq_len, opts.seed) if jobs else None
        keys = {}
        for role, _src, q, kv in jobs:
            cfg = quantize.modelopt_config(q, kv)
            keys[role] = QuantCache.key(input_hashes[role], q, kv, calib_fp, cfg, versions)

        if dry_run:
            result.plan = {
                "out": str(out), "stages": list(STAGES),
                "recipe": {"max_draft_len": recipe.max_draft_len,
                           "draft_len_schedule": getattr(recipe, "draft_len_schedule", None),
                           "max_concurrency": getattr(recipe, "max_concurrency", None)},
                "quantize": [{"role": r, "quant": q, "kv_cache_quant": kv,
                              "modelopt_config": quantize.MODELOPT_CONFIGS.get(q, "none"),
                              "cache": "hit" if opts.use_cache and cache.lookup(keys[r]) else "miss"}
                             for r, _s, q, kv in jobs],
                "outputs": ["target/", *(["draft/"] if vi.draft is not None else []), "llm_api.yaml",
                            *(["vllm.yaml"] if state["configs"].vllm is not None else []),
                            *(["sglang.args"] if state["configs"].sglang is not None else []),
                            "recipe.yaml", "manifest.json", "README.md",
                            *([measure.ACCEPTANCE_FILE] if measured is not None else []),
                            *(["tensorrt/"] if opts.backend == "tensorrt" else []),
                            *(["triton/"] if _triton_available() else [])],
                "notes": vi.notes + state["configs"].notes,
            }
            result.summaries = st.summaries
            return result

        with AtomicDir(out) as tmp:
            reports: dict[str, Any] = {}
            cache_use: dict[str, str] = {}
            if measured is not None:
                measured.write(tmp)

            def s_quantize(adv):
                if not jobs:
                    return "nothing to quantize (--quant none)"
                texts = None
                parts = []
                for role, src, q, kv in jobs:
                    hit = cache.lookup(keys[role]) if opts.use_cache else None
                    if hit is not None:
                        cache_use[role] = f"reused {hit}"
                        parts.append(f"{role} {q}: reused cached checkpoint {hit}")
                        continue
                    if texts is None:
                        texts = calib_mod.load_texts(opts.calib)
                    batches = calib_mod.encode_batches(texts, vi.target.path, opts.calib_samples,
                                                       opts.calib_seq_len, opts.seed)
                    dst = tmp / ".quant" / role
                    rep = quantize.quantize_and_export(src, q, kv, batches, opts.device, dst, adv)
                    export.fix_exported_config(dst, (vi.target if role == "target" else vi.draft).config)
                    reports[role] = rep
                    if opts.use_cache:
                        entry = cache.store(keys[role], dst)
                        cache_use[role] = f"stored {entry}"
                    else:
                        cache_use[role] = "off"
                    parts.append(f"{role} {q}{'+kv ' + kv if kv != 'none' else ''}: {rep.calib_batches} calibration "
                                 f"sequences, {rep.check}")
                return "; ".join(parts)

            st.run("quantize", s_quantize, total=len(jobs) * opts.calib_samples or 1)

            def s_export(adv):
                parts = []
                for role, _src, q, _kv in jobs:
                    dst = tmp / role
                    if role in reports:
                        (tmp / ".quant" / role).rename(dst)
                    else:
                        cache.materialize(keys[role], dst)
                    export.copy_tokenizer(vi.target.path, dst)
                    qa = (export.read_quant_config(dst) or {}).get("quant_algo")
                    parts.append(f"{role}/ ({qa or 'kv only'})")
                roles = {r for r, *_ in jobs}
                if "target" not in roles:
                    export.copy_checkpoint(vi.target.path, tmp / "target")
                    parts.append("target/ (copied, unquantized)")
                if vi.draft is not None and "draft" not in roles:
                    export.copy_checkpoint(vi.draft.path, tmp / "draft", all_files=opts.drafter in HEAD_DRAFTERS)
                    if opts.drafter == "draft_model":
                        export.copy_tokenizer(vi.target.path, tmp / "draft")
                    parts.append(f"draft/ (copied{', ' + opts.drafter + ' head' if opts.drafter in HEAD_DRAFTERS else ''})")
                if (tmp / ".quant").exists():
                    (tmp / ".quant").rmdir()
                return ", ".join(parts)

            st.run("export", s_export)

            def s_emit(adv):
                written = emit.write_configs(tmp, recipe, opts, planned=state["configs"])
                state["written"] = written
                recipe.save(tmp / "recipe.yaml")
                (tmp / "README.md").write_text(emit.readme(opts, written, recipe, vi.notes))
                files = ["llm_api.yaml"] + [f for f, k in (("vllm.yaml", "vllm"), ("sglang.args", "sglang"))
                                            if written[k] is not None] + ["recipe.yaml", "README.md"]
                note = f"; {'; '.join(written['notes'])}" if written["notes"] else ""
                return (f"{', '.join(files)} (validated against the facts of TensorRT-LLM {opts.trtllm_version}, vLLM "
                        f"{opts.vllm_version}, SGLang {opts.sglang_version}){note}")

            st.run("emit", s_emit)

            if opts.backend == "tensorrt":
                def s_tensorrt(adv):
                    from trtspec.onnx.tensorrt import write_tensorrt_backend

                    said, tiers, quant = [], state["tiers"], TENSORRT_QUANTS[opts.quant]
                    calib = None if quant == "none" else calib_mod.encode_batches(   # the bundle's calibration texts
                        calib_mod.load_texts(opts.calib), vi.target.path, opts.calib_samples, opts.calib_seq_len, opts.seed)
                    cfg = write_tensorrt_backend(vi.target.path, vi.draft.path, tmp / "tensorrt", tiers=tiers,
                                                 verify=opts.verify, drafter=opts.drafter, quant=quant,
                                                 max_seq_len=opts.max_seq_len, calib=calib, log=said.append)
                    with open(tmp / "README.md", "a") as f:
                        f.write("- `tensorrt/`: ONNX step graphs with trtspec plugin nodes"
                                + (", TensorRT engines" if cfg["engines_built"] else
                                   "; build the engines with `tensorrt/build_engines.sh` (needs TensorRT and a GPU)")
                                + "\n")
                    shape = ", ".join(f"batch {t.lo}-{t.hi}: {t.num_nodes} nodes" for t in tiers)
                    return f"tensorrt/ {opts.verify} verification, {len(tiers)} profiles ({shape}): " + " ".join(said)

                st.run("tensorrt", s_tensorrt)

            if _triton_available():
                def s_triton(adv):
                    summary = write_triton(tmp, out, speculation=opts.speculation)
                    with open(tmp / "README.md", "a") as f:
                        f.write("- `triton/`: Triton Inference Server model repository "
                                "(`tritonserver --model-repository=triton`)\n")
                    return summary

                st.run("triton", s_triton)

            def s_manifest(adv):
                manifest = {
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "options": json.loads(opts.model_dump_json()),
                    "inputs": {**{k: {"path": str(v_path), "files": input_hashes[k]}
                                  for k, v_path in (("target", vi.target.path), ("draft", vi.draft.path if vi.draft else None))
                                  if v_path is not None},
                               "calibration": calib_fp,
                               "acceptance": _file_hash(opts.acceptance)},
                    "versions": {**versions, "tensorrt_llm_llm_api": opts.trtllm_version},
                    "quant": {"target": opts.quant, "draft": opts.draft_quant if opts.drafter == "draft_model" else None,
                              "kv_cache": opts.kv_cache_quant,
                              "modelopt_configs": {r: quantize.MODELOPT_CONFIGS.get(q) for r, _s, q, _k in jobs}},
                    "quant_checks": {r: rep.check for r, rep in reports.items()},
                    "cache": cache_use,
                    "recipe": _describe_recipe(recipe),
                }
                result.manifest = write_manifest(tmp, manifest)
                return f"{len(result.manifest['outputs'])} files hashed; bundle at {out}"

            st.run("manifest", s_manifest)
        result.summaries = st.summaries
    return result


def _file_hash(path: Optional[str]) -> Optional[str]:
    if path and Path(path).is_file():
        return sha256_file(Path(path))
    return path  # prior:NAME or None


def _triton_available() -> bool:
    return (importlib.util.find_spec("trtspec.triton") is not None
            and importlib.util.find_spec("trtspec.triton.repository") is not None)


def write_triton(tmp: Path, final: Path, speculation: str = "static") -> str:
    """Hook: ``trtspec.triton.repository.write_repository(bundle_dir, out_dir)`` into ``<bundle>/triton``,
    its model's ``speculation`` parameter from ``build --speculation``.

    It runs on the temporary bundle; any absolute path of the temporary directory the repository
    writes into its text files is rewritten to the final ``--out`` path before the rename.
    """
    from dataclasses import replace

    from trtspec.triton.repository import default_settings, write_repository

    repo = tmp / "triton"
    write_repository(tmp, repo, settings=replace(default_settings(tmp), speculation=speculation))
    old, new = str(tmp.absolute()), str(Path(final).expanduser().absolute())
    n = 0
    for p in repo.rglob("*"):
        if p.is_file() and p.suffix in (".yaml", ".yml", ".pbtxt", ".json", ".py", ".txt", ".sh", ""):
            try:
                text = p.read_text()
            except UnicodeDecodeError:
                continue
            if old in text:
                p.write_text(text.replace(old, new))
                n += 1
    files = sum(1 for p in repo.rglob("*") if p.is_file())
    return f"triton/ model repository ({files} files, {n} paths pointed at {new})"
