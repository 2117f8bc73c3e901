"""The network and its training losses: backbones, the losses of docs/METHOD.md, the method classes."""
