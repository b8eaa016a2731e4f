"""How people and scripts drive the updater: the ``llama-runtime`` command."""
