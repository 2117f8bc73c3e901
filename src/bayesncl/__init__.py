"""Bayesian Gated Non-Negative Contrastive Learning."""

__version__ = "0.1.0"
