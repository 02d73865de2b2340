"""The paper: which part of the clock or the workload moves its headline figures, and its microbenchmarks."""
