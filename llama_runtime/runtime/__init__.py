"""The llama.cpp runtime on this machine: layout, marker, lock, binary, process.

``runtime`` never imports ``updater``.
"""

# One copy of every class: this folder is only ever llama_runtime.runtime (llama_runtime/runtime links here).
# Imported as a top-level package from a checkout it would load a second, unrelated copy of each
# module, and an app catching llama_runtime's errors would miss the copy's.
if __name__ != "llama_runtime.runtime":
    raise ImportError(
        f"'{__name__}' is the source folder of llama_runtime.runtime; import llama_runtime.runtime instead "
        "(from a checkout: pip install -e . and import llama_runtime)."
    )
