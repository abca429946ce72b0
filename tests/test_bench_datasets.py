"""SPEED-Bench loader: round trips, configs, built-in sample, chat templating, bad-file errors."""
import json

import pytest

from trtspec.bench import datasets as ds
from trtspec.bench.datasets import DatasetError, Prompt


def _prompts():
    return [
        Prompt("q1", "coding", "python", ("Write a sort.",), "src", "7", "easy", False),
        Prompt("q2", "math", "", ("What is 2+2?", "And 3+3?"), "", "", "", True),
        Prompt("q3", "multilingual", "ja", ("日本語で答えてください",), "s", "x", "hard", False),
    ]


def _row(**over):
    row = {"question_id": "a", "category": "qa", "sub_category": "g", "turns": ["hi"], "source": "s",
           "src_id": 1, "difficulty": None, "multiturn": False}
    row.update(over)
    return row


def test_jsonl_round_trip(tmp_path):
    p = ds.write_jsonl(_prompts(), tmp_path / "x.jsonl")
    assert ds.load_prompts(p) == _prompts()


def test_parquet_round_trip(tmp_path):
    p = ds.write_parquet(_prompts(), tmp_path / "x.parquet")
    assert ds.load_prompts(p) == _prompts()


def test_config_directory_layout(tmp_path):
    (tmp_path / "qualitative").mkdir()
    ds.write_parquet(_prompts()[:2], tmp_path / "qualitative" / "test-00000-of-00001.parquet")
    ds.write_jsonl(_prompts()[2:], tmp_path / "throughput_2k.jsonl")
    assert ds.load_prompts(tmp_path) == _prompts()[:2]
    assert ds.load_prompts(tmp_path, config="throughput_2k") == _prompts()[2:]
    with pytest.raises(DatasetError, match="no files for config 'throughput_8k'"):
        ds.load_prompts(tmp_path, config="throughput_8k")
    with pytest.raises(DatasetError, match="config='bogus'"):
        ds.load_prompts(tmp_path, config="bogus")


def test_int_ids_and_numeric_difficulty_become_text(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps(_row(question_id=17, difficulty=3.5)) + "\n")
    (p,) = ds.load_prompts(f)
    assert (p.question_id, p.src_id, p.difficulty) == ("17", "1", "3.5")


def test_builtin_sample_covers_every_category_with_five_prompts():
    prompts = ds.load_prompts("builtin")
    counts = ds.category_counts(prompts)
    assert set(counts) == set(ds.CATEGORIES)
    assert min(counts.values()) >= 5
    assert len({p.question_id for p in prompts}) == len(prompts)
    assert all(p.multiturn == (len(p.turns) > 1) for p in prompts)


def test_builtin_code_prompts_come_from_heldout_files():
    files = {ds._rel(f) for f in ds.heldout_files()}
    code = ds.stdlib_code_prompts(6)
    assert len(code) == 6
    for p in code:
        assert p.category == "coding" and p.source == ds.STDLIB_SOURCE
        assert p.src_id.split(":")[0] in files
        assert p.turns[0].rstrip().endswith(('"""', "'''"))  # ends with the docstring: model writes the body
    assert len(ds.load_prompts("builtin", code_prompts=6)) == len(ds.load_prompts("builtin")) + 6


def test_filters():
    prompts = ds.load_prompts("builtin", categories=["math", "rag"], limit_per_category=2)
    assert [p.category for p in prompts] == ["math", "math", "rag", "rag"]
    with pytest.raises(DatasetError, match="categories=\\['nope'\\]"):
        ds.load_prompts("builtin", categories=["nope"])


@pytest.mark.parametrize("row, message", [
    ({k: v for k, v in _row().items() if k != "turns"}, "line 2: missing field 'turns'"),
    (_row(turns="hi"), "line 2: field 'turns' must be a list of str, got str"),
    (_row(turns=[]), "line 2: field 'turns' must hold at least one turn"),
    (_row(turns=["ok", 3]), "line 2: field 'turns' item 1 must be str, got int"),
    (_row(multiturn="no"), "line 2: field 'multiturn' must be bool, got str"),
    (_row(category=5), "line 2: field 'category' must be str, got int"),
    (_row(question_id=True), "line 2: field 'question_id' must be str or int, got bool"),
    ([1, 2], "line 2: expected an object"),
])
def test_bad_jsonl_rows_name_line_and_field(tmp_path, row, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(_row()) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match=message.replace("[", "\\[")):
        ds.load_prompts(f)


def test_empty_and_undecodable_and_invalid_json(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(DatasetError, match="empty file"):
        ds.load_prompts(empty)
    bad = tmp_path / "b.jsonl"
    bad.write_bytes(json.dumps(_row()).encode() + b"\n" + b'{"question_id": "\xff"}\n')
    with pytest.raises(DatasetError, match="line 2: not valid UTF-8 \\(byte 0xff at column 18\\)"):
        ds.load_prompts(bad)
    broken = tmp_path / "j.jsonl"
    broken.write_text(json.dumps(_row()) + "\n{oops\n")
    with pytest.raises(DatasetError, match="line 2: invalid JSON"):
        ds.load_prompts(broken)
    with pytest.raises(DatasetError, match="no such file"):
        ds.load_prompts(tmp_path / "missing.jsonl")


def test_bad_parquet_files_name_row_and_field(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_row(src_id="1"), _row(src_id="2", multiturn=None)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    with pytest.raises(DatasetError, match="x.parquet row 1: field 'multiturn' must be bool, got NoneType"):
        ds.load_prompts(tmp_path / "x.parquet")
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in _row(src_id="1").items() if k != "category"}]),
                   tmp_path / "y.parquet")
    with pytest.raises(DatasetError, match="missing field 'category'"):
        ds.load_prompts(tmp_path / "y.parquet")
    (tmp_path / "z.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DatasetError, match="not a readable parquet file"):
        ds.load_prompts(tmp_path / "z.parquet")
    (tmp_path / "w.parquet").write_bytes(b"")
    with pytest.raises(DatasetError, match="empty file"):
        ds.load_prompts(tmp_path / "w.parquet")


class _TemplateTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def test_render_turn_with_and_without_chat_template():
    p = _prompts()[1]
    assert ds.render_turn(p, 0) == "What is 2+2?"
    assert ds.render_turn(p, 1, ["4"]) == "What is 2+2?\n\n4\n\nAnd 3+3?"
    assert ds.render_turn(p, 1, ["4"], _TemplateTokenizer()) == "<user>What is 2+2?<assistant>4<user>And 3+3?<assistant>"
    with pytest.raises(ValueError, match="needs 1 earlier answers"):
        ds.render_turn(p, 1, [])
    code = ds.stdlib_code_prompts(1)[0]
    assert ds.render_turn(code, 0, tokenizer=_TemplateTokenizer()) == code.turns[0]  # raw completion


def test_chat_template_read_from_model_dir(tmp_path):
    assert ds.load_chat_template(tmp_path) is None
    template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template, "eos_token": "</s>"}))
    tpl = ds.load_chat_template(tmp_path)
    assert ds.render_turn(_prompts()[1], 1, ["4"], tpl) == (
        "<|user|>What is 2+2?</s><|assistant|>4</s><|user|>And 3+3?</s><|assistant|>")
