"""Retrieval evaluation: datasets, metrics and the runner behind `zhiku eval`."""
