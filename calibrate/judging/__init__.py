"""The transfer judged on GPUs and models its fit never saw, and the import of per-operation tables into a profile
that records the judgement."""
