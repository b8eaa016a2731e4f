"""Offline: install-file, export bundles and mirrors (writing a GitHub-shaped directory)."""
