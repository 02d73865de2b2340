"""The experiment: config, one run, a sweep, fingerprints, outputs, metrics, plots, the printed table."""
