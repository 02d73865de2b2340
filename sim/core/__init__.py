"""The simulation core: a SimPy replica, the router, fast-forward, fleets of independent replicas, simulate()."""
