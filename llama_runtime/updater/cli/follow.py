"""Following another process's job on ``--events``: its states as JSON lines, its end as the last one.

``job wait --events`` and an ``update --events`` that finds another update running
(two windows pressing "Update" see one progress) both follow the job here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llama_runtime.updater.cli.events import BUSY_EXIT, gave_up_error

if TYPE_CHECKING:
    from llama_runtime import LlamaRuntimeError, RuntimeUpdater, UpdateJob
    from llama_runtime.updater.cli.output import Output

__all__ = ["attach_events", "follow_events"]


def follow_events(job: UpdateJob, out: Output, timeout: float | None, *, attached: bool = False) -> int:
    """Stream another process's job as ``--events`` lines until it ends; its end is the last line.

    The last line has the ``--json`` keys of the command that follows: ``job wait``'s
    ``{"job": …}``, or for an attached ``update`` the update's own keys plus ``attached``.
    A job still running when ``timeout`` passes ends with an ``error`` line
    (``busy``, exit 3) beside ``job``, whose ``running`` is true: the follower
    stopped, the job did not.
    """
    assert out.events is not None
    events = out.events
    state = job.state()
    for state in job.events(timeout):
        events(state)
    result = state.result.to_json() if state.result else {}
    payload: dict[str, Any] = {**result, "attached": True, "job": state.id} if attached else {"job": state.to_json()}
    if state.phase in ("failed", "cancelled") and state.error:
        events.error_payload(state.error.to_json(), payload)
        code = state.error.exit_code
        return code if code is not None else (130 if state.phase == "cancelled" else 1)
    if state.running and not attached:
        events.error_payload(gave_up_error(state.id, timeout), payload)
        return BUSY_EXIT
    out.result(payload, [])
    return 0


def attach_events(updater: RuntimeUpdater, out: Output, busy: LlamaRuntimeError) -> int:
    """``update --events`` while another update job runs: follow that job instead of failing busy.

    Two windows pressing "Update" then show one progress; the lines carry ``attached: true``.
    Without a job record to follow (an update without one holds the lock), the busy error stands.
    """
    job = updater.current_job()
    current = job.state() if job is not None else None
    if job is None or current is None or not current.running:
        raise busy
    assert out.events is not None
    out.events.write({"type": "phase", "phase": "attached", "message": current.describe(), "job": current.id})
    return follow_events(job, out, None, attached=True)
