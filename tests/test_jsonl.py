"""The one JSON Lines reader every command's .jsonl input goes through, and the errors users see."""
import pytest
from click.testing import CliRunner

from trtspec.jsonl import JsonlError, read_jsonl


def test_values_and_line_numbers_skip_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('"x"\n\n  \n{"prompt": "y"}\n[1, 2]\n', encoding="utf-8")
    assert list(read_jsonl(path)) == [(1, "x"), (4, {"prompt": "y"}), (5, [1, 2])]
    assert list(read_jsonl(path.read_bytes())) == list(read_jsonl(path))


@pytest.mark.parametrize("data, message", [
    (b'"ok"\n{"a": \n', r"line 2: invalid JSON \(Expecting value at column 7\)"),
    (b'"ok"\n"caf\xff"\n', r"line 2: not valid UTF-8 \(byte 0xff at column 5\)"),
])
def test_bad_lines_are_named(data, message):
    with pytest.raises(JsonlError, match=message):
        list(read_jsonl(data))


def test_every_reader_names_its_argument_and_the_line(tmp_path):
    from trtspec.builder.calib import CalibrationError, load_texts
    from trtspec.cli import main as cli
    from trtspec.train.config import TrainInputError
    from trtspec.train.data import read_records

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(TrainInputError, match=r"--data .*bad.jsonl: line 2: invalid JSON"):
        read_records(bad)
    with pytest.raises(CalibrationError, match=r"--calib .*bad.jsonl: line 2: invalid JSON"):
        load_texts(bad)
    r = CliRunner().invoke(cli, ["generate", "--batch-file", str(bad)])
    assert r.exit_code == 2 and "--batch-file" in r.output and "line 2: invalid JSON" in r.output, r.output
