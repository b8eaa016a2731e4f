"""The version of llama-runtime: its one source (pyproject.toml reads it, ``tool.setuptools.dynamic``).

A constant, not ``importlib.metadata``: reading the installed metadata imports
~20 modules (email, csv, zipfile) and ~30 ms before an update's first request,
which carries the version in its User-Agent.
"""

from __future__ import annotations

from typing import Final

__version__: Final = "0.1.0"
