"""Specs as files a user writes: model YAMLs (shipped ones in `models/`) and system mappings.

`errors.SpecError` is a mistake in such a file, naming the file, the key and what is valid.
`loader` turns YAML and mappings into the control plane's `ModelSpec` and `SystemSpec`.
This package imports nothing itself, so the control plane can raise `SpecError` without pulling
in the loader's YAML parser.
"""
