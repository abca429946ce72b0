"""Drafters: ``draft_model`` (chain or top-k tree), ``ngram`` (prompt lookup), ``eagle3`` (EAGLE-3 head),
``dflash`` / ``dspark`` (block heads: one forward per block)."""
from trtspec.runtime.drafters.base import Drafter, DraftMode, Proposal, tree_size
from trtspec.runtime.params import DRAFTERS

__all__ = ["DRAFTERS", "Drafter", "DraftMode", "Proposal", "tree_size"]
