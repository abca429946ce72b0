"""Errors raised by the recipe layer (all are ``ValueError`` so callers can catch bad input in one place)."""
from __future__ import annotations


class RecipeError(ValueError):
    """Base class: bad input to the recipe layer, with a message naming the argument and what was expected."""


class CatalogError(RecipeError):
    """A catalog file (GPU, model config, prior, recipe) is missing, malformed or lacks a source."""


class UnknownGPUError(CatalogError):
    """The GPU name is not in ``recipes/gpus``; the message lists the known names."""


class ConfigError(RecipeError):
    """A model ``config.json`` cannot be turned into an architecture descriptor."""


class AcceptanceError(RecipeError):
    """No acceptance source for a drafter, or a malformed acceptance profile."""


class CalibrationError(RecipeError):
    """A cost table is malformed or does not cover the requested batch size."""
