"""A run's folder and the files in it: their names and the log reader, the checkpoint, whose run an output folder holds,
and weights in and out (the released code's checkpoints; a backbone for torchvision, timm or safetensors)."""
