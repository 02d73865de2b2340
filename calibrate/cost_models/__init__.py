"""The cost models a profile or a transfer makes, and the registry that builds any cost model from its config."""
