"""The layers: each module imports only from its own layer or the layers below it.

cli > api > engine > offline > activate > verify > stage > fetch > choice | sources > config > release > base > net
> runtime

(``a > b``: ``a`` may import ``b``.) ``choice`` (decisions) and ``sources`` (IO) share a layer and
import neither each other; ``base`` is what every layer of ``updater`` uses (logs, credentials,
the crash-test checkpoints, the progress event); ``net`` is the one network layer every request
goes through (origins, credentials bound to them, redirects, caps, retries, TLS); ``runtime``
never imports ``updater``. Lazy imports inside functions count (they couple modules as much as
top-level ones); only ``if
TYPE_CHECKING:`` imports are left out, since they never run.
"""

from __future__ import annotations

import pytest

from tests.test_imports import import_graph, our_modules

LAYERS: tuple[tuple[str, ...], ...] = (
    ("llama_runtime.runtime",),
    ("llama_runtime.updater.net",),
    (
        "llama_runtime.updater.logs",
        "llama_runtime.updater.credentials",
        "llama_runtime.updater.checkpoints",
        "llama_runtime.updater.progress",
    ),
    ("llama_runtime.updater.release",),
    ("llama_runtime.updater.config",),
    ("llama_runtime.updater.choice", "llama_runtime.updater.sources"),
    ("llama_runtime.updater.fetch",),
    ("llama_runtime.updater.stage",),
    ("llama_runtime.updater.verify",),
    ("llama_runtime.updater.activate",),
    ("llama_runtime.updater.offline",),
    ("llama_runtime.updater.engine",),
    ("llama_runtime.updater.api",),
    ("llama_runtime.updater.cli",),
)
#: Package __init__ modules and the public facade sit outside the layering.
OUTSIDE = ("llama_runtime", "llama_runtime.__main__", "llama_runtime.updater")


def part_of(module: str) -> tuple[int, str] | None:
    """(layer index, the layer's package or module) of ``module``; ``None`` outside the layering."""
    if module in OUTSIDE:
        return None
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or module.startswith(prefix + "."):
                return index, prefix
    return None


def violations() -> list[str]:
    found = []
    for name, targets in sorted(import_graph().items()):
        mine = part_of(name)
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = part_of(target)
            if theirs is None:
                continue
            upward = theirs[0] > mine[0]
            sideways = theirs[0] == mine[0] and theirs[1] != mine[1]
            if upward or sideways:
                found.append(f"{name} imports {target} ({'a higher layer' if upward else 'a sibling layer'})")
    return found


def test_every_module_belongs_to_a_layer() -> None:
    assert sorted(m for m in our_modules() if m not in OUTSIDE and part_of(m) is None) == []


def test_modules_import_only_their_own_layer_or_lower_ones() -> None:
    assert violations() == []


@pytest.mark.parametrize("package", ["choice", "sources"])
def test_decisions_and_io_do_not_import_each_other(package: str) -> None:
    other = "sources" if package == "choice" else "choice"
    crossing = [v for v in violations() if f"updater.{package}." in v.split(" imports ")[0] and f"updater.{other}" in v]
    assert crossing == []


# -- the CLI is a client of the front door ------------------------------------------------------

#: What any module of the CLI may import besides its own modules, and why:
#:   * ``llama_runtime``: the public API, as an app sees it;
#:   * ``llama_runtime.updater.api.service``: the front door itself (``RuntimeUpdater``);
#:   * ``llama_runtime.runtime.errors``: the exception tree, every class of which the public API
#:     re-exports (``test_every_llama_runtime_error_class_is_exported_from_the_package``);
#:   * ``llama_runtime.updater.config``: flags become the front door's settings there (the CLI is
#:     the one caller whose settings are flags; an app passes the same as constructor arguments);
#:   * ``llama_runtime._version``: the version ``--version`` prints.
CLI_MAY_IMPORT = frozenset(
    {
        "llama_runtime",
        "llama_runtime._version",
        "llama_runtime.updater.api.service",
        "llama_runtime.runtime.errors",
        "llama_runtime.updater.config",
    }
)
#: What CLI modules still import beyond that: the verb with no front-door method yet (``server``),
#: vocabulary for flags and completion, and formatting.
#: Only ever shrinks: an entry no longer needed fails the test as surely as a new import does.
CLI_NOT_YET_BEHIND_THE_FRONT_DOOR: dict[str, frozenset[str]] = {
    # flags: the duration and tag checks, provenance words; home_for/engine_for for the verbs below
    "common": frozenset(
        {
            "llama_runtime.runtime.layout",
            "llama_runtime.runtime.marker",
            "llama_runtime.updater.api.check",
            "llama_runtime.updater.api.manage",
            "llama_runtime.updater.engine",
        }
    ),
    "gateopts": frozenset({"llama_runtime.updater.verify.gate"}),  # the gate's flags
    "jobs": frozenset({"llama_runtime.updater.api.check"}),  # --jitter's duration
    "lifecycle": frozenset({"llama_runtime.updater.fetch.cache"}),  # human_size
    # flag vocabularies for the parser and completion, the logging set-up, installed tags for completion,
    # and the test watchdog's stack dump armed first thing (checkpoints, the kill points' module)
    "main": frozenset(
        {
            "llama_runtime.runtime.layout",
            "llama_runtime.runtime.marker",
            "llama_runtime.updater.checkpoints",
            "llama_runtime.updater.choice.host",
            "llama_runtime.updater.logs",
            "llama_runtime.updater.release.channel",
        }
    ),
    # human_size; whether --dest names a registry (oci://…)
    "offline": frozenset({"llama_runtime.updater.fetch.cache", "llama_runtime.updater.net.origin"}),
    "registry": frozenset({"llama_runtime.updater.fetch.cache"}),  # human_size
    "progressbar": frozenset(
        {"llama_runtime.runtime.clock", "llama_runtime.updater.fetch.cache", "llama_runtime.updater.progress"}
    ),
    # the managed server, and update's override warning
    "status": frozenset(
        {
            "llama_runtime.runtime.binary",
            "llama_runtime.runtime.fsutil",
            "llama_runtime.runtime.lock",
            "llama_runtime.runtime.server",
            "llama_runtime.runtime.trial",  # the server verbs finish an abandoned switch first
            "llama_runtime.updater.api.inventory",
        }
    ),
    "update": frozenset({"llama_runtime.updater.choice.host"}),  # --cuda-version's check
}


def cli_imports_beyond_the_front_door() -> dict[str, frozenset[str]]:
    """Each CLI module's imports (lazy ones included) that are neither its own package nor allowed."""
    cli = "llama_runtime.updater.cli"
    modules = set(our_modules())
    found: dict[str, frozenset[str]] = {}
    for name, targets in sorted(import_graph().items()):
        if not name.startswith(cli + "."):
            continue
        beyond = {
            target
            for target in targets
            if target in modules and target != cli and not target.startswith(cli + ".") and target not in CLI_MAY_IMPORT
        }
        if beyond:
            found[name.removeprefix(cli + ".")] = frozenset(beyond)
    return found


def test_the_cli_imports_only_the_public_api_the_front_door_and_its_own_modules() -> None:
    assert cli_imports_beyond_the_front_door() == CLI_NOT_YET_BEHIND_THE_FRONT_DOOR
