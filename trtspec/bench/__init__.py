"""Measurement: prompts in the SPEED-Bench schema, acceptance metrics, runners for the local
runtime / an OpenAI-compatible server / Triton, the device cost profile and the
predicted-versus-swept comparison of draft lengths.

Submodules are imported on use; importing :mod:`trtspec.bench` does no work.
"""
