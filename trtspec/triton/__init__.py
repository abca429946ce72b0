"""Triton Inference Server integration: model repositories for bundles and a local server.

- :mod:`trtspec.triton.repository`: ``write_repository(bundle_dir, out_dir)``.
- :mod:`trtspec.triton.server`: find and run ``tritonserver`` on loopback.
- :mod:`trtspec.triton.install`: unpack a standalone server from the nvidia-pytriton wheel.

Nothing is imported at package import time.
"""
