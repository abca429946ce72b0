"""``--speculation static|adaptive``: one field of the build options, shared by every place that emits it."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from trtspec.builder.options import SPECULATION_MODES, BuildOptions
from trtspec.cli import main


def test_build_option_defaults_to_static_and_accepts_adaptive():
    assert SPECULATION_MODES == ("static", "adaptive")
    assert BuildOptions().speculation == "static"
    assert BuildOptions(speculation="adaptive").speculation == "adaptive"
    with pytest.raises(ValidationError, match="speculation"):
        BuildOptions(speculation="dynamic")


def test_build_cli_documents_and_checks_speculation():
    res = CliRunner().invoke(main, ["build", "--help"])
    assert res.exit_code == 0 and "--speculation [static|adaptive]" in res.output
    assert "[default: static]" in " ".join(res.output.split())
    res = CliRunner().invoke(main, ["build", "--speculation", "dynamic", "--dry-run"])
    assert res.exit_code == 2 and "'dynamic' is not one of 'static', 'adaptive'" in res.output
