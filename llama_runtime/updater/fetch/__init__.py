"""Fetch: bytes of an asset onto this disk, resumable, in parallel ranges, checked against the published digest."""
