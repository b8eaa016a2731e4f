"""``python -m llama_runtime``: the ``llama-runtime`` command."""

from __future__ import annotations

from llama_runtime.updater.cli.entry import run

raise SystemExit(run())
