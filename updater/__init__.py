"""Getting a llama.cpp release onto this machine, as the pipeline data takes.

* ``sources`` — where a release comes from (GitHub API, a static mirror);
* ``choice`` — which release and asset fit this host (versions, asset names, host facts);
* ``install`` — download, extraction, verification and the install transaction;
* ``api`` — how apps drive it (``RuntimeUpdater``, jobs, the scheduled check, doctor);
* ``cli`` — the ``llama-runtime`` command.

Internal: the public API is :mod:`llama_runtime`. ``updater`` imports ``runtime``, never the reverse.
"""
