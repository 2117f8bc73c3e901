"""Bayesian Gated Non-Negative Contrastive Learning. The package's folders are its layers (docs/DESIGN.md); the
names a plugin uses are bayesncl.api's, whose old module paths stay importable (bayesncl.api.OLD_PATHS)."""

from .api import install_old_paths

__version__ = "0.1.0"

install_old_paths()
