"""Cluster mode's building blocks on PostgreSQL: per-thread jobs, the doorbell, replica leases, ticks.

Nothing here imports the engine or the Slack edge; the app wires these parts in.
"""
