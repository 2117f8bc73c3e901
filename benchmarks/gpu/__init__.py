"""The parts of benchmarks/gpu_check.py (its entry point): `common` (constants, sizes, small helpers), `inputs`
(generated test data and the released code's PIL feed), `procs` (subprocess and file helpers), `check` (the
runner: one guarded step after another), the steps by topic (`steps_cli`, `steps_train`, `steps_feed`,
`estimate`) and `summary` (targets and the Markdown report)."""
