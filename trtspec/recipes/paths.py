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


def read_named_mapping(path: Path, what: str) -> dict:
    """The YAML mapping in ``path`` that has a ``name`` (a GPU or an engine file); ``CatalogError``
    naming ``what`` (e.g. ``"GPU file"``) and the path when it cannot be read or is not one."""
    import yaml

    from trtspec.recipes.errors import CatalogError

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(doc, dict) or not doc.get("name"):
        raise CatalogError(f"{path}: expected a mapping with a 'name'")
    return doc
