"""Fits to profiled and measured timings, each with its held-out error, and the profile file they make."""
