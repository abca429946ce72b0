"""The speculative-decoding loop: lockstep batched steps, ragged acceptance, continuous batching.

One step for the B running requests (gpt-fast's ``speculative_decode``, batched)::

    D      = schedule(B)                                   # draft depth for this batch size (static), or
    D[b]   = controller.choose(requests, costs, estimates) # each request's depth (adaptive: controller.py)
    tree   = drafter.propose(requests, D)                  # [B, N] tokens + parents, node 0 = root
    logits = target(tree)                                  # one forward; node i at cache_len + i,
                                                           # position cache_len + depth(i), tree mask
    acc, path, bonus = verify(tree, logits)                # greedy | sample | block (trtspec ops)
    cache  = compact(cache, accepted_kv_indices(path, acc, cache_len))
    tokens += tree.tokens[path[1:acc+1]] + [bonus]         # AL = acc + 1 tokens

Invariant per request: the target cache holds ``tokens[:-1]``; ``tokens[-1]`` (the root) is fed
with the next tree. D = 0 is the same step with a one-node tree.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from trtspec.runtime import masks
from trtspec.runtime.controller import AdaptiveConfig, Controller
from trtspec.runtime.drafters.base import Drafter, DraftMode, tree_size
from trtspec.runtime.models import Transformer
from trtspec.runtime.params import SamplingParams, SpecConfig
from trtspec.runtime.sampling import generators, probs_per_request, request_seed, signed64
from trtspec.runtime.stats import SpecStats
from trtspec.runtime.verify import ops


@dataclass
class Request:
    """A running request: ``tokens`` = prompt + generated (the last one is the root)."""

    request_id: object
    params: SamplingParams
    tokens: list[int]
    prompt_len: int
    vocab_size: int
    seed: int = 0          # its random stream (SamplingParams.seed, or derived by the engine)
    row: int = -1
    cache_len: int = 0
    finished: bool = False
    stats: SpecStats = field(default_factory=SpecStats)

    @property
    def generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def sampling(self) -> tuple[float, int, float]:
        return self.params.transform

    @property
    def stream(self) -> tuple[int, int]:
        """``(seed, step)``: this step's random stream, ``step`` = the target steps taken so far."""
        return self.seed, self.stats.steps


@dataclass
class StepOutput:
    """What one step produced for one request: its new tokens, whether it finished, its stats so far."""

    request_id: object
    new_token_ids: list[int]
    finished: bool
    stats: SpecStats


class Engine:
    """Continuous-batching speculative decoder over a static cache of ``max_batch_size`` rows of
    ``max_seq_len`` tokens (plus tree scratch). Requests join with :meth:`add_request` and leave when
    finished (or :meth:`abort`); :meth:`step` advances every running request by one target step.
    With ``spec.speculation == "adaptive"``, ``adaptive`` (the device's step costs and the acceptance
    prior) drives a :class:`~trtspec.runtime.controller.Controller` that picks every step's depths."""

    def __init__(self, target: Transformer, drafter: Drafter, spec: SpecConfig, *,
                 max_batch_size: int = 8, max_seq_len: int | None = None, adaptive: AdaptiveConfig | None = None):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        ctx = target.config.max_position_embeddings
        if max_seq_len is not None and not 2 <= max_seq_len <= ctx:
            raise ValueError(f"max_seq_len must be in 2..{ctx} (the target's context), got {max_seq_len}")
        if spec.tree is not None and spec.tree.topk > drafter.max_branching:
            raise ValueError(f"drafter {drafter.name!r} proposes chains only; got tree topk={spec.tree.topk}")
        self.target, self.drafter, self.spec = target, drafter.fork(), spec
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len or ctx
        self.device = target.lm_head.weight.device
        self.slots = self.max_seq_len + tree_size(spec.branching, spec.max_depth) + 1   # + scratch slot
        self.cache = target.new_cache(max_batch_size, self.slots)
        self.drafter.reserve(max_batch_size, self.slots)
        self.free_rows = list(range(max_batch_size))[::-1]
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.ids: set = set()
        self.added = 0                 # requests added so far: the index of a derived seed
        self.step_count = 0
        self.stats = SpecStats()
        self.controller = None
        self._joined = self._finished = 0   # requests admitted since the last step; finished in it
        if spec.speculation == "adaptive":
            if adaptive is None:
                raise ValueError("speculation='adaptive' needs adaptive=AdaptiveConfig(costs=...) (the device's step "
                                 "costs: a `trtspec profile` cost table)")
            self.controller = Controller(adaptive, spec.max_depth, spec.branching)

    # -- requests --------------------------------------------------------------------------------
    def add_request(self, request_id, prompt_ids: list[int], params: SamplingParams | dict | None = None) -> None:
        """Queue a request; it joins the batch at the next step with a free cache row.
        ``params``: SamplingParams, or a dict of its fields (default: greedy, 64 new tokens)."""
        params = SamplingParams(**params) if isinstance(params, dict) else (params or SamplingParams())
        V = self.target.config.vocab_size
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ValueError(f"request {request_id!r}: prompt_ids is empty (need >= 1 token)")
        if min(ids) < 0 or max(ids) >= V:
            raise ValueError(f"request {request_id!r}: prompt token ids must be in 0..{V - 1} (target vocab_size)")
        if len(ids) >= self.max_seq_len:
            raise ValueError(f"request {request_id!r}: prompt of {len(ids)} tokens does not fit the context of "
                             f"{self.max_seq_len} tokens (it must leave room for >= 1 new token)")
        if request_id in self.ids:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        self.ids.add(request_id)
        seed = params.seed if params.seed is not None else request_seed(self.spec.seed, self.added)
        self.added += 1
        self.waiting.append(Request(request_id, params, ids, len(ids), V, seed))

    def abort(self, request_id) -> None:
        """Remove a request (running or waiting) and free its cache row."""
        self.waiting = [r for r in self.waiting if r.request_id != request_id]
        self.ids.discard(request_id)
        for r in [r for r in self.running if r.request_id == request_id]:
            self._release(r)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _release(self, r: Request) -> None:
        self.ids.discard(r.request_id)
        self.running.remove(r)
        self.drafter.release(r)
        self.free_rows.append(r.row)

    # -- prefill ---------------------------------------------------------------------------------
    def admit(self) -> int:
        """Prefill waiting requests into free rows now (``step`` does it first anyway); returns how many joined."""
        before = len(self.running)
        self._admit()
        return len(self.running) - before

    @torch.inference_mode()
    def _admit(self) -> None:
        """Give waiting requests free rows and prefill ``tokens[:-1]`` into the target cache."""
        new = []
        while self.waiting and self.free_rows:
            r = self.waiting.pop(0)
            r.row = self.free_rows.pop()
            new.append(r)
        if not new:
            return
        counts = torch.tensor([len(r.tokens) - 1 for r in new], device=self.device)
        T = max(int(counts.max()), 1)
        tokens = torch.zeros(len(new), T, dtype=torch.int64, device=self.device)
        for i, r in enumerate(new):
            tokens[i, : len(r.tokens) - 1] = torch.tensor(r.tokens[:-1], device=self.device)
        zero = torch.zeros(len(new), dtype=torch.int64, device=self.device)
        positions, write_idx, mask = masks.chain_block(zero, counts, T, self.slots)
        rows = torch.tensor([r.row for r in new], device=self.device)
        _, aux = self.target(tokens, positions, self.cache, rows, write_idx, mask, self.drafter.capture_layers)
        for r in new:
            r.cache_len = len(r.tokens) - 1
        self._joined += len(new)
        self.drafter.admit(new, aux)
        if self.controller is None:   # adaptive: the first step that drafts feeds it, priced as the catch-up
            self.drafter.prefill(new)
        self.running += new

    # -- one step --------------------------------------------------------------------------------
    def _depth(self, r: Request, D: int) -> int:
        """Draft depth for r: D, capped so the step cannot overshoot max_new_tokens or the context."""
        budget = min(r.params.max_new_tokens - r.generated, self.max_seq_len - len(r.tokens)) - 1
        return max(0, min(D, budget)) if self.drafter.can_draft(r) else 0

    def _method(self, reqs) -> str:
        """The step's verification: ``spec.verify``, except that a batch with a sampled request
        (temperature > 0) under ``greedy`` is verified by ``sample``. Greedy requests stay exactly
        greedy under sample/block: their target and draft distributions are one-hot argmaxes."""
        if self.spec.verify == "greedy" and any(r.params.temperature > 0 for r in reqs):
            return "sample"
        return self.spec.verify

    def _draft_mode(self, reqs, method: str) -> DraftMode:
        """Greedy drafting for greedy verification; else sampling, each request from its own stream."""
        if method == "greedy":
            return DraftMode(sample=False)
        return DraftMode(sample=True, without_replacement=self.spec.siblings_without_replacement,
                         generators=tuple(generators([r.stream for r in reqs], self.device)))

    def _score(self, reqs, prop):
        """One target forward over every request's tree -> (logits float32 ``[B, N, V]``, aux or None).

        Node i of request b goes to cache slot ``cache_len[b] + i`` at position ``cache_len[b] + depth(i)``
        and attends to the committed prefix plus its ancestors (the packed mask of ``tree_metadata``).
        """
        dev, N = self.device, prop.tokens.shape[1]
        rows = torch.tensor([r.row for r in reqs], device=dev)
        cache_lens = torch.tensor([r.cache_len for r in reqs], dtype=torch.int64, device=dev)
        node = torch.arange(N, device=dev)
        if self.spec.branching == 1:          # a chain: node i has depth i and sees nodes 0..i
            depth, visible = node[None], masks.causal(N, dev)
        else:
            packed, depth, _, _ = ops().tree_metadata(prop.parents.to(torch.int32), prop.num_nodes.to(torch.int32))
            visible = masks.unpack_mask(packed, N) | torch.eye(N, dtype=torch.bool, device=dev)   # padding sees itself
        valid = node[None] < prop.num_nodes[:, None]
        positions, write_idx, mask = masks.block_inputs(
            cache_lens, visible, valid, cache_lens[:, None] + node, cache_lens[:, None] + depth.long(), self.slots)
        hidden, aux = self.target(prop.tokens, positions, self.cache, rows, write_idx, mask, self.drafter.capture_layers)
        return self.target.logits(hidden), aux

    def _compact(self, reqs, path, acc) -> torch.Tensor:
        """Move the accepted path's K/V to ``cache_len + 0..acc`` (slot ``cache_len + path[i]`` ->
        ``cache_len + i``); returns the new cache lengths ``cache_len + acc + 1`` (int32 ``[B]``)."""
        dev = self.device
        cache_lens = torch.tensor([r.cache_len for r in reqs], dtype=torch.int32, device=dev)
        if self.spec.branching == 1:          # a chain's accepted path 0..acc already sits at cache_len + 0..acc
            return cache_lens + acc.to(device=dev, dtype=torch.int32) + 1
        rows = torch.tensor([r.row for r in reqs], device=dev)
        src, dst, new_lens = ops().accepted_kv_indices(path, acc, cache_lens)
        self.cache.move(rows, src.to(dev), dst.to(dev))
        return new_lens

    @torch.inference_mode()
    def step(self) -> list[StepOutput]:
        """Advance every running request by one target step (admitting waiting ones first)."""
        t_start = time.perf_counter()
        self._admit()
        if self.controller is not None and self._finished:   # how many finished requests' slots stay empty
            self.controller.observe_turnover(self._finished, self._joined)
        self._joined = self._finished = 0
        reqs = list(self.running)
        if not reqs:
            return []
        c_start = self._cost_clock()
        t0 = time.perf_counter()
        method = self._method(reqs)
        depths, catch_up = self._depths(reqs, method)
        if self.controller is not None and max(depths) > 0:
            self.drafter.prefill(reqs)   # newcomers' prompts first, unpadded by the others' catch-up
        prop = self.drafter.propose(reqs, depths, self.spec.branching, self._draft_mode(reqs, method))
        t1 = time.perf_counter()
        logits, aux = self._score(reqs, prop)                                       # [B, N, V]
        acc, path, bonus = self._verify(reqs, prop, logits, method)                 # [B], [B, L], [B]
        if self.controller is not None:   # drafted: a chain drafter may propose fewer than asked
            nodes = prop.num_nodes.tolist()
            self.controller.observe([r.request_id for r in reqs], [min(d, n - 1) for d, n in zip(depths, nodes)],
                                    acc.tolist(), method)
        new_lens = self._compact(reqs, path, acc)
        t2 = time.perf_counter()
        outputs = self._commit(reqs, prop, acc, path, bonus, new_lens, aux)
        t3 = time.perf_counter()
        if c_start is not None:   # what this step cost as served (admissions aside), on the table's clock
            self.controller.observe_cost(method, len(reqs), max(depths), self._cost_clock() - c_start,
                                         catch_up=catch_up)
        self.step_count += 1
        for st in [r.stats for r in reqs] + [self.stats]:
            st.draft_time_s += t1 - t0
            st.verify_time_s += t2 - t1
            st.total_time_s += t3 - t_start
        self._finished = sum(r.finished for r in reqs)
        if self._finished:
            for r in [r for r in reqs if r.finished]:
                self.drafter.release(r)
                self.free_rows.append(r.row)
                self.ids.discard(r.request_id)
            self.running = [r for r in self.running if not r.finished]
        return outputs

    def _cost_clock(self) -> float | None:
        """Now on the adaptive cost table's clock (``wall``: perf_counter, after the step's last
        host read; ``cpu``: this thread's CPU time, torch running on one thread); None when the
        controller does not learn step costs."""
        clock = None if self.controller is None else self.controller.clock
        if clock is None:
            return None
        return time.perf_counter() if clock == "wall" else time.thread_time()

    def _depths(self, reqs, method: str) -> tuple[list[int], float]:
        """This step's draft depth per request: the schedule's (static) or the controller's (adaptive),
        each capped by the request's token budget; and the drafter's catch-up the controller priced."""
        if self.controller is None:
            D = self.spec.depth_for_batch(len(reqs))
            return [self._depth(r, D) for r in reqs], 0.0
        caps = [self._depth(r, self.spec.max_depth) for r in reqs]
        remaining = [min(r.params.max_new_tokens - r.generated, self.max_seq_len - len(r.tokens)) for r in reqs]
        lengths = [max(min(r.params.max_new_tokens, self.max_seq_len - r.prompt_len), 1) for r in reqs]
        choice = self.controller.choose([r.request_id for r in reqs], caps, method,
                                        backlog=[self.drafter.backlog(r) for r in reqs], remaining=remaining,
                                        lengths=lengths)
        return choice.depths, choice.catch_up

    def _verify(self, reqs, prop, logits, method):
        """-> accepted_len int32 ``[B]``, accepted path int32 ``[B, max_depth+1]`` (root first), bonus int64 ``[B]``."""
        spec = self.spec
        parents32, nodes32 = prop.parents.to(torch.int32), prop.num_nodes.to(torch.int32)
        max_depth = int(prop.depth.max())
        if method == "greedy":
            return ops().verify_greedy(prop.tokens, parents32, logits, nodes32, max_depth)
        target_probs = probs_per_request(logits, [r.sampling for r in reqs])                   # [B, N, V]
        B, N, V = target_probs.shape
        drafts = prop.tokens[:, 1:].contiguous()                                              # [B, N-1]
        draft_probs = prop.draft_probs                                                        # [B, N-1, V]
        if draft_probs is None:                       # nothing drafted (D = 0): no row is read
            draft_probs = target_probs.new_zeros(B, N - 1, V)
        seed, offset = self._streams(reqs)
        if method == "sample":
            return ops().verify_sample(drafts, parents32, target_probs, draft_probs, seed, offset,
                                       spec.siblings_without_replacement, nodes32 - 1, max_depth)
        # block verification: chains, ragged through draft_lens
        acc, bonus = ops().verify_block(drafts, target_probs, draft_probs, seed, offset, nodes32 - 1)
        # a chain's accepted path is nodes 0..acc
        steps = torch.arange(max_depth + 1, dtype=torch.int32, device=logits.device)
        path = torch.where(steps[None] <= acc[:, None], steps[None], torch.full_like(steps, -1)[None])
        return acc, path.contiguous(), bonus

    def _streams(self, reqs):
        """The verifiers' random streams, request by request: seed int64 ``[B]`` (each request's
        own) and offset int64 ``[B]`` (its step count), never its batch position."""
        seed = torch.tensor([signed64(r.seed) for r in reqs], dtype=torch.int64, device=self.device)
        offset = torch.tensor([r.stats.steps for r in reqs], dtype=torch.int64, device=self.device)
        return seed, offset

    def _commit(self, reqs, prop, acc, path, bonus, new_lens, aux):
        """Append accepted tokens + bonus, update drafter state, apply stop rules and stats."""
        acc_l, path_l, bonus_l = acc.tolist(), path.tolist(), bonus.tolist()
        lens_l, tokens_l, nodes_l = new_lens.tolist(), prop.tokens.tolist(), prop.num_nodes.tolist()
        news = []
        for i, r in enumerate(reqs):
            a = acc_l[i]
            new = [tokens_l[i][u] for u in path_l[i][1:a + 1]] + [bonus_l[i]]
            r.tokens += new
            r.cache_len = lens_l[i]
            news.append(new)
        if self.drafter.capture_layers:
            gather = path.clamp(min=0).long().to(aux.device)                           # [B, L]
            path_aux = torch.gather(aux, 1, gather[..., None].expand(-1, -1, aux.shape[-1]))
            self.drafter.commit(reqs, path_aux, acc.long() + 1)
        else:
            self.drafter.commit(reqs, None, acc.long() + 1)
        outputs = []
        for i, r in enumerate(reqs):
            new = news[i]
            keep = self._kept(r, new)
            if keep < len(new):
                del r.tokens[len(r.tokens) - (len(new) - keep):]
            out = new[:keep]
            r.stats.record_step(nodes_l[i] - 1, acc_l[i], len(out))
            self.stats.record_step(nodes_l[i] - 1, acc_l[i], len(out))
            r.finished = (r.generated >= r.params.max_new_tokens or len(r.tokens) >= self.max_seq_len
                          or (bool(out) and out[-1] in r.params.stop_token_ids))
            outputs.append(StepOutput(r.request_id, out, r.finished, r.stats))
        return outputs

    @staticmethod
    def _kept(r: Request, new: list[int]) -> int:
        """How many of ``new`` (already appended) survive the stop token and token budget."""
        room = r.params.max_new_tokens - (r.generated - len(new))
        keep = min(len(new), room)
        for j, t in enumerate(new[:keep]):
            if t in r.params.stop_token_ids:
                return j + 1
        return keep
