"""``--tp`` / ``--ep``: one definition of the parallelism options for ``trtspec plan`` and ``trtspec build``."""
from __future__ import annotations

import click

from trtspec.parallel import DEFAULTS, HELP


def parallel_options(fn):
    """Add ``--tp`` and ``--ep`` (defaults and help from :mod:`trtspec.parallel`)."""
    fn = click.option("--ep", type=int, default=DEFAULTS.ep, show_default=True, help=HELP["ep"])(fn)
    return click.option("--tp", type=int, default=DEFAULTS.tp, show_default=True, help=HELP["tp"])(fn)
