"""`trtspec plan` and `trtspec recipes` through click."""
import json

import yaml
from click.testing import CliRunner

from trtspec.cli import main


def run(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def test_plan_json_rows_and_engine_settings():
    r = run("plan", "--model", "llama-3.1-70b", "--gpu", "h200", "--quant", "fp8", "--drafter", "eagle3",
            "--batch", "1,16,64,512", "--context", "1024", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [row["batch"] for row in doc["rows"]] == [1, 16, 64, 512]
    for row in doc["rows"]:
        assert {"draft_len", "expected_al", "draft_ms", "verify_ms", "step_ms", "tokens_per_s", "speedup",
                "binding_rule"} <= set(row)
    assert doc["rows"][-1]["draft_len"] == 0
    sc = doc["trtllm"]["speculative_config"]
    assert not ("draft_len_schedule" in sc and "max_concurrency" in sc)
    assert doc["provenance"]["acceptance"]["eagle3"].startswith("prior:llama3.3-70b-eagle3")
    # the book's own engine file is named as in the repository, not where this checkout lives
    assert doc["provenance"]["cost_model"]["engine_overheads"] == "recipes/engines/trtllm.yaml"


def test_plan_table_plot_and_out(tmp_path):
    png, out = tmp_path / "plan.png", tmp_path / "recipe.yaml"
    r = run("plan", "--model", "deepseek-r1", "--gpu", "h200", "--tp", "8", "--quant", "fp8", "--drafter", "mtp",
            "--batch", "1,8,64", "--plot", str(png), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "binding rule" in r.output and "TensorRT-LLM speculative_config" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = yaml.safe_load(out.read_text())
    assert doc["format"] == "trtspec.recipe/v1" and doc["tp"] == 8


def test_plan_draft_len_what_if():
    r = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3", "--batch", "1,32",
            "--draft-len", "3", "--json")
    doc = json.loads(r.output)
    assert [row["draft_len"] for row in doc["rows"]] == [3, 3]


def test_plan_errors_are_clear():
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3.1-8b", "--gpu", "h999", "--drafter", "eagle3"])
    assert r.exit_code != 0 and "unknown GPU 'h999'" in r.output and "h200" in r.output
    r = CliRunner().invoke(main, ["plan", "--model", "qwen3-8b", "--gpu", "h200", "--drafter", "ngram"])
    assert r.exit_code != 0 and "no acceptance source" in r.output
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--drafter", "medusa",
                                  "--acceptance", "rates=0.5"])
    assert r.exit_code != 0 and "unknown --drafter 'medusa'" in r.output


def test_hybrid_model_plans_with_inline_acceptance():
    r = run("plan", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--quant", "fp8", "--drafter", "mtp",
            "--acceptance", "al=2.4@3", "--batch", "1,64", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["rows"][0]["breakdown_ms"]["state"] > 0


def test_recipes_list_show_match():
    r = run("recipes", "list", "--json")
    items = json.loads(r.output)
    assert len({(i["model"], i["gpu"]) for i in items}) >= 8
    name = items[0]["name"]
    r = run("recipes", "show", name)
    assert r.exit_code == 0 and "provenance" in r.output
    r = run("recipes", "match", "--model", "qwen3-32b", "--gpu", "h200", "--json")
    assert r.exit_code == 0, r.output
    found = json.loads(r.output)
    assert found and found[0]["stored"].startswith("llama-3.3-70b__h200")  # dense GQA G=8, similar size
    assert found[0]["derived"]["model"] == "qwen3-32b"


def test_per_drafter_acceptance_and_max_batch_from_batches(tmp_path):
    r = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3,ngram",
            "--acceptance", "eagle3=prior:llama3.1-8b-eagle3", "--acceptance", "ngram=rates=0.4",
            "--batch", "1,64", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc["acceptance"]) == {"eagle3", "ngram"} and doc["max_batch_size"] == 64
    assert doc["acceptance"]["ngram"]["rates"] == [0.4]


def test_plan_accepts_a_hf_model_directory(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run("plan", "--model", str(tmp_path), "--gpu", "l40s", "--drafter", "ngram", "--acceptance", "al=1.8@4",
            "--batch", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["model"] == tmp_path.name
