"""The Triton model copied into repositories (``model.py``); packaged so installs carry it."""
