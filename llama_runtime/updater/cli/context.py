"""What a command builds from its arguments: settings, the home, the engine, the active runtime.

Every command goes through these, so flag > environment > default is resolved
in one place and the engine is built by the one composition root.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
    from llama_runtime.updater.api.service import RuntimeUpdater
    from llama_runtime.updater.choice.decide import ActiveState
    from llama_runtime.updater.config import Settings
    from llama_runtime.updater.engine import Engine

_REPAIR_HINT = (
    "Run `llama-runtime doctor --repair` to point at a verified runtime, "
    "or `llama-runtime update` to install one again."
)


def settings_from_args(args: argparse.Namespace, *, follow_active_repo: bool = True) -> Settings:
    """The settings the global flags name, over the environment and the defaults."""
    from llama_runtime.updater.config import resolve_settings

    return resolve_settings(
        home=args.home,
        api_url=args.api_url,
        repo=args.repo,
        backend=args.backend,
        require_provenance=bool(getattr(args, "require_provenance", False)),
        channel=args.channel,
        follow_active_repo=follow_active_repo,
    )


def home_for(settings: Settings) -> Home:
    """The llama-runtime home the settings name."""
    from llama_runtime.runtime.layout import Home

    return Home(settings.home)


def engine_for(settings: Settings) -> Engine:
    """The engine every command builds its collaborators from (the one composition root)."""
    from llama_runtime.updater.engine import Engine

    return Engine(settings)


def updater_for(settings: Settings) -> RuntimeUpdater:
    """The front door over the engine ``settings`` configure: every verb that changes a home goes through it."""
    from llama_runtime.updater.api.service import RuntimeUpdater

    return RuntimeUpdater._from_engine(engine_for(settings))


def read_active(home: Home) -> tuple[Pointer, InstalledRuntime | None]:
    """The pointer and the intact active runtime; damage is an exit-6 error naming the repair."""
    from llama_runtime.runtime.errors import CorruptStateError, ForeignMarkerError
    from llama_runtime.updater.verify.installed import damage

    try:
        pointer = home.read_pointer()
        active = home.load(pointer.active) if pointer.active else None
    except ForeignMarkerError:
        raise
    except CorruptStateError as exc:
        raise CorruptStateError(exc.message, hint=_REPAIR_HINT) from None
    problems = damage(active) if active else []
    if active and problems:
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise CorruptStateError(
            f"The active runtime {active.marker.tag} ({active.marker.backend}) in {active.path} is damaged: {shown}.",
            hint=_REPAIR_HINT,
        )
    return pointer, active


def has_active(home: Home) -> bool:
    """Whether the pointer names a runtime (a damaged pointer counts: something was there)."""
    from llama_runtime.runtime.errors import CorruptStateError

    try:
        return home.read_pointer().active is not None
    except CorruptStateError:
        return True


def active_state(home: Home) -> ActiveState | None:
    """The active runtime as the decision sees it; ``None`` when nothing usable is active."""
    from llama_runtime.runtime.errors import CorruptStateError
    from llama_runtime.updater.verify.installed import active_state as state_of

    try:
        pointer = home.read_pointer()
        active = home.load(pointer.active) if pointer.active else None
    except CorruptStateError:
        return None
    return state_of(active) if active else None


def describe_active_now(args: argparse.Namespace | None) -> str:
    """Which runtime the pointer names right now, as words; never raises."""
    try:
        if args is None:
            raise LookupError("no home yet")
        home = home_for(settings_from_args(args))
    except Exception as exc:  # bad settings: the interruption is still the news
        reason = getattr(exc, "message", None) or type(exc).__name__
        return f"the active runtime could not be read ({reason}); `llama-runtime status` shows it"
    return home.describe_active()
