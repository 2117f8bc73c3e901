"""The measures of docs/METHOD.md sections 4-7 on arrays and models (NumPy where they can): interpretability and
retrieval, the fast linear probe, gradient dynamics, cost, whether a run was still learning. Pretraining records
some of them; the evaluation sections apply them."""
