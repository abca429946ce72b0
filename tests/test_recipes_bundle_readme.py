"""The bundle README says for which context the emitted draft-length schedule was planned."""
from types import SimpleNamespace

from trtspec.builder.emit import _context_lines


def _opts(seq):
    return SimpleNamespace(gpu="h100", tp=1, quant="fp8", drafter="eagle3", max_seq_len=seq)


def test_readme_names_the_planned_context_and_the_context_table_command():
    text = "\n".join(_context_lines(_opts(4096), SimpleNamespace(context=4096)))
    assert "planned for 4096 tokens of context per request (`--max-seq-len 4096`)." in text
    assert "--context 1k,8k,32k" in text and "--gpu h100 --tp 1 --quant fp8 --drafter eagle3" in text
    assert "not this bundle's" not in text


def test_readme_flags_a_recipe_planned_for_another_context():
    text = "\n".join(_context_lines(_opts(32768), SimpleNamespace(context=2048)))
    assert "planned for 2048 tokens of context per request." in text
    assert "The recipe's context (2048) is not this bundle's `--max-seq-len` (32768)" in text
    assert _context_lines(_opts(4096), SimpleNamespace()) == []
