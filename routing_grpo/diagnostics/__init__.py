"""Diagnostics of routing: the oracle, the probe, the early tell and the routing metrics."""
