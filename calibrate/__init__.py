"""Cost models: profiling the engine, fitting, the roofline, profiles, their transfer to unseen GPUs; in
subfolders by job (docs/development.md), the command lines at the top.

clock/roofline_terms.py may run compiled by mypyc with the control plane's: engine.core.compiled, imported here
first, decides whether it does (docs/compiled.md).
"""
import engine.core.compiled  # noqa: F401
