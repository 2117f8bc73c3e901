"""Weights in and out: `released` reads a checkpoint of the authors' released code (a solo-learn Lightning .ckpt)
into a model.pt of this package (`bayesncl import`); `export` writes a run's backbone in torchvision's, timm's or
safetensors' layout (`bayesncl export`)."""

FORMATS = ("torchvision", "timm", "safetensors")  # `bayesncl export --format` (here: the parser imports no torch)
