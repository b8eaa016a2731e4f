"""What a person's update leaves standing beyond the active runtime: the pin, the backend request, the channel.

An update that installed nothing can still change what later updates do: ``update
--tag T`` pins ``T`` (``runtime.pin``), and an explicit ``--backend X`` or ``--channel C``
at the active build records ``X`` or ``C`` in its marker, so the next plain update follows
them rather than what the build was first installed with. Both happen only after the
update succeeded, under its lock; a failed update changes neither.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.pin import Pin, save_pin
from llama_runtime.runtime.trust import rewrite_accepted_marker

if TYPE_CHECKING:
    from pathlib import Path

    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.choice.decide import UpdateRequest

__all__ = ["keep_standing"]


def keep_standing(home_root: Path, request: UpdateRequest, outcome: UpdateOutcome) -> UpdateOutcome:
    """Record ``request``'s explicit backend and pin on the home ``outcome`` left (the caller holds the lock).

    Raises:
        OSError: The marker or the pin could not be written (each is replaced atomically).
    """
    outcome = _record_channel(home_root, request, _record_backend(home_root, request, outcome))
    if not (request.pin and request.tag):
        return outcome
    save_pin(home_root, Pin(request.repo, request.tag))
    return replace(outcome, pinned=request.tag)


def _record_backend(home_root: Path, request: UpdateRequest, outcome: UpdateOutcome) -> UpdateOutcome:
    """The active runtime with ``request``'s explicit backend as its stored request (an install wrote it already)."""
    active, wanted = outcome.active, request.backend
    if wanted is None or active.marker.backend_request == wanted:
        return outcome
    if wanted != "auto" and active.marker.backend != wanted:
        return outcome  # kept another backend's build (one that failed here before): nothing to record
    marker = replace(active.marker, backend_request=wanted)
    rewrite_accepted_marker(home_root, active.name, active.path, marker)
    return replace(outcome, active=InstalledRuntime(active.name, active.path, marker))


def _record_channel(home_root: Path, request: UpdateRequest, outcome: UpdateOutcome) -> UpdateOutcome:
    """The active runtime with ``request``'s explicit channel as its stored one, also when nothing was installed.

    A channel asked for is remembered whatever the update did: its newest build may be the active one
    already, or older than it (never a downgrade), and the next plain update follows that channel.
    """
    active, wanted = outcome.active, request.channel
    if wanted is None or active.marker.channel == wanted or active.marker.repo != request.repo:
        return outcome
    marker = replace(active.marker, channel=wanted)
    rewrite_accepted_marker(home_root, active.name, active.path, marker)
    return replace(outcome, active=InstalledRuntime(active.name, active.path, marker))
