"""Timing the real engine: the batch shapes a profile measures, the block-size sweep, the rows it writes, the speed
probe and a batch's cost inside serving."""
