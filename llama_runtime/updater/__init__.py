"""Getting a llama.cpp release onto this machine, as the pipeline data takes.

* ``sources`` — where a release comes from (GitHub API, a static mirror);
* ``choice`` — which release and asset fit this host (versions, asset names, host facts);
* ``install`` — download, extraction, verification and the install transaction;
* ``api`` — how apps drive it (``RuntimeUpdater``, jobs, the scheduled check, doctor);
* ``cli`` — the ``llama-runtime`` command.

Internal: the public API is :mod:`llama_runtime`. ``updater`` imports ``runtime``, never the reverse.
"""

# One copy of every class: this folder is only ever llama_runtime.updater (llama_runtime/updater links here).
# Imported as a top-level package from a checkout it would load a second, unrelated copy of each
# module, and an app catching llama_runtime's errors would miss the copy's.
if __name__ != "llama_runtime.updater":
    raise ImportError(
        f"'{__name__}' is the source folder of llama_runtime.updater; import llama_runtime.updater instead "
        "(from a checkout: pip install -e . and import llama_runtime)."
    )
