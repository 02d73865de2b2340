"""The simulation core: a SimPy replica, the router, fast-forward, fleets of independent replicas, simulate().

Its modules may run compiled by mypyc with the control plane's: engine.core.compiled, imported here first,
decides whether they do (docs/compiled.md).
"""
import engine.core.compiled  # noqa: F401
