"""Where runs go: this process, a local process pool, or a Dask cluster."""
