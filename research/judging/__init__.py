"""Held-out judgements no command runs: every measured GPU held out in turn (the shipped carry file's choice), the
tile-aware GEMM forms held out by model and by GPU, and the FP8 GEMM fit, on the published timings
(gemm_table.py), that wrote the shipped fit file."""
