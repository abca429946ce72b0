"""The plugins' interface YAMLs (``trtSpec*/trtSpec*.yaml``), installed as the package ``trtspec.pluginspecs``."""
