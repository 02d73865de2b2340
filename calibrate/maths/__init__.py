"""The numerics calibration shares: non-negative least squares, and a roofline bent at its ridge."""
