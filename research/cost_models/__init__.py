"""Cost models: the device and host clocks fitted on public tables, held out, and carried to other GPUs; each script
runs by path from the repository root and prints, or writes, a figure benchmarks/measurements/ keeps."""
