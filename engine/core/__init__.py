"""The control plane: pure Python, no torch. Both the real engine and the simulator run it."""
