"""Pretraining: the device and its settings, the fp16 loss scaler, the optimiser and schedule, one training step, the
resumable loop, and `embed` (a split through the model in evaluation mode: the loop's last record and every
evaluation section read features through it)."""
