"""Shared pytest fixtures (seeded generators of draft trees and distributions for the op tests) and
a check that no test leaves a process behind."""
from __future__ import annotations

import os

import pytest
import torch

from process_guard import ProcessGuard

_guard = ProcessGuard(os.getpid())


def pytest_collection_modifyitems(config, items):
    """The ``engines`` tier (real vLLM / SGLang environments, minutes per engine) runs only when asked for with
    ``-m engines``; elsewhere its tests are skipped with that hint."""
    if "engines" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="engines tier: bash tools/engines/setup.sh && pytest -m engines")
    for item in items:
        if "engines" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logfinish(nodeid, location):
    """Attribute each new live descendant of the test process to the test after which it appeared."""
    _guard.note(nodeid)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if a child of the test process (a server, a build, a stub) is still alive at the
    end; list each with the test after which it appeared, then kill it so the run can finish."""
    leftovers = _guard.survivors()
    if not leftovers:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"pid {pid} ({cmd}), alive since {test}" for pid, cmd, test in leftovers]
    if reporter is not None:
        reporter.write_sep("=", f"{len(leftovers)} process(es) left behind by the tests", red=True)
        for line in lines:
            reporter.write_line(line)
    _guard.kill(pid for pid, _cmd, _test in leftovers)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _random_parents(g: torch.Generator, B: int, N: int, kind: str) -> torch.Tensor:
    """int32 [B, N] trees: "chain" (parents[i] = i-1), "star" (all children of the root) or "tree"
    (each node's parent uniform among the earlier nodes, biased to recent ones so trees get deep)."""
    parents = torch.empty(B, N, dtype=torch.int32)
    parents[:, 0] = -1
    for i in range(1, N):
        if kind == "chain":
            parents[:, i] = i - 1
        elif kind == "star":
            parents[:, i] = 0
        else:
            lo = max(0, i - 4)
            parents[:, i] = torch.randint(lo, i, (B,), generator=g, dtype=torch.int32)
    return parents


def _distributions(g: torch.Generator, B: int, N: int, V: int, sharpness: float = 2.0, agreement: float = 0.7):
    """(target_probs, draft_probs) float32 [B, N, V]: softmaxes of shared random logits plus
    independent noise, so draft and target overlap partly (agreement in [0, 1])."""
    base = torch.randn(B, N, V, generator=g) * sharpness
    target = torch.softmax(base + (1 - agreement) * sharpness * torch.randn(B, N, V, generator=g), -1)
    draft = torch.softmax(base + (1 - agreement) * sharpness * torch.randn(B, N, V, generator=g), -1)
    return target.contiguous(), draft.contiguous()


def _draw_tokens(g: torch.Generator, parents: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """int64 [B, N]: the token of node i drawn from rows[b, parents[b, i]] (root token 0)."""
    B, N = parents.shape
    tokens = torch.zeros(B, N, dtype=torch.int64)
    for i in range(1, N):
        src = rows[torch.arange(B), parents[:, i].long()].float()
        tokens[:, i] = torch.multinomial(src, 1, generator=g).squeeze(1)
    return tokens


def _per_draft(rows: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """float32 [B, N-1, V]: row j = rows[b, parents[b, j+1]], the distribution draft j (node j+1)
    was drawn from when each node's children are drawn from that node's row (the sampled ops'
    per-draft layout)."""
    B, N = parents.shape
    idx = parents[:, 1:].long().clamp(min=0)
    return torch.gather(rows, 1, idx[..., None].expand(B, N - 1, rows.shape[-1])).contiguous()


@pytest.fixture
def gen():
    """A torch.Generator seeded per test (seed 1234)."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def random_parents():
    return _random_parents


@pytest.fixture
def distributions():
    return _distributions


@pytest.fixture
def draw_tokens():
    return _draw_tokens


@pytest.fixture
def per_draft():
    return _per_draft
