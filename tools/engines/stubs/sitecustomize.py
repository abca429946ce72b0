"""Applies ``engine_stubs.from_env()`` at interpreter start in every process of an engine check."""
import engine_stubs

engine_stubs.from_env()
