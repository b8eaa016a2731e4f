"""The backend vocabulary: one parser for flags, environment and markers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_runtime.errors import UnknownBackendError
from llama_runtime.runtime.marker import BACKEND_CHOICES, CONCRETE_BACKENDS, parse_backend
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.config import resolve_settings


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("vulkan", "vulkan"),
        ("  Vulkan \n", "vulkan"),
        ("CUDA", "cuda"),
        ("hip", "rocm"),
        (" HIP ", "rocm"),
        ("ROCm", "rocm"),
        ("auto", "auto"),
        ("Metal", "metal"),
        ("sycl", "sycl"),
        ("openvino", "openvino"),
        ("cpu", "cpu"),
    ],
)
def test_known_names_are_trimmed_case_folded_and_aliased(raw: str, expected: str) -> None:
    assert parse_backend(raw) == expected


def test_unknown_backend_lists_every_valid_name() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        parse_backend("VLLM")
    assert caught.value.message == ("Unknown backend 'VLLM'. Choose one of: " + ", ".join(BACKEND_CHOICES) + ".")
    assert caught.value.exit_code == 2


def test_cuda_with_a_glued_version_suggests_cuda_and_the_cuda_line_option() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        parse_backend("cuda12")
    assert "Did you mean 'cuda'?" in caught.value.message
    assert caught.value.hint == "Pick the CUDA line separately: --backend cuda --cuda-version 12"


def test_typo_gets_a_did_you_mean() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        parse_backend("vulcan")
    assert "Did you mean 'vulkan'?" in caught.value.message


def test_nothing_close_gets_no_suggestion() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        parse_backend("tensorrt")
    assert "Did you mean" not in caught.value.message


def test_auto_is_not_a_concrete_backend() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        parse_backend("auto", allow_auto=False)
    assert "Choose one of: " + ", ".join(CONCRETE_BACKENDS) in caught.value.message


def test_environment_variable_goes_through_the_same_parser() -> None:
    settings = resolve_settings(home="/tmp/x", env={"LLAMA_RUNTIME_BACKEND": " HIP "})
    assert settings.backend == "rocm" and settings.backend_explicit


def test_bad_environment_backend_names_its_source() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        resolve_settings(home="/tmp/x", env={"LLAMA_RUNTIME_BACKEND": "vllm"})
    assert "(from LLAMA_RUNTIME_BACKEND)" in caught.value.message


def test_flag_beats_environment() -> None:
    settings = resolve_settings(home="/tmp/x", backend="cpu", env={"LLAMA_RUNTIME_BACKEND": "vulkan"})
    assert settings.backend == "cpu"


def test_cli_unknown_backend_exits_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--backend", "cuda12", "--home", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "Unknown backend 'cuda12'" in captured.err
    assert "--cuda-version 12" in captured.err
    assert "Traceback" not in captured.err


def test_cli_json_error_object_has_code_and_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["update", "--backend", "VLLM", "--home", str(tmp_path), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 2
    assert payload["error"]["code"] == "unknown_backend"
    assert payload["error"]["message"].startswith("Unknown backend 'VLLM'")
