"""Session-scoped model pairs and exported graphs shared by the tests/test_onnx_*.py files.

An export traces the whole decoder with ``torch.export``, so each graph set is written once per
session (import the fixtures into a test module with ``from onnx_fixtures import ...``).
"""
from __future__ import annotations

import pytest
import torch

from runtime_fixtures import make_eagle3, make_model


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """(target_dir, draft_dir): a 2-layer byte-level target and a noisy copy that agrees with it often."""
    root = tmp_path_factory.mktemp("onnx_pair")
    target = make_model(root / "target", seed=0, layers=2)
    draft = make_model(root / "draft", seed=1, layers=2, from_model=target, noise=0.002)
    return target, draft


@pytest.fixture(scope="session")
def exported(pair, tmp_path_factory):
    """The greedy graphs of ``pair`` for trees of up to 5 nodes."""
    from trtspec.onnx.export import export_step_graphs

    out = tmp_path_factory.mktemp("onnx_out") / "onnx"
    export_step_graphs(*pair, out, max_nodes=5)
    return out


@pytest.fixture(scope="session")
def eagle3_pair(pair, tmp_path_factory):
    """(target_dir, head_dir): ``pair``'s target and an echo EAGLE-3 head (accepted when the target repeats)."""
    head = make_eagle3(tmp_path_factory.mktemp("onnx_eagle3") / "head", pair[0], aux_ids=(0, 1), echo=True)
    return pair[0], head


@pytest.fixture(scope="session")
def eagle3_exported(eagle3_pair, tmp_path_factory):
    from trtspec.onnx.export import export_step_graphs

    out = tmp_path_factory.mktemp("onnx_eagle3_out") / "onnx"
    export_step_graphs(*eagle3_pair, out, max_nodes=4, drafter="eagle3")
    return out


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (and do not fight the other jobs on a shared machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield 1
    torch.set_num_threads(n)
