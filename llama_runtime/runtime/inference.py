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

import json
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
        "stream": False,
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
        content: The generated text (for logs; nonsense on a random model).
        speed: The best figures of the samples, when ``ok`` and the server reported timings.
        seconds: Wall-clock seconds all samples took.
    """

    ok: bool
    reason: str = ""
    content: str = ""
    speed: Speed | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "ok": self.ok,
            "reason": self.reason,
            "content": self.content,
            "speed": self.speed.to_json() if self.speed else None,
            "seconds": round(self.seconds, 3),
        }


def parse_completion(status: int, body: bytes) -> InferenceResult:
    """Judge one ``/completion`` answer (pure; no IO)."""
    try:
        payload = parse_record(body, what="the completion answer")
    except ValueError:  # not UTF-8 JSON, or nested past any answer's depth
        return InferenceResult(False, f"HTTP {status} with a body that is not JSON ({len(body)} bytes)")
    if not isinstance(payload, dict):
        return InferenceResult(False, f"HTTP {status} with a JSON body that is not an object")
    if status != 200 or "error" in payload:
        return InferenceResult(False, f"HTTP {status}: {_error_text(payload)}")
    content = payload.get("content")
    predicted = payload.get("tokens_predicted")
    if not isinstance(content, str) or type(predicted) is not int:
        return InferenceResult(False, "the answer is not a completion (no 'content' or 'tokens_predicted')")
    if predicted < 1 or not content:
        return InferenceResult(False, f"empty output: {predicted} tokens, {len(content)} characters of text")
    # Fewer than n_predict tokens is fine: the server's own -n may cap a request.
    return InferenceResult(True, content=content, speed=_speed(payload.get("timings")))


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


Poster = Callable[[str, bytes, Mapping[str, str], float], tuple[int, bytes]]


def post_json(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
    """``POST`` ``body`` to ``url``; returns status and body (HTTP errors included).

    Raises:
        OSError: No answer (refused, reset, timed out).
    """
    import urllib.error
    import urllib.request

    # No proxies: an http_proxy from the environment must not see local traffic.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with opener.open(request, timeout=max(timeout, 0.01)) as response:
            return int(response.status), response.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(MAX_BODY_BYTES)
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise OSError(str(reason)) from exc


def probe_inference(
    base_url: str,
    *,
    timeout: float = GATE_TIMEOUT_SECONDS,
    samples: int = GATE_SAMPLES,
    api_key: str | None = None,
    n_predict: int = GATE_TOKENS,
    post: Poster = post_json,
    clock: Callable[[], float] = time.monotonic,
) -> InferenceResult:
    """Ask the llama-server at ``base_url`` for a completion ``samples`` times.

    The first failure ends the probe; otherwise the result carries the best
    prompt and generation speeds of the samples. ``timeout`` bounds all
    samples together.

    Args:
        base_url: ``http://HOST:PORT`` of a llama-server that answers ``/health``.
        timeout: Seconds for all samples together.
        samples: How many identical requests to time (at least one).
        api_key: The server's ``--api-key``, sent as a bearer token.
        n_predict: Tokens to generate per request.
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
    for _ in range(max(samples, 1)):
        remaining = timeout - (clock() - started)
        if remaining <= 0:
            break  # the samples taken so far stand; at least one was taken
        try:
            status, answer = post(url, body, headers, remaining)
        except OSError as exc:
            reason = "timed out" if "timed out" in str(exc) else str(exc)
            why = f"no answer from {url} within {timeout:g} s ({reason})"
            return InferenceResult(False, why, seconds=clock() - started)
        result = parse_completion(status, answer)
        if not result.ok:
            return _with_seconds(result, clock() - started)
        best = result if best is None else _faster(best, result)
    assert best is not None  # the first sample always runs: remaining == timeout > 0
    return _with_seconds(best, clock() - started)


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
    return InferenceResult(True, content=a.content, speed=speed)


def _with_seconds(result: InferenceResult, seconds: float) -> InferenceResult:
    return InferenceResult(result.ok, result.reason, result.content, result.speed, seconds)


__all__ = [
    "GATE_PROMPT",
    "GATE_SAMPLES",
    "GATE_TIMEOUT_SECONDS",
    "GATE_TOKENS",
    "InferenceResult",
    "Speed",
    "completion_request",
    "parse_completion",
    "probe_inference",
]
