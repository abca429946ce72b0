"""Runners that send SPEED-Bench prompts to a speculative decoder and collect acceptance.

* :class:`LocalRunner` - trtspec's reference runtime (``trtspec.runtime.load_pipeline``) on a model
  pair or a bundle; per-request counters come from each generation's ``SpecStats``.
* :class:`OpenAIRunner` - a running server's ``/v1/completions`` with ``concurrency`` client
  threads; acceptance comes from the server's Prometheus ``/metrics`` scraped before and after
  each category (counters are global, so categories run one after another).
* :class:`TritonRunner` - trtspec's Triton model through ``tritonclient`` (gRPC stream); acceptance
  comes from the model's ``trtspec_spec_decode_*`` counters on Triton's ``/metrics``, scraped before
  and after each category (steps and per-position counts, exact).

Multi-turn questions are answered turn by turn (each turn sees the earlier answers); a question's
counters are the sums over its turns.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from trtspec.bench import metrics as M
from trtspec.bench.datasets import Prompt, render_turn
from trtspec.bench.prometheus import SpecDelta, delta, parse_metrics, scrape


@dataclass(frozen=True)
class RunConfig:
    """Generation settings of a bench run.

    ``max_new_tokens`` (default 64) per turn; ``temperature`` 0 = greedy; ``top_k`` 0 = off;
    ``top_p`` 1 = off; ``seed`` for sampling; ``concurrency`` = requests in flight (the batch size
    of the local runtime, client threads for servers), default 1; ``multiturn``: answer every
    turn (default) or only the first.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    concurrency: int = 1
    multiturn: bool = True

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: expected >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: expected >= 0")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k}: expected >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p}: expected in (0, 1]")
        if self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency}: expected >= 1")


@dataclass
class RunOutput:
    """What a runner measured. ``records``: per-request counters (acceptance fields are zero when
    the runner only has server counters); ``category_deltas``: per-category Prometheus deltas
    (server runners); ``texts``: generated answers per question id."""

    records: list[M.RequestRecord]
    wall_s: float
    texts: dict[str, list[str]] = field(default_factory=dict)
    category_deltas: dict[str, SpecDelta] = field(default_factory=dict)
    source: str = ""


def _turns(p: Prompt, cfg: RunConfig) -> int:
    return len(p.turns) if cfg.multiturn else 1


# ----------------------------------------------------------------------------------------------
# local runtime


def resolve_pair(path: str | Path) -> tuple[Path, Path | None, str | None]:
    """(target_dir, draft_dir or None, drafter or None) of ``path``.

    A bundle (a directory whose ``manifest.json`` has ``format: trtspec.bundle/v1``, written by
    ``trtspec build``) holds ``target/`` and, when speculating with a model, ``draft/``; its drafter
    is the manifest's ``options.drafter``. Any other directory is a target model (draft None).
    """
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        return path, None, None
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("format") != "trtspec.bundle/v1":
        raise ValueError(f"{manifest_path}: not a trtspec bundle manifest (format {manifest.get('format')!r})")
    if not (path / "target" / "config.json").is_file():
        raise ValueError(f"bundle {path}: no target/config.json")
    draft = path / "draft" if (path / "draft").is_dir() else None
    return path / "target", draft, (manifest.get("options") or {}).get("drafter")


def checkpoint_quant(model_dir: str | Path) -> str | None:
    """``"FP8"``, ``"W4A16_AWQ + FP8 KV cache"``, ... for a Model-Optimizer quantized checkpoint, None
    when ``model_dir`` is unquantized (an unsupported quantization raises ModelFormatError)."""
    from trtspec.runtime.config import read_quant_config

    q = read_quant_config(model_dir)
    if q is None:
        return None
    return " + ".join(x for x in (q.algo, q.kv_cache_algo and f"{q.kv_cache_algo} KV cache") if x)


def unquantized_baseline(target: str | Path, choice: str = "auto") -> tuple[Path | None, str]:
    """(unquantized checkpoint to bench next to ``target``, or None; why).

    ``choice``: ``"none"`` (no baseline), a directory (it must hold an unquantized checkpoint), or
    ``"auto"``: when ``target``'s checkpoint is quantized and ``target`` is a bundle whose manifest
    records the source it was built from (``inputs.target.path``) and that source is still there.
    """
    if choice == "none":
        return None, "no comparison asked for"
    target_dir, _, _ = resolve_pair(target)
    if choice != "auto":
        base = Path(choice)
        if not (base / "config.json").is_file():
            raise ValueError(f"--unquantized-target {choice}: no config.json there (expected a model directory)")
        if checkpoint_quant(base) is not None:
            raise ValueError(f"--unquantized-target {choice}: that checkpoint is quantized ({checkpoint_quant(base)})")
        return base, f"--unquantized-target {choice}"
    quant = checkpoint_quant(target_dir)
    if quant is None:
        return None, "the target is unquantized"
    manifest = Path(target) / "manifest.json"
    source = (json.loads(manifest.read_text(encoding="utf-8")).get("inputs", {}).get("target", {}).get("path")
              if manifest.is_file() else None)
    if source is None:
        return None, f"the target is {quant} but no bundle manifest records its source (pass --unquantized-target)"
    if not (Path(source) / "config.json").is_file():
        return None, f"the bundle's source checkpoint {source} is not there any more (pass --unquantized-target)"
    if checkpoint_quant(source) is not None:
        return None, f"the bundle's source checkpoint {source} is itself quantized"
    return Path(source), f"the source checkpoint recorded in {manifest}"


def record_from_stats(qid: str, category: str, stats: Any, output_tokens: int, latency_s: float) -> M.RequestRecord:
    """A RequestRecord from the runtime's ``SpecStats`` (drafts, draft_tokens, accepted_tokens,
    accepted_per_pos)."""
    per_pos = getattr(stats, "accepted_per_pos", None)
    return M.RequestRecord(
        qid, category, int(stats.drafts), int(stats.accepted_tokens),
        tuple(int(x) for x in per_pos) if per_pos is not None else None,
        output_tokens, latency_s, int(getattr(stats, "draft_tokens", 0) or 0),
    )


def _merge(a: M.RequestRecord | None, b: M.RequestRecord) -> M.RequestRecord:
    if a is None:
        return b
    pp = None
    if a.accepted_per_pos is not None and b.accepted_per_pos is not None:
        n = max(len(a.accepted_per_pos), len(b.accepted_per_pos))
        pad = lambda t: tuple(t) + (0,) * (n - len(t))  # noqa: E731
        pp = tuple(x + y for x, y in zip(pad(a.accepted_per_pos), pad(b.accepted_per_pos)))
    return M.RequestRecord(a.question_id, a.category, a.num_drafts + b.num_drafts,
                           a.accepted_tokens + b.accepted_tokens, pp, a.output_tokens + b.output_tokens,
                           a.latency_s + b.latency_s, a.draft_tokens + b.draft_tokens)


class LocalRunner:
    """Runs prompts through a ``trtspec.runtime`` Pipeline in batches of ``cfg.concurrency``.

    ``chat``: an object with ``apply_chat_template`` (see ``datasets.load_chat_template``) or None.
    A request's latency is the wall time of the ``generate_ids`` call that served it. Prompts longer
    than the target's context minus ``max_new_tokens`` keep their last tokens (noted in the source).
    """

    def __init__(self, pipeline: Any, *, chat: Any = None, source: str = "trtspec.runtime", clock: str = "wall"):
        from trtspec.bench.profile import clock_fn

        self.pipeline = pipeline
        self.chat = chat
        self.source = source
        self.truncated = 0
        self.now = clock_fn(clock)

    @classmethod
    def load(cls, target: str | Path, draft: str | Path | None = None, *, drafter: str = "draft_model",
             draft_len: int = 4, verify: str = "greedy", device: str = "cpu", dtype: str = "float32",
             clock: str = "wall") -> "LocalRunner":
        """Load ``target`` (a model directory or bundle) and ``draft`` with ``trtspec.runtime.load_pipeline``;
        ``clock``: 'wall' or 'cpu' (see ``trtspec.bench.profile.clock_fn``) for latencies and wall_s."""
        import torch

        from trtspec.bench.datasets import load_chat_template
        from trtspec.runtime import load_pipeline

        target_dir, bundle_draft, bundle_drafter = resolve_pair(target)
        draft = draft if draft is not None else bundle_draft
        drafter = bundle_drafter or drafter
        pipe = load_pipeline(str(target_dir), None if draft is None else str(draft), drafter=drafter,
                             draft_len=draft_len, verify=verify, device=device, dtype=getattr(torch, dtype))
        q = pipe.target.quant
        quant = f" ({q.algo}, activations {q.activations})" if q is not None else ""
        return cls(pipe, chat=load_chat_template(target_dir), clock=clock,
                   source=f"trtspec.runtime: target={target_dir}{quant}, draft={draft}, drafter={drafter}, "
                          f"D={draft_len}, verify={verify}, device={device}, clock={clock}")

    def _fit(self, ids: list[int], max_new_tokens: int) -> list[int]:
        """Keep the last ``context - max_new_tokens`` prompt tokens (counted in ``self.truncated``)."""
        ctx = int(self.pipeline.target.config.max_position_embeddings)
        room = ctx - max_new_tokens
        if room < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}: leaves no room for a prompt in the target's "
                             f"context of {ctx} tokens")
        if len(ids) > room:
            self.truncated += 1
            return list(ids[-room:])
        return list(ids)

    def run(self, prompts: Sequence[Prompt], cfg: RunConfig, *, progress: Callable[[int], None] | None = None) -> RunOutput:
        self.truncated = 0
        answers: dict[str, list[str]] = {p.question_id: [] for p in prompts}
        records: dict[str, M.RequestRecord | None] = {p.question_id: None for p in prompts}
        by_id = {p.question_id: p for p in prompts}
        if len(by_id) != len(prompts):
            raise ValueError("prompts: question_id values must be unique")
        t0 = self.now()
        max_turns = max((_turns(p, cfg) for p in prompts), default=0)
        for turn in range(max_turns):
            todo = [p for p in prompts if _turns(p, cfg) > turn]
            for i in range(0, len(todo), cfg.concurrency):
                batch = todo[i:i + cfg.concurrency]
                texts = [render_turn(p, turn, answers[p.question_id], self.chat) for p in batch]
                ids = [self._fit(self.pipeline.tokenizer.encode(t), cfg.max_new_tokens) for t in texts]
                start = self.now()
                outs = self.pipeline.generate_ids(ids, max_new_tokens=cfg.max_new_tokens,
                                                  temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                                                  seed=cfg.seed)
                took = self.now() - start
                for p, (tokens, stats) in zip(batch, outs):
                    answers[p.question_id].append(self.pipeline.tokenizer.decode(tokens))
                    rec = record_from_stats(p.question_id, p.category, stats, len(tokens), took)
                    records[p.question_id] = _merge(records[p.question_id], rec)
                if progress is not None:
                    progress(len(batch))
        wall = self.now() - t0
        note = f"; {self.truncated} prompts left-truncated to fit the context" if self.truncated else ""
        return RunOutput([r for r in records.values() if r is not None], wall, answers, source=self.source + note)


# ----------------------------------------------------------------------------------------------
# OpenAI-compatible server


class OpenAIRunner:
    """``POST {base_url}/v1/completions`` with ``cfg.concurrency`` threads; acceptance from
    ``metrics_url`` (default ``{base_url}/metrics``) scraped around each category.

    ``engine``: 'auto' | 'vllm' | 'trtllm' | 'sglang' (metric names); ``draft_len``: the server's
    fixed D (needed for TensorRT-LLM's step count and for the profile's length).
    """

    def __init__(self, base_url: str, model: str, *, metrics_url: str | None = None, engine: str = "auto",
                 draft_len: int | None = None, api_key: str | None = None, timeout: float = 600.0, chat: Any = None):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={base_url!r}: expected http://host:port")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.metrics_url = metrics_url or f"{self.base_url}/metrics"
        self.engine = engine
        self.draft_len = draft_len
        self.timeout = timeout
        self.chat = chat
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def complete(self, session: Any, text: str, cfg: RunConfig) -> tuple[str, int]:
        """One completion: (text, completion tokens from ``usage``)."""
        body = {"model": self.model, "prompt": text, "max_tokens": cfg.max_new_tokens,
                "temperature": cfg.temperature, "top_p": cfg.top_p, "seed": cfg.seed}
        if cfg.top_k:
            body["top_k"] = cfg.top_k
        resp = session.post(f"{self.base_url}/v1/completions", json=body, headers=self.headers, timeout=self.timeout)
        if resp.status_code != 200:
            raise RuntimeError(f"{self.base_url}/v1/completions answered {resp.status_code}: {resp.text[:300]}")
        data = resp.json()
        try:
            out = data["choices"][0]["text"]
            tokens = int(data["usage"]["completion_tokens"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise RuntimeError(f"/v1/completions: unexpected response (needs choices[0].text and "
                               f"usage.completion_tokens): {json.dumps(data)[:300]}") from exc
        return out, tokens

    def _question(self, p: Prompt, cfg: RunConfig) -> tuple[M.RequestRecord, list[str]]:
        import requests

        answers: list[str] = []
        tokens, start = 0, time.perf_counter()
        with requests.Session() as session:
            for turn in range(_turns(p, cfg)):
                text, n = self.complete(session, render_turn(p, turn, answers, self.chat), cfg)
                answers.append(text)
                tokens += n
        return M.RequestRecord(p.question_id, p.category, 0, 0, None, tokens, time.perf_counter() - start), answers

    def run(self, prompts: Sequence[Prompt], cfg: RunConfig, *, progress: Callable[[int], None] | None = None) -> RunOutput:
        groups: dict[str, list[Prompt]] = {}
        for p in prompts:
            groups.setdefault(p.category, []).append(p)
        records: list[M.RequestRecord] = []
        texts: dict[str, list[str]] = {}
        deltas: dict[str, SpecDelta] = {}
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=cfg.concurrency) as pool:
            for category, group in groups.items():
                before = parse_metrics(scrape(self.metrics_url), self.engine)
                for rec, answers in pool.map(lambda q: self._question(q, cfg), group):
                    records.append(rec)
                    texts[rec.question_id] = answers
                    if progress is not None:
                        progress(1)
                after = parse_metrics(scrape(self.metrics_url), before.engine)
                deltas[category] = delta(before, after, draft_len=self.draft_len)
        wall = time.perf_counter() - t0
        engine = next(iter(deltas.values())).engine if deltas else self.engine
        return RunOutput(records, wall, texts, deltas,
                         source=f"{engine} server {self.base_url} (model {self.model}); acceptance from "
                                f"Prometheus counters at {self.metrics_url}, scraped before/after each category")


# ----------------------------------------------------------------------------------------------
# Triton

TRITON_OUTPUTS = ("text_output", "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")


class TritonRunner:
    """Sends each turn to Triton model ``model`` over gRPC streaming (``url`` = host:port; the
    trtspec model is decoupled), with ``stream`` false, and reads ``text_output``.

    Acceptance comes from the model's speculative-decoding counters on ``metrics_url`` (default
    ``http://<host of url>:8002/metrics``, Triton's metrics port), label ``model`` = ``model``,
    scraped before and after each category (categories run one after another; other traffic to the
    same model in that window is counted too). Output tokens are counted with ``tokenizer`` when
    given, else taken from the responses' ``total_draft_tokens / draft_len + total_accepted_draft_tokens``
    (one token per step plus the accepted drafts; exact for a fixed D without early stops).
    """

    def __init__(self, url: str, model: str, *, draft_len: int, tokenizer: Any = None, chat: Any = None,
                 timeout: float = 600.0, metrics_url: str | None = None):
        if draft_len < 1:
            raise ValueError(f"draft_len={draft_len}: expected >= 1")
        if not url or url.startswith(("http://", "https://")) or ":" not in url:
            raise ValueError(f"url={url!r}: expected host:port of Triton's gRPC endpoint")
        self.url, self.model, self.draft_len = url, model, draft_len
        self.tokenizer, self.chat, self.timeout = tokenizer, chat, timeout
        self.metrics_url = metrics_url or f"http://{url.rsplit(':', 1)[0]}:8002/metrics"

    def inputs(self, text: str, cfg: RunConfig, batched: bool) -> list:
        """The request tensors (shape ``[1, 1]`` for a batching model, else ``[1]``)."""
        import numpy as np
        import tritonclient.grpc as grpcclient

        values = [
            ("text_input", "BYTES", np.array([text.encode("utf-8")], dtype=np.object_)),
            ("sampling_param_max_tokens", "INT32", np.array([cfg.max_new_tokens], dtype=np.int32)),
            ("sampling_param_temperature", "FP32", np.array([cfg.temperature], dtype=np.float32)),
            ("sampling_param_top_p", "FP32", np.array([cfg.top_p], dtype=np.float32)),
            ("sampling_param_top_k", "INT32", np.array([cfg.top_k], dtype=np.int32)),
            ("sampling_param_seed", "UINT64", np.array([cfg.seed], dtype=np.uint64)),
            ("stream", "BOOL", np.array([False], dtype=bool)),
            ("sampling_param_return_perf_metrics", "BOOL", np.array([True], dtype=bool)),
        ]
        out = []
        for name, dtype, arr in values:
            arr = arr.reshape(1, 1) if batched else arr
            t = grpcclient.InferInput(name, list(arr.shape), dtype)
            t.set_data_from_numpy(arr)
            out.append(t)
        return out

    def _one(self, client: Any, text: str, cfg: RunConfig, batched: bool) -> tuple[str, int, int]:
        import queue

        import tritonclient.grpc as grpcclient

        results: "queue.Queue" = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer(self.model, self.inputs(text, cfg, batched),
                                      outputs=[grpcclient.InferRequestedOutput(n) for n in TRITON_OUTPUTS],
                                      enable_empty_final_response=True)
            answer, accepted, drafted = "", 0, 0
            while True:
                result, error = results.get(timeout=self.timeout)
                if error is not None:
                    raise RuntimeError(f"Triton model {self.model!r}: {error}")
                raw = result.as_numpy("text_output")
                if raw is not None and raw.size:
                    piece = raw.reshape(-1)[0]
                    answer = piece.decode("utf-8", errors="replace") if isinstance(piece, bytes) else str(piece)
                for name in ("total_accepted_draft_tokens", "total_draft_tokens"):
                    arr = result.as_numpy(name)
                    if arr is not None and arr.size:
                        if name == "total_draft_tokens":
                            drafted = int(arr.reshape(-1)[0])
                        else:
                            accepted = int(arr.reshape(-1)[0])
                params = result.get_response().parameters
                if "triton_final_response" in params and params["triton_final_response"].bool_param:
                    return answer, accepted, drafted
        finally:
            client.stop_stream()

    def _question(self, p: Prompt, cfg: RunConfig) -> tuple[M.RequestRecord, list[str]]:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        batched = int(client.get_model_config(self.model, as_json=True)["config"].get("max_batch_size", 0)) > 0
        answers: list[str] = []
        acc = drafted = tokens = 0
        start = time.perf_counter()
        for turn in range(_turns(p, cfg)):
            text, a, d = self._one(client, render_turn(p, turn, answers, self.chat), cfg, batched)
            answers.append(text)
            acc, drafted = acc + a, drafted + d
            if self.tokenizer is not None:
                enc = self.tokenizer.encode(text)
                tokens += len(getattr(enc, "ids", enc))
        client.close()
        if self.tokenizer is None:
            tokens = round(drafted / self.draft_len) + acc
        return M.RequestRecord(p.question_id, p.category, 0, 0, None, tokens, time.perf_counter() - start), answers

    def _scrape(self):
        return parse_metrics(scrape(self.metrics_url), "trtspec", labels={"model": self.model})

    def run(self, prompts: Sequence[Prompt], cfg: RunConfig, *, progress: Callable[[int], None] | None = None) -> RunOutput:
        groups: dict[str, list[Prompt]] = {}
        for p in prompts:
            groups.setdefault(p.category, []).append(p)
        records, texts, deltas = [], {}, {}
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=cfg.concurrency) as pool:
            for category, group in groups.items():
                before = self._scrape()
                for rec, answers in pool.map(lambda q: self._question(q, cfg), group):
                    records.append(rec)
                    texts[rec.question_id] = answers
                    if progress is not None:
                        progress(1)
                deltas[category] = delta(before, self._scrape())
        return RunOutput(records, time.perf_counter() - t0, texts, deltas,
                         source=f"Triton model {self.model!r} at {self.url} (gRPC); acceptance from its "
                                f"trtspec_spec_decode_* counters at {self.metrics_url}, scraped before/after each category")


# ----------------------------------------------------------------------------------------------
# from a run to a profile


def _summary_from_delta(d: SpecDelta, draft_len: int, num_requests: int) -> M.AcceptanceSummary:
    if d.num_steps and d.accepted_tokens is not None:
        per_pos = [int(round(x)) for x in d.accepted_per_pos[:draft_len]] or None
        if per_pos is not None and len(per_pos) < draft_len:
            per_pos += [0] * (draft_len - len(per_pos))
        steps, acc = int(round(d.num_steps)), int(round(d.accepted_tokens))
        if per_pos is not None and sum(per_pos) != acc:
            per_pos = None  # per-position counters disagree with the total: keep the total
        return M.summarize_counters(steps, per_pos, acc, draft_len=draft_len, num_requests=num_requests)
    a = M.fit_constant_rate(min(max(d.mean_al, 1.0), draft_len + 1.0), draft_len)
    joint, prod = [], 1.0
    for _ in range(draft_len):
        prod *= a
        joint.append(prod)
    return M.AcceptanceSummary(num_requests, 0, 0, d.mean_al, (a,) * draft_len, tuple(joint), (), True, None, draft_len)


def build_run_profile(run: RunOutput, *, drafter: str, draft_len: int, ci_method: str = "bootstrap",
                      seed: int = 0) -> M.AcceptanceProfile:
    """The acceptance profile of a run: from per-request records, or from per-category server
    counters when the run has them (overall = the summed counters)."""
    if not run.category_deltas:
        return M.build_profile(run.records, drafter=drafter, draft_len=draft_len, source=run.source,
                               ci_method=ci_method, seed=seed)
    counts: dict[str, int] = {}
    for r in run.records:
        counts[r.category] = counts.get(r.category, 0) + 1
    cats = {c: _summary_from_delta(d, draft_len, counts.get(c, 0)) for c, d in run.category_deltas.items()}
    ds = list(run.category_deltas.values())
    if all(d.num_steps for d in ds) and all(d.accepted_tokens is not None for d in ds):
        n = max(len(d.accepted_per_pos) for d in ds)
        total = SpecDelta(ds[0].engine, sum(d.num_steps for d in ds), None, sum(d.accepted_tokens for d in ds),
                          [sum(d.accepted_per_pos[k] if k < len(d.accepted_per_pos) else 0 for d in ds)
                           for k in range(n)], 0.0, all(d.exact for d in ds))
        overall = _summary_from_delta(total, draft_len, len(run.records))
    else:  # gauge-only engines: request-weighted mean of the category ALs
        w = [counts.get(c, 1) for c in cats]
        al = sum(s.mean_al * wi for s, wi in zip(cats.values(), w)) / sum(w)
        overall = _summary_from_delta(SpecDelta(ds[0].engine, None, None, None, [], al, False), draft_len,
                                      len(run.records))
    return M.AcceptanceProfile(drafter, draft_len, overall, cats, run.source)
