"""Verify: the staged tree's marker, the binary's own run, the inference gate, and build provenance."""
