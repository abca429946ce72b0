"""`trtspec plan`: context buckets, --engine / --pricing, and the per-op-class sources it prints."""
import json

from click.testing import CliRunner

from trtspec.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_context_buckets_give_one_recipe_each():
    r = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3", "--batch", "1,64",
            "--context", "1k,32k", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert sorted(doc["contexts"]) == ["1024", "32768"]
    assert all(rec["context"] == int(c) for c, rec in doc["contexts"].items())
    short, long_ = (doc["contexts"][c]["rows"] for c in ("1024", "32768"))
    assert long_[-1]["verify_ms"] > short[-1]["verify_ms"]  # attention over 32k tokens at B = 64


def test_table_says_what_priced_each_op_class():
    r = run("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--drafter", "eagle3", "--batch", "1",
            "--engine", "vllm")
    assert r.exit_code == 0, r.output
    assert "verify: attention: perf-db vllm 0.24.0 h200_sxm" in r.output
    assert "ceil(G*(1+D)/128)" in r.output
    r = run("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--drafter", "eagle3", "--batch", "1",
            "--pricing", "roofline", "--json")
    doc = json.loads(r.output)
    assert doc["provenance"]["cost_model"].startswith("analytic roofline")
    assert set(doc["rows"][0]["sources"].values()) <= {"roofline", "GPU file"}


def test_bad_context_and_ep_are_refused():
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--drafter", "eagle3",
                                  "--context", "1k,abc"])
    assert r.exit_code != 0 and "expected token counts like 4096 or 1k,8k,32k" in r.output
    r = CliRunner().invoke(main, ["plan", "--model", "deepseek-r1", "--gpu", "h200", "--drafter", "mtp", "--tp", "8",
                                  "--ep", "3"])
    assert r.exit_code != 0 and "--ep must be >= 1 and divide --tp 8" in r.output
