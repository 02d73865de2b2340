"""Cost models: the device and host clocks fitted on public tables, held out, and carried to other GPUs."""
