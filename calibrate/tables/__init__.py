"""Public measurement tables (Vidur's profiling formats) read into rows: per-operation, attention and host timings,
and the layer counts of the models they time."""
