"""Payloads and their runs: the model, the state table, starts, results, update-state."""
