"""The ``trtspec`` command line.

Each command lives in its own module under ``trtspec.cli`` and is imported only when it runs
(or when ``--help`` lists it), so ``trtspec --help`` stays fast and a broken optional
dependency of one command cannot break the others.
"""
from __future__ import annotations

import importlib
import importlib.util

import click

from trtspec import __version__

# command name -> "module:attribute" of its click command, in the order ``--help`` shows them.
COMMANDS: dict[str, str] = {
    "plan": "trtspec.cli.plan:plan",
    "calibrate": "trtspec.cli.calibrate:calibrate",
    "recipes": "trtspec.cli.recipes:recipes",
    "build": "trtspec.cli.build:build",
    "generate": "trtspec.cli.generate:generate",
    "bench": "trtspec.cli.bench:bench",
    "profile": "trtspec.cli.profile:profile",
    "triton": "trtspec.cli.triton:triton",
    "serve": "trtspec.cli.serve:serve",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, target in COMMANDS.items() if importlib.util.find_spec(target.split(":")[0])]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None or importlib.util.find_spec(target.split(":")[0]) is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="trtspec")
def main() -> None:
    """Speculative decoding, co-designed: pick the draft length per GPU x batch x attention
    variant, build TensorRT-LLM / TensorRT / Triton bundles, and measure them."""


if __name__ == "__main__":
    main()
