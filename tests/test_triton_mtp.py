"""A DeepSeek-V3-layout bundle (MLA, MoE, MTP drafter) served by a real tritonserver (marker ``tritonserver``):
greedy and seeded sampled requests answer the trtspec runtime's own texts, with the MTP layer drafting."""
from __future__ import annotations

import pytest

from deepseek_fixtures import make_deepseek
from test_triton_server import _generate, _server_install, runtime_texts

pytestmark = pytest.mark.tritonserver

PROMPTS = ["def f(x):\n", "import os\n", "class A:"]


@pytest.fixture(scope="module")
def mtp_bundle(tmp_path_factory):
    import yaml

    _server_install()
    root = tmp_path_factory.mktemp("mtp_bundle")
    make_deepseek(root / "target", seed=8, std=0.2)
    (root / "llm_api.yaml").write_text(yaml.safe_dump({"speculative_config": {
        "decoding_type": "MTP", "max_draft_len": 3, "draft_len_schedule": {8: 3, 64: 1}}}))
    return root


def test_mtp_bundle_serves_greedy_and_seeded_sampled_requests(mtp_bundle, tmp_path):
    from trtspec.runtime import load_pipeline
    from trtspec.triton.repository import write_repository
    from trtspec.triton.server import TritonServer

    pipe = load_pipeline(mtp_bundle / "target", drafter="mtp", draft_len=3, draft_len_schedule={8: 3, 64: 1})
    greedy = pipe.generate(PROMPTS, max_new_tokens=16)
    sampled = [{"text_input": p, "sampling_param_max_tokens": 16, "sampling_param_temperature": 0.8,
                "sampling_param_top_p": 0.95, "sampling_param_seed": 100 + i} for i, p in enumerate(PROMPTS)]
    want_sampled = runtime_texts(pipe, sampled)
    write_repository(mtp_bundle, mtp_bundle / "triton")
    with TritonServer(mtp_bundle / "triton", install=_server_install(), log_path=tmp_path / "mtp.log") as srv:
        for prompt, g in zip(PROMPTS, greedy):
            out = _generate(srv, {"text_input": prompt, "sampling_param_max_tokens": 16,
                                  "sampling_param_return_perf_metrics": True})
            assert out["text_output"] == g.text
            assert out["total_draft_tokens"] == g.stats.draft_tokens > 0
            assert out["total_accepted_draft_tokens"] == g.stats.accepted_tokens
        for payload, want in zip(sampled, want_sampled):
            assert _generate(srv, payload)["text_output"] == want
        assert "drafter mtp, draft_len 3" in srv.log_path.read_text()
