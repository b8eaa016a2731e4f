"""``python -m llama_runtime``: the ``llama-runtime`` command."""

from __future__ import annotations

from llama_runtime.updater.cli.main import main

raise SystemExit(main())
