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
OUTSIDE = (
    "llama_runtime",
    "llama_runtime.__main__",
    "llama_runtime.errors",
    "llama_runtime.types",
    "llama_runtime.updater",
)


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

#: What any module of the CLI may import besides its own modules: ``llama_runtime``, the public
#: API, exactly as an app sees it. Everything a verb does goes through ``RuntimeUpdater`` and the
#: names ``llama_runtime`` exports (``Settings``, ``Vocabulary``, the results, the error tree).
CLI_MAY_IMPORT = frozenset({"llama_runtime"})


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


def test_the_cli_imports_only_the_public_api_and_its_own_modules() -> None:
    assert cli_imports_beyond_the_front_door() == {}
