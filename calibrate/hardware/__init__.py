"""Accelerators as spec-sheet numbers, the device a profile describes, and the number formats a deployment
stores its weights and KV cache in."""
