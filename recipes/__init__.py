"""Recipe book data (GPU figures, acceptance priors, stored recipes), installed as the package ``trtspec.recipebook``."""
