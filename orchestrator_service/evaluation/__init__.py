"""Evaluation sets, runs and their metrics (docs/api.md#evaluation)."""
