"""Device cost profile: the target's step time T(B, tokens per request) and the drafter's step
time on this device, measured with trtspec's runtime models, written as ``cost_table.json``.

Two methods:

* ``engine`` (default): steps of trtspec's runtime engine itself, B requests of ``context_len``
  (or the batch's ``batch_contexts`` entry) random prompt tokens, one engine per D = ``tokens - 1``
  sharing the loaded models. For each timed step (all B requests running and drafting the full D,
  after warm-up steps; an engine whose requests near their token budget is rebuilt untimed; the
  grid's points take turns, one step each) the engine's draft time ``dd`` and the step's time
  are read. The draft time is fitted over the measured D >= 1 as ``dd = c + D * t``:
  ``draft[B]["1"] = t`` (one draft token) and ``target[B][D+1] = median(wall - dd) + c`` (the
  verification forward, acceptance, KV moves and the drafter's per-step fixed cost, i.e. everything
  per step that is not proportional to D). This is what the runtime pays, so the planner's
  ``step = target[B][D+1] + D * draft[B][1]`` reproduces it. With ``verify`` including ``sample``
  the same grid is stepped again with sampled requests (temperature 0.8, top-p 0.95: every step
  then builds per-request probability rows for drafts and verification) into a ``sample`` section,
  which the adaptive controller (``trtspec.runtime.controller``) prices sampled steps with. For a
  drafter with its own cache (draft model, EAGLE-3, MTP), ``catch_up[B][U]`` times it feeding a
  backlog of U committed tokens per request (its prefill of B newcomers' prompts; U in
  ``catch_up_tokens``), the one-off an adaptive engine pays when its batch starts drafting again.
* ``forward``: bare model forwards. One target step verifies ``tokens`` new tokens for each of B
  requests on top of ``context_len`` cached tokens: one forward of ``[B, tokens]`` plus
  ``lm_head`` on every new token. One draft step is the same forward of the draft model
  (``tokens = 1`` is one autoregressive draft token). No runtime overhead is included.

Each point: ``warmup`` untimed calls (steps), then ``repeats`` timed ones (for ``forward``
round-robin over the grid, as for ``engine``), the **median** in seconds (CUDA is synchronised around each call).

Format (``trtspec.cost_table/v1``, read by ``trtspec plan --calibration``)::

    {"format": "trtspec.cost_table/v1", "device": "cpu (...)",
     "target": {"<B>": {"<tokens_per_request>": seconds}}, "draft": {...}, "source": "...",
     "context_len": int, "batch_contexts": {"<B>": int}, "dtype": str, "warmup": int, "repeats": int,
     "sample": {"target": {...}, "draft": {...}},         # only with verify including "sample" (engine method)
     "catch_up": {"<B>": {"<backlog>": seconds}}}         # engine method, drafters with their own cache
"""
from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from trtspec.bench.steps import with_draft_len

COST_TABLE_FORMAT = "trtspec.cost_table/v1"
METHODS = ("engine", "forward")
CLOCKS = ("wall", "cpu")
VERIFY = ("greedy", "sample")
#: the sampled requests of the ``sample`` section: top-p sorts every probability row (the dearest transform)
SAMPLED_PROBE = {"temperature": 0.8, "top_p": 0.95}


def clock_fn(kind: str) -> Callable[[], float]:
    """``wall``: ``time.perf_counter`` (what a user waits; the default). ``cpu``: this process's CPU
    time (``time.process_time``), for CPU runs on a shared, busy machine where wall time mostly
    measures the other processes; callers run torch single-threaded with it (see
    :func:`use_clock`), so CPU seconds equal the wall seconds of an idle core."""
    if kind not in CLOCKS:
        raise ValueError(f"clock={kind!r}: expected one of {CLOCKS}")
    return time.perf_counter if kind == "wall" else time.process_time


def use_clock(kind: str, device: str) -> Callable[[], float]:
    """The clock function; for ``cpu`` also checks the device and sets torch to one thread."""
    fn = clock_fn(kind)
    if kind == "cpu":
        if device != "cpu":
            raise ValueError(f"clock='cpu' measures CPU time: only for device='cpu', got {device!r}")
        import torch

        torch.set_num_threads(1)
    return fn


def _ints(values: Sequence[int], name: str) -> tuple[int, ...]:
    out = tuple(int(v) for v in values)
    if not out or any(v < 1 for v in out) or len(set(out)) != len(out):
        raise ValueError(f"{name}={list(values)}: expected distinct positive integers")
    return tuple(sorted(out))


@dataclass(frozen=True)
class ProfileConfig:
    """Grid and timing of ``trtspec profile``.

    ``batch_sizes`` (default 1, 2, 4, 8, 16) requests per step; ``tokens`` (default 1..9, i.e.
    D + 1 for D = 0..8) new tokens per request; ``draft_tokens`` (default 1, 2, 4) for the draft
    model; ``context_len`` cached tokens per request (default 128); ``warmup`` (default 3) and
    ``repeats`` (default 5) calls per point; ``device`` ('cpu' or 'cuda'); ``dtype`` ('float32',
    'bfloat16', 'float16'); ``method`` ('engine', default: steps of trtspec's runtime engine;
    'forward': bare model forwards), see the module docstring; ``clock`` ('wall', default, or
    'cpu': process CPU time, single-threaded, for busy shared CPU machines; see :func:`clock_fn`);
    ``batch_contexts`` (default none): (B, context) pairs that replace ``context_len`` at those
    batch sizes (engine method), e.g. a workload's longest prompt per batch: attention reads the
    longest context of the batch, so a step costs what its longest request costs; ``verify``
    (default ('greedy',)): the verification methods timed (engine method), ``sample`` adding the
    cost table's ``sample`` section; ``catch_up_tokens`` (default 2, 8, 32, 128; engine method): the
    drafter's backlogs timed for the ``catch_up`` section (capped by the target's context).
    """

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    tokens: tuple[int, ...] = tuple(range(1, 10))
    draft_tokens: tuple[int, ...] = (1, 2, 4)
    context_len: int = 128
    warmup: int = 3
    repeats: int = 5
    device: str = "cpu"
    dtype: str = "float32"
    method: str = "engine"
    clock: str = "wall"
    batch_contexts: tuple[tuple[int, int], ...] = ()
    verify: tuple[str, ...] = ("greedy",)
    catch_up_tokens: tuple[int, ...] = (2, 8, 32, 128)

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"clock={self.clock!r}: expected one of {CLOCKS}")
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: expected one of {METHODS}")
        object.__setattr__(self, "batch_sizes", _ints(self.batch_sizes, "batch_sizes"))
        object.__setattr__(self, "tokens", _ints(self.tokens, "tokens"))
        object.__setattr__(self, "draft_tokens", _ints(self.draft_tokens, "draft_tokens"))
        object.__setattr__(self, "catch_up_tokens", _ints(self.catch_up_tokens, "catch_up_tokens"))
        if self.context_len < 1:
            raise ValueError(f"context_len={self.context_len}: expected >= 1")
        if self.warmup < 0 or self.repeats < 1:
            raise ValueError(f"warmup={self.warmup}, repeats={self.repeats}: expected warmup >= 0, repeats >= 1")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype={self.dtype!r}: expected float32, bfloat16 or float16")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device={self.device!r}: expected 'cpu' or 'cuda[:N]'")
        try:
            pairs = tuple((int(b), int(c)) for b, c in self.batch_contexts)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"batch_contexts={self.batch_contexts!r}: expected (batch, context) pairs") from exc
        if any(b not in self.batch_sizes or c < 1 for b, c in pairs) or len({b for b, _ in pairs}) != len(pairs):
            raise ValueError(f"batch_contexts={self.batch_contexts!r}: expected (batch, context >= 1) pairs for "
                             f"distinct batch sizes among {self.batch_sizes}")
        object.__setattr__(self, "batch_contexts", tuple(sorted(pairs)))
        verify = tuple(dict.fromkeys(self.verify))
        if not verify or any(v not in VERIFY for v in verify) or "greedy" not in verify:
            raise ValueError(f"verify={self.verify!r}: expected 'greedy' and optionally 'sample'")
        if "sample" in verify and self.method != "engine":
            raise ValueError("verify 'sample' times engine steps: it needs method='engine'")
        object.__setattr__(self, "verify", verify)

    def context_for(self, batch: int) -> int:
        """Cached tokens per request at ``batch``: its ``batch_contexts`` entry, else ``context_len``."""
        return dict(self.batch_contexts).get(batch, self.context_len)


def device_name(device: str) -> str:
    """A human-readable device name, e.g. ``cpu (x86_64, 2 threads)`` or the CUDA device name."""
    import torch

    if device.startswith("cuda"):
        return f"cuda ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def time_call(fn: Callable[[], Any], *, warmup: int, repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_fn(model: Any, batch: int, tokens: int, context_len: int) -> Callable[[], Any]:
    """A closure running one step of ``model`` (a ``trtspec.runtime.models.Transformer``):
    ``[batch, tokens]`` new tokens after ``context_len`` cached ones, causal within the block,
    with logits for every new token."""
    import torch

    dev = model.lm_head.weight.device
    slots = context_len + tokens + 1
    cache = model.new_cache(batch, slots)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, tokens), generator=g).to(dev)
    pos = (context_len + torch.arange(tokens)).expand(batch, tokens).to(dev)
    rows = torch.arange(batch, device=dev)
    j = torch.arange(context_len + tokens)
    mask = (j[None, :] <= (context_len + torch.arange(tokens))[:, None])[None].expand(batch, -1, -1).to(dev)

    @torch.inference_mode()
    def run():
        hidden, _ = model(ids, pos, cache, rows, pos, mask)
        return model.logits(hidden)

    return run


def measure(model: Any, batch_sizes: Sequence[int], tokens: Sequence[int], cfg: ProfileConfig,
            progress: Callable[[], None] | None = None) -> dict[str, dict[str, float]]:
    """``{"<B>": {"<tokens>": median seconds}}`` for ``model`` over the grid.

    Every point is warmed up first; then the timed calls go round-robin over the grid
    (``repeats`` rounds), so that slow drift of a shared machine spreads over all points alike
    instead of biasing the ones measured last."""
    import torch

    sync = torch.cuda.synchronize if cfg.device.startswith("cuda") else (lambda: None)
    now = clock_fn(cfg.clock)
    fns = {(b, t): step_fn(model, b, t, cfg.context_len) for b in batch_sizes for t in tokens}
    for fn in fns.values():
        for _ in range(cfg.warmup):
            fn()
    sync()
    times: dict[tuple[int, int], list[float]] = {k: [] for k in fns}
    for _ in range(cfg.repeats):
        for key, fn in fns.items():
            t0 = now()
            fn()
            sync()
            times[key].append(now() - t0)
    table: dict[str, dict[str, float]] = {}
    for (b, t), ts in times.items():
        table.setdefault(str(b), {})[str(t)] = statistics.median(ts)
        if progress is not None:
            progress()
    return table


@dataclass
class CostTable:
    """A measured cost table; ``target[B][tokens]`` and ``draft[B][tokens]`` in seconds."""

    device: str
    target: dict[str, dict[str, float]]
    draft: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"format": COST_TABLE_FORMAT, "device": self.device, "target": self.target, "draft": self.draft,
                "source": self.source, **self.extra}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    def target_s(self, batch: int, tokens: int) -> float:
        """Target step seconds at (batch, tokens), linearly interpolated within the grid."""
        return _lookup(self.target, batch, tokens, "target")

    def draft_s(self, batch: int, tokens: int = 1) -> float:
        return _lookup(self.draft, batch, tokens, "draft")


def _interp(xs: list[int], x: float) -> tuple[int, int, float]:
    if x <= xs[0]:
        return xs[0], xs[0], 0.0
    if x >= xs[-1]:
        return xs[-1], xs[-1], 0.0
    for lo, hi in zip(xs, xs[1:]):
        if lo <= x <= hi:
            return lo, hi, (x - lo) / (hi - lo)
    raise AssertionError("unreachable")


def _lookup(table: dict[str, dict[str, float]], batch: int, tokens: int, name: str) -> float:
    if not table:
        raise KeyError(f"cost table has no {name!r} entries")
    bs = sorted(int(b) for b in table)
    b0, b1, wb = _interp(bs, batch)

    def at(b: int) -> float:
        ts = sorted(int(t) for t in table[str(b)])
        t0, t1, wt = _interp(ts, tokens)
        row = table[str(b)]
        return (1 - wt) * row[str(t0)] + wt * row[str(t1)]

    return (1 - wb) * at(b0) + wb * at(b1)


def load_cost_table(path: str | Path) -> CostTable:
    """Read and validate a ``cost_table.json`` (format, positive seconds, integer keys)."""
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != COST_TABLE_FORMAT:
        raise ValueError(f"{path}: field 'format' must be {COST_TABLE_FORMAT!r}, got {data.get('format')!r}")
    for part in ("target", "draft"):
        tab = data.get(part)
        if not isinstance(tab, dict) or (part == "target" and not tab):
            raise ValueError(f"{path}: field {part!r} must be a mapping {{B: {{tokens: seconds}}}}")
        for b, row in tab.items():
            if not str(b).isdigit() or not isinstance(row, dict) or not row:
                raise ValueError(f"{path}: {part}[{b!r}] must map a batch size to {{tokens: seconds}}")
            for t, s in row.items():
                if not str(t).isdigit() or not isinstance(s, (int, float)) or s <= 0:
                    raise ValueError(f"{path}: {part}[{b}][{t!r}] must be a positive number of seconds, got {s!r}")
    extra = {k: v for k, v in data.items() if k not in ("format", "device", "target", "draft", "source")}
    return CostTable(str(data.get("device", "")), data["target"], data.get("draft", {}), str(data.get("source", "")),
                     extra)


class _EngineCell:
    """Engine steps at one (B, D) on random prompts, attending to ``context`` tokens on average.

    A step's attention reads every request's whole cache, so the cell keeps its requests' lengths
    in a window centred on ``context``: prompts of ``context - spread`` tokens (``spread`` =
    max(8, 2 (D+1)), less where the context is shorter), and the engine is rebuilt with fresh
    prompts (prefill step untimed) before a step that could take the longest request past
    ``context + spread`` or that some request's token budget would cap. (Letting the requests grow
    for the cell's whole life instead made the profiled step dearer than the sweep's steady steps
    at the same nominal context, increasingly so with B, where attention weighs most.)
    :meth:`step` returns (step seconds - drafter seconds, drafter seconds) of one step with all B
    requests drafting the full D."""

    def __init__(self, pipe: Any, batch: int, draft_len: int, context: int, cfg: ProfileConfig,
                 sampled: bool = False):
        import torch

        self.pipe, self.batch, self.d, self.context, self.sampled = pipe, batch, draft_len, context, sampled
        ctx = int(pipe.target.config.max_position_embeddings)
        room = ctx - context - 1
        if room < 2 * (draft_len + 2):
            raise ValueError(f"context {context} at batch {batch}: leaves {room} of the target's {ctx} "
                             f"positions, too few for steps of D={draft_len}")
        spread = min(max(8, 2 * (draft_len + 1)), context - 1, room)
        self.prompt_len, self.max_len = context - spread, context + spread
        self.budget = min(ctx - self.prompt_len - 1, 64 * (draft_len + 1))
        self.sync = torch.cuda.synchronize if cfg.device.startswith("cuda") else (lambda: None)
        self.now = clock_fn(cfg.clock)
        self.gen = torch.Generator().manual_seed(batch * 131 + draft_len)
        self.builds = 0
        self.left: dict[int, int] = {}
        self.eng: Any = None
        self.spent = [0.0]

    def _build(self) -> None:
        import torch

        from trtspec.runtime import SamplingParams

        eng = self.pipe.engine(max_batch_size=self.batch, max_seq_len=self.prompt_len + self.budget + 1)
        vocab = self.pipe.target.config.vocab_size
        params = SamplingParams(max_new_tokens=self.budget, **(SAMPLED_PROBE if self.sampled else {}))
        for i in range(self.batch):
            eng.add_request(i, torch.randint(0, vocab, (self.prompt_len,), generator=self.gen).tolist(), params)
        propose, spent, now, sync = eng.drafter.propose, self.spent, self.now, self.sync

        def timed_propose(*args, **kwargs):  # the drafter's share of each step, on our clock
            t = now()
            try:
                return propose(*args, **kwargs)
            finally:
                sync()
                spent[0] += now() - t

        eng.drafter.propose = timed_propose
        self.eng, self.left = eng, {i: self.budget for i in range(self.batch)}
        self.builds += 1
        self._account(eng.step())  # prefill + first step: untimed

    def _account(self, outs: Sequence[Any]) -> None:
        for o in outs:
            self.left[o.request_id] -= len(o.new_token_ids)
            if o.finished:
                raise RuntimeError(f"profile: a request finished early at B={self.batch}, D={self.d}")

    def step(self) -> tuple[float, float]:
        """One step (rebuilding first if needed); returns (seconds - drafter seconds, drafter seconds)."""
        longest = self.prompt_len + self.budget - min(self.left.values()) if self.eng is not None else 0
        if self.eng is None or min(self.left.values()) < self.d + 2 or longest + self.d + 1 > self.max_len:
            self._build()
        d0 = self.spent[0]
        self.sync()
        t0 = self.now()
        outs = self.eng.step()
        self.sync()
        wall = self.now() - t0
        self._account(outs)
        dd = self.spent[0] - d0 if self.d else 0.0  # D = 0: the whole step is the target's
        return wall - dd, dd


def fit_draft_cost(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``seconds = c + D * t`` over ``(D, seconds)`` points with D >= 1; returns
    ``(c, t)`` with c >= 0 and t > 0 (one point: c = 0, t = seconds / D)."""
    if not points or any(d < 1 for d, _ in points):
        raise ValueError(f"points={list(points)}: expected (D >= 1, seconds) pairs")
    if len({d for d, _ in points}) < 2:
        n = len(points)
        return 0.0, max(sum(y / d for d, y in points) / n, 1e-9)
    n = len(points)
    mx, my = sum(d for d, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((d - mx) * (y - my) for d, y in points) / sum((d - mx) ** 2 for d, _ in points)
    slope = max(slope, 1e-9)
    return max(my - slope * mx, 0.0), slope


def profile_engine(target_dir: str | Path, draft_dir: str | Path, cfg: ProfileConfig, *,
                   drafter: str = "draft_model", progress: Callable[[], None] | None = None
                   ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, Any]]:
    """(target table, draft table, extra sections) by the ``engine`` method: loads the pair, then
    :func:`profile_pipeline`."""
    import torch

    from trtspec.runtime import load_pipeline

    dtype = getattr(torch, cfg.dtype)
    pipe = load_pipeline(str(target_dir), None if draft_dir is None else str(draft_dir), drafter=drafter, draft_len=max(max(cfg.tokens) - 1, 1),
                         device=cfg.device, dtype=dtype)
    return profile_pipeline(pipe, cfg, progress=progress)


def profile_pipeline(pipe: Any, cfg: ProfileConfig, *, progress: Callable[[], None] | None = None
                     ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], dict[str, Any]]:
    """(target table, draft table, extra sections) of a loaded pipeline by the ``engine`` method (see
    module docstring): one engine per (B, D) and verification method (sharing the models),
    ``warmup`` untimed steps each, then ``repeats`` rounds of one timed step of every cell in turn,
    the median per point. Extra sections: ``sample`` when ``cfg.verify`` has it."""
    cells = {(v, b, t - 1): _EngineCell(with_draft_len(pipe, t - 1), b, t - 1, cfg.context_for(b), cfg,
                                        sampled=v == "sample")
             for v in cfg.verify for b in cfg.batch_sizes for t in cfg.tokens}
    for cell in cells.values():
        for _ in range(cfg.warmup):
            cell.step()
    samples: dict[tuple, list[tuple[float, float]]] = {k: [] for k in cells}
    for _ in range(cfg.repeats):
        for key, cell in cells.items():
            samples[key].append(cell.step())
    if progress is not None:
        for _ in cells:
            progress()
    tables = {v: _fold(cfg, {(b, d): x for (vv, b, d), x in samples.items() if vv == v}) for v in cfg.verify}
    target, draft = tables["greedy"]
    extra = {"sample": {"target": tables["sample"][0], "draft": tables["sample"][1]}} if "sample" in tables else {}
    feeds = measure_catch_up(with_draft_len(pipe, 1), cfg)
    if feeds:
        extra["catch_up"] = feeds
    return target, draft, extra


def measure_catch_up(pipe: Any, cfg: ProfileConfig) -> dict[str, dict[str, float]]:
    """``{B: {U: seconds}}``: the drafter feeding B newcomers' prompts, a backlog of U tokens each (its
    prefill at admission, timed alone on ``cfg.clock``; a static engine of ``pipe``), for B in
    ``cfg.batch_sizes`` and U in ``cfg.catch_up_tokens``; the cells take turns, the median of
    ``cfg.repeats`` after ``cfg.warmup``. Empty for a drafter that keeps no cache (nothing to feed)."""
    import torch

    ctx = int(pipe.target.config.max_position_embeddings)
    backlogs = sorted({min(u, ctx - 2) for u in cfg.catch_up_tokens if u >= 2})
    sync = torch.cuda.synchronize if cfg.device.startswith("cuda") else (lambda: None)
    now, gen, vocab = clock_fn(cfg.clock), torch.Generator().manual_seed(11), pipe.target.config.vocab_size
    engines = {(b, u): pipe.engine(max_batch_size=b, max_seq_len=u + 2) for b in cfg.batch_sizes for u in backlogs}
    timed: dict[tuple[int, int], list[float]] = {k: [] for k in engines}
    backlog: dict[tuple[int, int], int] = {}   # the backlog each cell's prompts really leave (drafters differ)
    for k, eng in engines.items():
        drafter, orig = eng.drafter, eng.drafter.prefill

        def prefill(reqs, drafter=drafter, orig=orig, key=k):
            backlog[key] = max(drafter.backlog(r) for r in reqs)
            if backlog[key] < 2:   # nothing to feed: a drafter without a cache
                return orig(reqs)
            sync()
            t0 = now()
            orig(reqs)
            sync()
            timed[key].append(now() - t0)

        drafter.prefill = prefill
    for rnd in range(cfg.warmup + cfg.repeats):
        for (b, u), eng in engines.items():
            for i in range(b):
                eng.add_request(i, torch.randint(0, vocab, (u,), generator=gen).tolist())
            eng.admit()
            for i in range(b):
                eng.abort(i)
            if rnd < cfg.warmup:
                timed[b, u].clear()
    return {str(b): {str(backlog[b, u]): statistics.median(timed[b, u]) for u in backlogs if timed[b, u]}
            for b in cfg.batch_sizes if any(timed[b, u] for u in backlogs)}


def _fold(cfg: ProfileConfig, samples: dict[tuple[int, int], list[tuple[float, float]]]):
    """Per-(B, D) samples of (step - drafter, drafter) seconds -> (target table, draft table)."""
    rest = {k: statistics.median(r for r, _ in v) for k, v in samples.items()}
    dd = {k: statistics.median(x for _, x in v) for k, v in samples.items()}
    target: dict[str, dict[str, float]] = {}
    draft: dict[str, dict[str, float]] = {}
    for b in cfg.batch_sizes:
        pts = [(d, dd[b, d]) for (bb, d) in dd if bb == b and d >= 1]
        if not pts:
            raise ValueError("tokens: the engine method needs some tokens >= 2 (D >= 1) to time the drafter")
        c, slope = fit_draft_cost(pts)
        draft[str(b)] = {"1": slope}
        target[str(b)] = {str(d + 1): rest[b, d] + (c if d >= 1 else 0.0) for (bb, d) in sorted(rest) if bb == b}
    return target, draft


def profile_pair(target_dir: str | Path, draft_dir: str | Path | None, cfg: ProfileConfig,
                 progress: Callable[[], None] | None = None, *, drafter: str = "draft_model") -> CostTable:
    """Measure the cost table of a target (and draft model, if given) on ``cfg.device``."""
    import torch

    extra = {"context_len": cfg.context_len, "batch_contexts": {str(b): c for b, c in cfg.batch_contexts},
             "dtype": cfg.dtype, "warmup": cfg.warmup, "repeats": cfg.repeats,
             "method": cfg.method, "clock": cfg.clock, "verify": list(cfg.verify)}
    use_clock(cfg.clock, cfg.device)
    if cfg.method == "engine":
        if draft_dir is None and drafter != "mtp":   # mtp drafts with the target's own MTP layer
            raise ValueError("method='engine' needs a draft model (it times speculative engine steps); "
                             "use method='forward' for the target alone")
        target, draft, sections = profile_engine(target_dir, draft_dir, cfg, drafter=drafter, progress=progress)
        extra.update(sections)
        return CostTable(
            device_name(cfg.device), target, draft,
            source=(f"trtspec profile (engine): target={target_dir}, draft={draft_dir}; trtspec runtime engine "
                    f"steps, {cfg.context_len} prompt tokens (per batch: {dict(cfg.batch_contexts) or 'same'}), "
                    f"median of {cfg.repeats} steps interleaved over the grid after {cfg.warmup} warm-up; "
                    f"draft time fitted as c + D*t, c folded into target; verification {'/'.join(cfg.verify)}; "
                    f"torch {torch.__version__}"),
            extra=extra)

    from trtspec.runtime.models import load_model

    dtype = getattr(torch, cfg.dtype)
    target = load_model(target_dir, device=cfg.device, dtype=dtype).eval()
    table = measure(target, cfg.batch_sizes, cfg.tokens, cfg, progress)
    del target
    draft: dict[str, dict[str, float]] = {}
    if draft_dir is not None:
        dm = load_model(draft_dir, device=cfg.device, dtype=dtype).eval()
        draft = measure(dm, cfg.batch_sizes, cfg.draft_tokens, cfg, progress)
    return CostTable(
        device_name(cfg.device), table, draft,
        source=(f"trtspec profile (forward): target={target_dir}, draft={draft_dir}; forward of [B, tokens] "
                f"after {cfg.context_len} cached tokens + lm_head; median of {cfg.repeats} after {cfg.warmup} "
                f"warm-up; torch {torch.__version__}"),
        extra=extra,
    )


def grid_points(cfg: ProfileConfig, with_draft: bool) -> int:
    """Number of timed points (for progress bars)."""
    if cfg.method == "engine":
        return len(cfg.batch_sizes) * len(cfg.tokens) * len(cfg.verify)
    return len(cfg.batch_sizes) * (len(cfg.tokens) + (len(cfg.draft_tokens) if with_draft else 0))
