"""Credentials never leave memory.

``--api-url http://user:SECRET@…`` and a token: neither the password, nor the
token, nor their Basic encoding is in any line the tool prints (``-v``, ``-vv``,
``--json``, httpx's own lines) or in any file of the home (job records,
``downloads/*.part.meta``, range records, caches), even when a download is cut
off and its partial download is kept for a resume.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, HomeGuard, cli_process, publish_stand_in, stand_in_server, stand_in_tarball

_PASSWORD = "pw-SECRET-4f1c9a"
_TOKEN = "tok_SECRET_7e2d0b"
_SECRETS = (
    _PASSWORD,
    _TOKEN,
    base64.b64encode(f"user:{_PASSWORD}".encode()).decode(),
    base64.b64encode(f"user:{_PASSWORD}".encode()).decode().rstrip("="),
)


def with_user_info(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://user:{_PASSWORD}@{rest}"


def leaks_in_home(home: Path) -> list[str]:
    """Every file under ``home`` whose bytes hold a secret, as ``path: secret``."""
    found: list[str] = []
    for dirpath, _dirs, files in os.walk(home):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            found += [f"{path.relative_to(home)}: {s}" for s in _SECRETS if s.encode() in data]
    return found


def leaks_in(text: str) -> list[str]:
    return [s for s in _SECRETS if s in text]


@pytest.fixture
def secret_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_RUNTIME_", "GITHUB_TOKEN", "GH_TOKEN"))}
    env["LLAMA_RUNTIME_GITHUB_TOKEN"] = _TOKEN
    return env


def test_fake_github_takes_the_user_info_and_token_it_is_given(github: FakeGitHub, tmp_path: Path) -> None:
    import httpx

    publish_stand_in(github, tmp_path, "b7001")
    answer = httpx.get(
        f"{with_user_info(github.api_url)}/repos/{REPO}/releases", headers={"Authorization": f"token {_TOKEN}"}
    )
    assert answer.status_code == 200
    assert github.requests[-1].headers.get("authorization") is not None


@pytest.mark.parametrize("verbosity", ["-v", "-vv"])
def test_a_password_in_the_api_url_and_a_token_are_in_no_printed_line_and_no_file_of_the_home(
    github: FakeGitHub, home: Path, tmp_path: Path, secret_env: dict[str, str], verbosity: str
) -> None:
    old = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000")
    done = cli_process("install-file", str(old), "--home", str(home), env=secret_env)
    assert done.returncode == 0, done.stderr
    # ~500 kB that do not compress, so 100 bytes a try never completes it.
    padding = b"\n# " + os.urandom(512 * 1024).hex().encode() + b"\n"
    publish_stand_in(github, tmp_path, "b7001", script=stand_in_server("version: 7001 (stand-in)") + padding)
    # Cut off every try after 100 bytes: the partial download and its records stay for a resume.
    github.inject(CPU_TAR.format(tag="b7001"), Fault(reset_after_bytes=100, times=None))
    guard = HomeGuard(None, home)
    api = with_user_info(github.api_url)
    failed = cli_process("update", "--home", str(home), "--api-url", api, "--json", verbosity, env=secret_env)
    assert failed.returncode == 7, failed.stdout + failed.stderr
    guard.assert_intact("b7000")
    printed = [failed.stdout, failed.stderr]
    for verb in (["job", "status"], ["status"], ["check"], ["plan"], ["list", "--available"]):
        done = cli_process(*verb, "--home", str(home), "--api-url", api, "--json", verbosity, env=secret_env)
        printed += [done.stdout, done.stderr]
    assert list((home / "downloads").glob("*.part.meta")), "no partial download was kept"
    assert leaks_in("\n".join(printed)) == []
    assert leaks_in_home(home) == []
    # The credential was really used: the server saw it.
    assert any(r.headers.get("authorization") for r in github.requests)


def test_a_password_in_the_api_url_is_sent_as_basic_auth_to_the_api_only(
    github: FakeGitHub, home: Path, tmp_path: Path, secret_env: dict[str, str]
) -> None:
    del secret_env["LLAMA_RUNTIME_GITHUB_TOKEN"]
    old = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000")
    assert cli_process("install-file", str(old), "--home", str(home), env=secret_env).returncode == 0
    publish_stand_in(github, tmp_path, "b7001")
    done = cli_process(
        "update", "--home", str(home), "--api-url", with_user_info(github.api_url), "--json", "-vv", env=secret_env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    basic = f"Basic {_SECRETS[2]}"
    assert [r.headers.get("authorization") for r in github.requests_to("api", "/api/")] and all(
        r.headers.get("authorization") == basic for r in github.requests_to("api", "/api/")
    )
    assert all("authorization" not in r.headers for r in github.requests if r.host == "blob")
    assert leaks_in(done.stdout + done.stderr) == [] and leaks_in_home(home) == []


_SIGNED = f"https://user:{_PASSWORD}@mirror.example/dl/llama-b7001-bin-ubuntu-x64.tar.gz?sig={_TOKEN}&se=2026"


def test_partial_download_records_hold_no_credential_yet_still_match_their_url(tmp_path: Path) -> None:
    import httpx

    from llama_runtime.updater.fetch.partial import plan_resume, read_origin, record_origin, sidecar_path
    from llama_runtime.updater.fetch.ranges import Span, data_path, load_record, save_record, state_path

    partial = tmp_path / "asset.part"
    partial.write_bytes(b"x" * 10)
    record_origin(partial, _SIGNED, 100, httpx.Response(206, headers={"ETag": '"v1"'}))
    origin = read_origin(partial)
    assert origin is not None
    assert plan_resume(10, origin, url=_SIGNED, size=100, cap=100, has_digest=False).keep == 10
    other = _SIGNED.replace("se=2026", "se=2027")
    assert plan_resume(10, origin, url=other, size=100, cap=100, has_digest=False).keep == 0
    data_path(partial).write_bytes(b"\0" * 100)
    save_record(partial, _SIGNED, 100, '"v1"', [Span(0, 100, 10)])
    assert load_record(partial, _SIGNED, 100) is not None
    assert load_record(partial, other, 100) is None
    for path in (sidecar_path(partial), state_path(partial)):
        assert leaks_in(path.read_text()) == [], path.read_text()
