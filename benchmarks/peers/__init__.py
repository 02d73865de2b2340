"""Peers: servesim against Vidur on one trace, and what it takes to run Vidur offline on the same requests."""
