"""What the simulator's clock reads: the CostModel contract, where an iteration's seconds go, and the spec-sheet
roofline."""
