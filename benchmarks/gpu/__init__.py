"""GPU sessions: the kernels and profiles measured on a GPU, and the targets read from what a session measured."""
