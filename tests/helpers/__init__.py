"""Helpers the test files share, so that no test file imports another (conftest.py holds the shared fixtures;
tests/fake_cuda.py the GPU path without a GPU): `claims` (runs.csv rows for the claims table), `datasets` (tiny
datasets in their real formats), `report` (the report's inputs), `models` (a tiny backbone), `slurm` (a one-node
SLURM cluster's runs), `grids` (config/ as Snakemake merges it), `events` (a run's TensorBoard files as
TensorBoard's readers read them). `TINY`: `--set` items for a CPU run of a few
seconds."""

TINY = [
    "data.synthetic.train_size=256",
    "data.synthetic.test_size=120",
    "data.synthetic.image_size=16",
    "model.width=4",
    "model.proj_hidden=32",
    "model.proj_dim=16",
    "train.batch_size=32",
    "train.epochs=2",
    "train.warmup_epochs=0",
    "train.threads=1",
    "eval.batch_size=128",
]
