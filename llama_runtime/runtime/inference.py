"""Does this llama-server generate? One fixed completion request, judged and timed.

``/health`` only says the HTTP thread runs and the model is mapped; a build can
answer it and still fail or stall in generation (a broken GPU kernel, a bad
sampler). :func:`probe_inference` asks ``POST /completion`` for a few tokens of a
short fixed prompt with deterministic settings and a time limit, and reads the
server's own ``timings`` (llama.cpp's server README, "POST /completion")::

    "timings": {"prompt_n": 18, "prompt_ms": 2.1, "prompt_per_second": 8474.5,
                "predicted_n": 8, "predicted_ms": 6.4, "predicted_per_second": 1079.0, ...}

Invariants:

* The request is the same for every runtime and every run (prompt, token
  count, greedy sampling, fixed seed, no prompt cache), so the speeds of two
  runtimes on one model are comparable.
* ``ignore_eos`` makes every healthy server produce exactly
  :data:`GATE_TOKENS` tokens: a model whose first token happens to be the end
  of text is not mistaken for a broken build, and every sample times the same
  amount of work.
* Any failure (HTTP error, timeout, a body that is not a completion, no tokens
  or no text) is ``ok=False`` with a sentence saying why; nothing raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from llama_runtime.runtime.fsutil import parse_record

#: A short, plain-ASCII prompt every tokenizer splits into a few dozen tokens.
GATE_PROMPT: Final = "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea,"
#: Enough generated tokens to time decoding, few enough to cost well under a
#: second on any GPU and a few seconds on a slow CPU.
GATE_TOKENS: Final = 16
#: A 70B model on a CPU decodes ~1 token/s; 16 tokens plus the prompt fit in a minute.
GATE_TIMEOUT_SECONDS: Final = 60.0
#: The first request after a start pays one-time costs (shader compilation,
#: page faults of the weights); the best of two samples measures the engine.
GATE_SAMPLES: Final = 2
#: The largest completion body we read; a 16-token answer with its settings is ~3 KB.
MAX_BODY_BYTES: Final = 1024 * 1024


def completion_request(n_predict: int = GATE_TOKENS) -> dict[str, Any]:
    """The body of the gate's ``POST /completion``: the same for every runtime."""
    return {
        "prompt": GATE_PROMPT,
        "n_predict": n_predict,
        "temperature": 0.0,  # greedy: the same tokens on every run
        "seed": 42,
        "ignore_eos": True,
        "cache_prompt": False,  # every sample evaluates the whole prompt
        # Streamed: the first event arrives with the first token, so a first-token limit is
        # measurable, and one event per token shows a token repeated through the answer.
        "stream": True,
    }


@dataclass(frozen=True)
class Speed:
    """Tokens per second of one runtime on one model, as llama-server timed them."""

    prompt_per_second: float
    predicted_per_second: float
    prompt_n: int = 0
    predicted_n: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "prompt_per_second": round(self.prompt_per_second, 2),
            "predicted_per_second": round(self.predicted_per_second, 2),
            "prompt_n": self.prompt_n,
            "predicted_n": self.predicted_n,
        }

    @classmethod
    def from_json(cls, payload: object) -> Speed | None:
        """The speed in ``payload``, or None when it is not one (a damaged record)."""
        if not isinstance(payload, Mapping):
            return None
        prompt, predicted = payload.get("prompt_per_second"), payload.get("predicted_per_second")
        if not _positive_number(prompt) or not _positive_number(predicted):
            return None
        prompt_n, predicted_n = payload.get("prompt_n", 0), payload.get("predicted_n", 0)
        return cls(
            prompt_per_second=float(prompt),  # type: ignore[arg-type]
            predicted_per_second=float(predicted),  # type: ignore[arg-type]
            prompt_n=prompt_n if type(prompt_n) is int else 0,
            predicted_n=predicted_n if type(predicted_n) is int else 0,
        )


@dataclass(frozen=True)
class InferenceResult:
    """What the gate's completion request showed.

    Attributes:
        ok: The server generated text within the time limit.
        reason: Why not, for people (empty when ``ok``).
        content: The generated text (greedy, so the same on every run of one build).
        speed: The best figures of the samples, when ``ok`` and the server reported timings.
        seconds: Wall-clock seconds all samples took.
        repeats: One token was repeated through the whole answer (a warning, not a failure:
            random-weight test models do it, but so does a broken kernel).
        samples: The speed of every sample, in order (the spread the speed guard needs).
    """

    ok: bool
    reason: str = ""
    content: str = ""
    speed: Speed | None = None
    seconds: float = 0.0
    repeats: bool = False
    samples: tuple[Speed, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "ok": self.ok,
            "reason": self.reason,
            "content": self.content,
            "speed": self.speed.to_json() if self.speed else None,
            "seconds": round(self.seconds, 3),
            "repeats": self.repeats,
        }


def parse_completion(status: int, body: bytes) -> InferenceResult:
    """Judge one ``/completion`` answer, streamed (server-sent events) or one JSON object (pure; no IO)."""
    if _is_event_stream(body):
        return _parse_stream(status, body)
    try:
        payload = parse_record(body, what="the completion answer")
    except ValueError:  # not UTF-8 JSON, or nested past any answer's depth
        return InferenceResult(False, f"HTTP {status} with a body that is not JSON ({len(body)} bytes)")
    except RecursionError:  # a deep body is a broken answer, never our crash
        return InferenceResult(False, f"HTTP {status} with a JSON body nested too deep ({len(body)} bytes)")
    if not isinstance(payload, dict):
        return InferenceResult(False, f"HTTP {status} with a JSON body that is not an object")
    if status != 200 or "error" in payload:
        return InferenceResult(False, f"HTTP {status}: {_error_text(payload)}")
    return _judge_answer(payload, ())


def _is_event_stream(body: bytes) -> bool:
    """Whether ``body`` is server-sent events: its first line that is not a comment is an event.

    llama-server sends a comment line (``:``) to keep the connection open while a slow prompt is
    evaluated, so a stream may begin with one or more of them.
    """
    for line in body.lstrip().splitlines():
        if not line.strip() or line.startswith(b":"):
            continue
        return line[:6] in (b"data: ", b"data:{", b"error:")
    return False


def _parse_stream(status: int, body: bytes) -> InferenceResult:
    """The events of a streamed answer: one per token, the last (``stop``) with the count and timings."""
    pieces: list[str] = []
    final: dict[str, Any] | None = None
    for line in body.splitlines():
        kind, _, data = line.partition(b":")
        if kind not in (b"data", b"error") or not data.strip():
            continue  # SSE comments, blank separators
        try:
            event = parse_record(data, what="a streamed event")  # bounded depth: a deep event is a broken answer
        except ValueError as exc:
            return InferenceResult(False, f"HTTP {status} with a streamed event that is not usable JSON: {exc}")
        if not isinstance(event, dict):
            return InferenceResult(False, f"HTTP {status} with a streamed event that is not an object")
        if kind == b"error" or "error" in event:
            return InferenceResult(
                False, f"HTTP {status}: {_error_text(event if 'error' in event else {'error': event})}"
            )
        piece = event.get("content")
        if isinstance(piece, str) and piece:
            pieces.append(piece)
        if event.get("stop") is True:
            final = event
            break
    if final is None:
        return InferenceResult(
            False, f"the answer ended after {len(pieces)} tokens without its final event (did the server crash?)"
        )
    if status != 200:
        return InferenceResult(False, f"HTTP {status}: {_error_text(final)}")
    return _judge_answer({**final, "content": "".join(pieces)}, tuple(pieces))


def _judge_answer(payload: Mapping[str, Any], pieces: tuple[str, ...]) -> InferenceResult:
    """A completion's text and token count: empty or whitespace-only text fails; one repeated token warns."""
    content = payload.get("content")
    predicted = payload.get("tokens_predicted")
    if not isinstance(content, str) or type(predicted) is not int:
        return InferenceResult(False, "the answer is not a completion (no 'content' or 'tokens_predicted')")
    if predicted < 1 or not content:
        return InferenceResult(False, f"empty output: {predicted} tokens, {len(content)} characters of text")
    if not content.strip():
        return InferenceResult(False, f"empty output: {predicted} tokens of whitespace only ({content!r})")
    # Fewer than n_predict tokens is fine: the server's own -n may cap a request.
    speed = _speed(payload.get("timings"))
    return InferenceResult(True, content=content, speed=speed, repeats=repeats(content, pieces, predicted))


def repeats(content: str, pieces: tuple[str, ...], predicted: int) -> bool:
    """Whether one token fills the whole answer (``GGGG…``, ``!!!!``); pure.

    Streamed, the pieces are the tokens; otherwise the text is one unit repeated.
    """
    if predicted < 2:
        return False
    if pieces:
        return len(pieces) >= 2 and len(set(pieces)) == 1
    unit = re.fullmatch(r"(.+?)\1+", content, flags=re.DOTALL)
    return unit is not None and len(content) // len(unit.group(1)) >= min(predicted, 4)


def _speed(timings: object) -> Speed | None:
    """llama-server's ``timings`` as a :class:`Speed` (None when absent or malformed)."""
    return Speed.from_json(timings)


def _error_text(payload: Mapping[str, Any]) -> str:
    error = payload.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return "no error message"


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and value != float("inf")


class DeadlineError(TimeoutError):
    """The answer did not come within a limit; ``first_token`` says which one."""

    def __init__(self, message: str, *, first_token: bool) -> None:
        super().__init__(message)
        self.first_token = first_token


#: ``(url, body, headers, timeout, first_token_timeout)`` -> status and body; raises OSError (DeadlineError).
Poster = Callable[[str, bytes, Mapping[str, str], float, float], tuple[int, bytes]]


class _Watchdog:
    """Shuts a connection's socket when the first byte or the whole answer is late (a wall-clock limit)."""

    def __init__(self, timeout: float, first_token_timeout: float) -> None:
        import threading

        self.timeout, self.first_token_timeout = timeout, first_token_timeout
        self.started = time.monotonic()
        self.first_byte = False
        self.expired = ""
        self.sockets: list[Any] = []  # the connection drops its reference once a response will close
        self.done = threading.Event()
        threading.Thread(target=self._watch, name="completion-deadline", daemon=True).start()

    def _watch(self) -> None:
        import socket

        if not self.done.wait(max(self.first_token_timeout, 0.0)) and not self.first_byte:
            self.expired = "first_token"
        elif not self.done.wait(max(self.timeout - (time.monotonic() - self.started), 0.0)):
            self.expired = "overall"
        for sock in self.sockets if self.expired else ():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def post_json(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float, first_token_timeout: float
) -> tuple[int, bytes]:
    """``POST`` ``body`` to ``url``; returns status and body (HTTP errors included).

    Both limits are wall-clock limits, not gaps between reads: a watchdog shuts
    the socket when the first body byte (a streamed answer's first token) has
    not come within ``first_token_timeout``, or the whole answer within
    ``timeout``. A server that drips its answer fails at the limit.

    Raises:
        DeadlineError: A limit passed.
        OSError: No answer (refused, reset).
    """
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=max(timeout, 0.01))
    guard = _Watchdog(timeout, first_token_timeout)
    chunks: list[bytes] = []
    try:
        conn.connect()
        guard.sockets.append(conn.sock)
        conn.request("POST", parts.path or "/", body=body, headers=dict(headers))
        response = conn.getresponse()
        size = 0
        while size <= MAX_BODY_BYTES:
            chunk = response.read1(64 * 1024)
            if not chunk:
                break
            guard.first_byte = True
            chunks.append(chunk)
            size += len(chunk)
        status = int(response.status)
    except (OSError, http.client.HTTPException) as exc:
        if not guard.expired:
            raise OSError(str(exc) or type(exc).__name__) from exc
        status = 0
    finally:
        guard.done.set()
        conn.close()
    _raise_if_expired(guard.expired, timeout, first_token_timeout, sum(map(len, chunks)))
    return status, b"".join(chunks)[:MAX_BODY_BYTES]


def _raise_if_expired(expired: str, timeout: float, first_token_timeout: float, received: int) -> None:
    if expired == "first_token" and first_token_timeout < timeout:
        raise DeadlineError(f"within {_seconds(first_token_timeout)} s", first_token=True)
    if expired:
        raise DeadlineError(f"timed out; {received} bytes had arrived", first_token=False)


def probe_inference(
    base_url: str,
    *,
    timeout: float = GATE_TIMEOUT_SECONDS,
    samples: int = GATE_SAMPLES,
    api_key: str | None = None,
    n_predict: int = GATE_TOKENS,
    first_token_timeout: float | None = None,
    post: Poster = post_json,
    clock: Callable[[], float] = time.monotonic,
) -> InferenceResult:
    """Ask the llama-server at ``base_url`` for a completion ``samples`` times.

    The first failure ends the probe; otherwise the result carries the best
    prompt and generation speeds of the samples, and each sample's. ``timeout``
    bounds all samples together, wall clock (a dripping server fails at it);
    ``first_token_timeout`` bounds the wait for each sample's first token.

    Args:
        base_url: ``http://HOST:PORT`` of a llama-server that answers ``/health``.
        timeout: Seconds for all samples together.
        samples: How many identical requests to time (at least one).
        api_key: The server's ``--api-key``, sent as a bearer token.
        n_predict: Tokens to generate per request.
        first_token_timeout: Seconds to each sample's first token (default: ``timeout``).
        post: The HTTP seam (tests replace it).
        clock: Monotonic seconds.
    """
    body = json.dumps(completion_request(n_predict)).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = base_url.rstrip("/") + "/completion"
    started = clock()
    best: InferenceResult | None = None
    speeds: list[Speed] = []
    for _ in range(max(samples, 1)):
        remaining = timeout - (clock() - started)
        if remaining <= 0:
            break  # the samples taken so far stand; at least one was taken
        first = min(remaining, first_token_timeout if first_token_timeout is not None else remaining)
        try:
            status, answer = post(url, body, headers, remaining, first)
        except OSError as exc:
            return InferenceResult(False, _no_answer(url, exc, timeout), seconds=clock() - started)
        result = parse_completion(status, answer)
        if not result.ok:
            return _with_seconds(result, clock() - started)
        if result.speed is not None:
            speeds.append(result.speed)
        best = result if best is None else _faster(best, result)
    assert best is not None  # the first sample always runs: remaining == timeout > 0
    return dataclasses.replace(best, seconds=clock() - started, samples=tuple(speeds))


def _seconds(value: float) -> str:
    """``4`` for 3.99994 (a limit counted down from 4 s), ``0.3``, ``3600``: what a person set."""
    return f"{round(value, 1):g}"


def _no_answer(url: str, exc: OSError, timeout: float) -> str:
    if isinstance(exc, DeadlineError):
        if exc.first_token:
            return f"no first token from {url} {exc} (the whole answer had {_seconds(timeout)} s)"
        return f"no complete answer from {url} within {_seconds(timeout)} s ({exc})"
    reason = "timed out" if "timed out" in str(exc) else str(exc)
    return f"no answer from {url} within {_seconds(timeout)} s ({reason})"


def _faster(a: InferenceResult, b: InferenceResult) -> InferenceResult:
    """``a`` with the better of each figure of ``a`` and ``b``."""
    if a.speed is None or b.speed is None:
        return a if a.speed is not None else b
    speed = Speed(
        prompt_per_second=max(a.speed.prompt_per_second, b.speed.prompt_per_second),
        predicted_per_second=max(a.speed.predicted_per_second, b.speed.predicted_per_second),
        prompt_n=a.speed.prompt_n,
        predicted_n=a.speed.predicted_n,
    )
    return dataclasses.replace(a, speed=speed)


def _with_seconds(result: InferenceResult, seconds: float) -> InferenceResult:
    return dataclasses.replace(result, seconds=seconds)


__all__ = [
    "GATE_PROMPT",
    "GATE_SAMPLES",
    "GATE_TIMEOUT_SECONDS",
    "GATE_TOKENS",
    "DeadlineError",
    "InferenceResult",
    "Speed",
    "completion_request",
    "parse_completion",
    "probe_inference",
]
