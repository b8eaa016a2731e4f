"""What the inference gate measured, kept in the home's state: ``<home>/gate-measures.json``.

One record per runtime, model and speed-shaping arguments (the address aside,
:func:`~.gate.args_fingerprint`): the greedy answer to the gate's fixed prompt,
the median speed and every sample's, and the medians of its last few
measurements (:attr:`Measure.history`). Runtime directories are never written
after activation, so the figures live here, beside the pointer; a runtime's
record is replaced whenever it is measured again (the old server just before
it stops, the new one right after its check), so one lucky figure never
decides every later update.

The file is data, not trust: a damaged file reads as empty, records are
bounded in number and size, writing is atomic.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.fsutil import read_record, write_record
from llama_runtime.runtime.inference import Speed

__all__ = ["MEASURES_FILE", "Measure", "load_measure", "measures_of", "store_measure"]

MEASURES_FILE: Final = "gate-measures.json"
MEASURES_SCHEMA: Final = 1
#: Newest records kept: a few runtimes times a few models and argument sets; older ones are never compared.
MAX_RECORDS: Final = 64
#: The gate asks for a few dozen tokens; a longer answer on record is cut (it is for people, and compared).
MAX_ANSWER_CHARS: Final = 2000
#: Samples kept per record (the gate takes a handful).
MAX_SAMPLES: Final = 16
#: Medians of measurements kept per record: the gate compares with the last three
#: (:data:`~.gate.RECENT_MEASUREMENTS`); more would describe a machine that has since changed.
MAX_HISTORY: Final = 5
_MAX_FILE_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class Measure:
    """One runtime's figures on one model with one argument set.

    Attributes:
        runtime: The runtime directory's name.
        model: The model key (:func:`~.gate.model_key`).
        args: The arguments' fingerprint.
        answer: The greedy answer to the fixed prompt (None when not recorded).
        speed: The median speed of the samples (None when the server reported no timings).
        samples: Every sample's speed, in order.
        measured_at: When (ISO 8601).
        history: The medians of this and earlier measurements of the same runtime, model
            and arguments, oldest first (at most :data:`MAX_HISTORY`; this one's last).
    """

    runtime: str
    model: str
    args: str
    answer: str | None
    speed: Speed | None
    samples: tuple[Speed, ...]
    measured_at: str
    history: tuple[Speed, ...] = ()

    @property
    def key(self) -> str:
        return record_key(self.runtime, self.model, self.args)

    def to_json(self) -> dict[str, Any]:
        """The stored (and printed) record."""
        return {
            "runtime": self.runtime,
            "model": self.model,
            "args": self.args,
            "answer": self.answer,
            "speed": self.speed.to_json() if self.speed else None,
            "samples": [s.to_json() for s in self.samples],
            "measured_at": self.measured_at,
            "history": [s.to_json() for s in self.history],
        }

    @classmethod
    def from_json(cls, payload: object) -> Measure | None:
        """The record in ``payload``, or None when it is not one."""
        if not isinstance(payload, Mapping):
            return None
        names = [payload.get(k) for k in ("runtime", "model", "args", "measured_at")]
        if not all(isinstance(n, str) for n in names):
            return None
        answer = payload.get("answer")
        raw_samples = payload.get("samples")
        samples = [Speed.from_json(s) for s in raw_samples] if isinstance(raw_samples, list) else []
        return cls(
            runtime=str(names[0]),
            model=str(names[1]),
            args=str(names[2]),
            answer=answer[:MAX_ANSWER_CHARS] if isinstance(answer, str) else None,
            speed=Speed.from_json(payload.get("speed")),
            samples=tuple(s for s in samples if s is not None)[:MAX_SAMPLES],
            measured_at=str(names[3]),
            history=_speeds(payload.get("history")),
        )


def _speeds(payload: object) -> tuple[Speed, ...]:
    """The last :data:`MAX_HISTORY` figures of a stored list (a damaged entry is skipped)."""
    found = [Speed.from_json(s) for s in payload] if isinstance(payload, list) else []
    return tuple(s for s in found if s is not None)[-MAX_HISTORY:]


def record_key(runtime: str, model: str, args: str) -> str:
    """The record's key in the file."""
    return f"{runtime}|{model}|{args}"


def measures_path(home_root: Path) -> Path:
    """Where a home keeps the gate's measurements."""
    return home_root / MEASURES_FILE


def _load(home_root: Path) -> dict[str, Measure]:
    try:
        payload = read_record(measures_path(home_root), max_bytes=_MAX_FILE_BYTES)
    except (OSError, ValueError):
        return {}
    if not isinstance(payload, dict) or payload.get("schema") != MEASURES_SCHEMA:
        return {}
    records = payload.get("records")
    found = [Measure.from_json(r) for r in records] if isinstance(records, list) else []
    return {m.key: m for m in found if m is not None}


def load_measure(home_root: Path, runtime: str, model: str, args: str) -> Measure | None:
    """The record of ``runtime`` on ``model`` with ``args``, if there is one."""
    return _load(home_root).get(record_key(runtime, model, args))


def measures_of(home_root: Path, runtime: str) -> list[Measure]:
    """Every record of ``runtime`` (for ``status``)."""
    return [m for m in _load(home_root).values() if m.runtime == runtime]


def store_measure(home_root: Path, measure: Measure) -> None:
    """Keep ``measure``, replacing that runtime's record for the same model and arguments.

    Its median joins the replaced record's :attr:`Measure.history` (a measure
    without a median keeps the history as it was). A home that cannot take the
    write only loses the figure: the switch it belongs to has its verdict
    already (logged by the caller).
    """
    records = _load(home_root)
    earlier = records.pop(measure.key, None)
    history = earlier.history if earlier else ()
    if measure.speed is not None:
        history = (*history, measure.speed)[-MAX_HISTORY:]
    records[measure.key] = dataclasses.replace(measure, history=history)
    kept = list(records.values())[-MAX_RECORDS:]
    with contextlib.suppress(OSError):
        write_record(measures_path(home_root), {"schema": MEASURES_SCHEMA, "records": [m.to_json() for m in kept]})
