"""Where the data files live.

Two kinds of data:

* ``trtspec/recipes/models/*.yaml`` -- built-in model configs (dims and counts only), inside this package.
* the top-level ``recipes/`` folder of the repository (``gpus/``, ``priors/``, ``book/``), shipped as the package
  ``trtspec.recipebook`` when installed (see the packaging note in ``book_dir``).
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path


def models_dir() -> Path:
    """Folder of the built-in model configs (``trtspec/recipes/models``)."""
    return Path(__file__).resolve().parent / "models"


def book_dir() -> Path:
    """Folder holding ``gpus/``, ``priors/`` and ``book/``.

    Tries the installed package ``trtspec.recipebook`` first (setup.py maps it to the top-level ``recipes/``
    folder), then falls back to ``<repo>/recipes`` next to the ``trtspec`` package (editable installs, source
    checkouts). Raises ``CatalogError`` when neither exists.
    """
    from trtspec.recipes.errors import CatalogError

    try:
        root = importlib.resources.files("trtspec.recipebook")
        path = Path(str(root))
        if (path / "gpus").is_dir():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    repo = Path(__file__).resolve().parents[2] / "recipes"
    if (repo / "gpus").is_dir():
        return repo
    raise CatalogError(
        "cannot find the recipe book: neither the package 'trtspec.recipebook' nor "
        f"{repo} holds a 'gpus/' folder; reinstall trtspec"
    )
