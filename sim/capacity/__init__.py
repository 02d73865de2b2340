"""Capacity planning: the highest rate that meets a latency target, and replicas for a rate."""
