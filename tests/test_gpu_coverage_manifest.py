"""A fork's build manifest decides GPU coverage: SM ranges of CUDA profiles, gfx targets of ROCm bundles.

The facts are the fork's own: ``unslothai/llama.cpp`` publishes ``llama-prebuilt-manifest.json``
with each release. The profile SM lists below are those of its live release manifest
(``cuda12-legacy`` sm_50–61, ``cuda12-older`` sm_70–89, ``cuda12-newer`` sm_86–120,
``cuda12-portable`` sm_70–120; cuda13 drops sm_70: older sm_75–89, portable sm_75–120),
as Unsloth Studio's installer reads them (unsloth.md §2.6, §(e)).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import BackendUnavailableError
from llama_runtime.errors import RemoteDataError
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.decide import available_builds
from llama_runtime.updater.choice.facts import host_sms
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.release.channel import ResolvedRelease
from llama_runtime.updater.release.manifest import (
    CHECKSUM_INDEX_ASSET,
    MANIFEST_ASSET,
    parse_checksum_index,
    parse_manifest,
)
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.sources.github import GitHubClient, JsonFileEtagCache
from llama_runtime.updater.sources.resolve import peek_latest_build, resolve_tag_remote
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import HomeGuard, cli_process, run_json, stand_in_server, stand_in_tarball

FORK = "unslothai/llama.cpp"
TAG = "b9596-mix-e6f2453"
CUDA12_ALL = [70, 75, 80, 86, 89, 90, 100, 103, 120]
#: profile -> (install kind, runtime line, coverage class, supported SMs, rank)
PROFILES: dict[str, tuple[str, str, str, list[int], int]] = {
    "linux-x64-cuda12-legacy": ("linux-cuda", "cuda12", "legacy", [50, 52, 60, 61], 40),
    "linux-x64-cuda12-older": ("linux-cuda", "cuda12", "older", [70, 75, 80, 86, 89], 30),
    "linux-x64-cuda12-newer": ("linux-cuda", "cuda12", "newer", [86, 89, 90, 100, 103, 120], 20),
    "linux-x64-cuda12-portable": ("linux-cuda", "cuda12", "portable", CUDA12_ALL, 100),
    "linux-x64-cuda13-older": ("linux-cuda", "cuda13", "older", [75, 80, 86, 89], 30),
    "linux-x64-cuda13-newer": ("linux-cuda", "cuda13", "newer", [86, 89, 90, 100, 103, 120], 20),
    "linux-x64-cuda13-portable": ("linux-cuda", "cuda13", "portable", CUDA12_ALL[1:], 100),
    "windows-x64-cuda12-older": ("windows-cuda", "cuda12", "older", [70, 75, 80, 86, 89], 30),
    "windows-x64-cuda12-portable": ("windows-cuda", "cuda12", "portable", CUDA12_ALL, 100),
}
ROCM = {"linux-x64-rocm-gfx110X": ["gfx1100", "gfx1101", "gfx1102"], "linux-x64-rocm-gfx120X": ["gfx1200", "gfx1201"]}
OTHERS = ["linux-x64-cpu", "linux-x64-vulkan"]


def asset_name(profile: str) -> str:
    return f"app-{TAG}-{profile}.{'zip' if profile.startswith('windows') else 'tar.gz'}"


def manifest_json(profiles: dict[str, tuple[str, str, str, list[int], int]] = PROFILES) -> dict[str, Any]:
    artifacts: list[dict[str, Any]] = [
        {"asset_name": asset_name(p), "install_kind": kind, "runtime_line": line, "coverage_class": cls,
         "bundle_profile": p.split("-", 2)[2], "supported_sms": [str(s) for s in sms], "min_sm": sms[0],
         "max_sm": sms[-1], "rank": rank}
        for p, (kind, line, cls, sms, rank) in profiles.items()
    ]  # fmt: skip
    artifacts += [
        {"asset_name": asset_name(p), "install_kind": "linux-rocm", "gfx_target": p.rsplit("-", 1)[1],
         "mapped_targets": targets}
        for p, targets in ROCM.items()
    ]  # fmt: skip
    artifacts += [{"asset_name": asset_name(p), "install_kind": p.replace("-x64", "")} for p in OTHERS]
    return {"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b9596", "artifacts": artifacts}


def release(profiles: dict[str, tuple[str, str, str, list[int], int]] = PROFILES, *, manifest: bool = True) -> Release:
    names = [asset_name(p) for p in [*profiles, *ROCM, *OTHERS]]
    assets = tuple(Asset(name=n, size=100, download_url=f"http://127.0.0.1/{n}") for n in names)
    data = json.dumps(manifest_json(profiles)).encode()
    parsed = parse_manifest(data, "test manifest") if manifest else None
    return Release(repo=FORK, tag=TAG, assets=assets, manifest=parsed)


X86 = frozenset({"sse4_2", "avx", "avx2", "fma"})


def nvidia(driver: str, *caps: str, os: str = "linux") -> HostFacts:
    return HostFacts(os=os, arch="x64", cuda_driver_version=driver, compute_capabilities=caps, cpu_features=X86)


# (host, chosen profile): the tightest bundle whose SMs cover every GPU, on the highest usable line.
CUDA_TABLE: list[tuple[str, HostFacts, str]] = [
    ("Pascal sm_61 on a 12.4 driver takes legacy, not portable", nvidia("12.4", "6.1"), "linux-x64-cuda12-legacy"),
    ("Pascal sm_61 on a 13.0 driver: no 13.x below 7.5, so cuda12 legacy", nvidia("13.0", "6.1"),
     "linux-x64-cuda12-legacy"),
    ("Maxwell sm_50 takes legacy", nvidia("12.6", "5.0"), "linux-x64-cuda12-legacy"),
    ("Volta sm_70 on 13.0: cuda13 starts at sm_75, so cuda12 older", nvidia("13.0", "7.0"), "linux-x64-cuda12-older"),
    ("Turing sm_75 on 13.0: cuda13 older (sm_75-89)", nvidia("13.0", "7.5"), "linux-x64-cuda13-older"),
    ("Ampere sm_86 on 12.4: older is tighter than newer", nvidia("12.4", "8.6"), "linux-x64-cuda12-older"),
    ("Ada sm_89 on 13.0: cuda13 older", nvidia("13.0", "8.9"), "linux-x64-cuda13-older"),
    ("Hopper sm_90 on 13.0: newer", nvidia("13.0", "9.0"), "linux-x64-cuda13-newer"),
    ("Blackwell sm_120 on 12.8: newer, never older", nvidia("12.8", "12.0"), "linux-x64-cuda12-newer"),
    ("Blackwell sm_100 on 13.0: cuda13 newer", nvidia("13.0", "10.0"), "linux-x64-cuda13-newer"),
    ("T4 + B200 (sm_75 + sm_100): only portable covers both", nvidia("13.0", "7.5", "10.0"),
     "linux-x64-cuda13-portable"),
    ("unknown compute capability: only portable", nvidia("13.0"), "linux-x64-cuda13-portable"),
    ("Windows Pascal sm_61: the Windows portable does not cover it, older neither", nvidia("12.4", "6.1", os="windows"),
     ""),
    ("Windows Ada sm_89 takes the Windows older bundle", nvidia("12.4", "8.9", os="windows"),
     "windows-x64-cuda12-older"),
]  # fmt: skip


@pytest.mark.parametrize(("scenario", "host", "profile"), CUDA_TABLE, ids=[t[0] for t in CUDA_TABLE])
def test_manifest_sm_coverage_picks_the_bundle_that_holds_every_gpu(
    scenario: str, host: HostFacts, profile: str
) -> None:
    if not profile:
        with pytest.raises(BackendUnavailableError, match="not for sm_61"):
            choose_asset(release(), host, "cuda")
        return
    choice = choose_asset(release(), host, "auto")
    assert choice.asset.name == asset_name(profile), choice.reason


def test_without_a_manifest_the_name_alone_still_decides() -> None:
    # No manifest read (a mirror that did not copy it): the old name rule, portable first; the
    # binary's device check after install is then the proof.
    choice = choose_asset(release(manifest=False), nvidia("12.4", "6.1"), "auto")
    assert choice.asset.name == asset_name("linux-x64-cuda12-portable")


def test_kepler_finds_no_cuda_bundle_and_auto_says_why_before_taking_the_cpu_build() -> None:
    choice = choose_asset(release(), nvidia("12.4", "3.7"), "auto")
    assert choice.backend == "cpu"
    assert "compiled for sm_50, sm_52, sm_60, sm_61 only, not for sm_37" in choice.reason


def test_explicit_cuda_on_pascal_without_legacy_names_the_coverage_of_each_bundle() -> None:
    no_legacy = {k: v for k, v in PROFILES.items() if "legacy" not in k}
    with pytest.raises(BackendUnavailableError) as caught:
        choose_asset(release(no_legacy), nvidia("12.4", "6.1"), "cuda")
    assert "not for sm_61 (release manifest)" in caught.value.message


def test_the_chosen_bundle_says_which_gpus_the_manifest_covers() -> None:
    choice = choose_asset(release(), nvidia("12.8", "12.0"), "auto")
    assert "cuda12-newer (sm_86–sm_120) covers sm_120" in choice.reason
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert "not for sm_120" in verdicts[asset_name("linux-x64-cuda12-older")]


def test_a_profile_without_sm_coverage_in_the_manifest_is_not_taken_for_one_that_covers_all() -> None:
    data = manifest_json()
    for artifact in data["artifacts"]:
        if artifact["asset_name"] == asset_name("linux-x64-cuda12-older"):
            del artifact["supported_sms"], artifact["min_sm"], artifact["max_sm"]
    parsed = parse_manifest(json.dumps(data).encode(), "test")
    choice = choose_asset(replace(release(), manifest=parsed), nvidia("12.4", "8.6"), "auto")
    assert choice.asset.name == asset_name("linux-x64-cuda12-newer")
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert verdicts[asset_name("linux-x64-cuda12-older")] == (
        "the release manifest gives the cuda12-older bundle no SM coverage"
    )


ROCM_TABLE = [("gfx1101", "linux-x64-rocm-gfx110X"), ("gfx1201", "linux-x64-rocm-gfx120X"), ("gfx1103", "")]


@pytest.mark.parametrize(("gfx", "profile"), ROCM_TABLE)
def test_rocm_bundle_holds_exactly_its_mapped_targets(gfx: str, profile: str) -> None:
    host = HostFacts(os="linux", arch="x64", rocm=True, rocm_gfx=(gfx,), vulkan=True, cpu_features=X86)
    choice = choose_asset(release(), host, "auto")
    if profile:
        assert choice.asset.name == asset_name(profile)
    else:  # gfx1103 is in TheRock's gfx110X family but not in this bundle's mapped_targets
        assert choice.backend == "vulkan"
        assert "gfx1100, gfx1101, gfx1102 only" in choice.reason


def test_compute_capabilities_read_as_sm_numbers() -> None:
    assert host_sms(nvidia("13.0", "12.0", "8.6", "8.6", "junk")) == (86, 120)
    assert host_sms(HostFacts(os="linux", arch="x64", compute_capability="7.5")) == (75,)
    assert host_sms(HostFacts(os="linux", arch="x64")) == ()


# -- reading the manifest --------------------------------------------------------------------


def test_manifest_fields_are_read_as_the_fork_writes_them() -> None:
    parsed = parse_manifest(json.dumps(manifest_json()).encode(), "m")
    assert parsed is not None
    older = parsed.artifact(asset_name("linux-x64-cuda12-older"))
    assert older is not None
    assert (older.supported_sms, older.min_sm, older.max_sm, older.rank) == ((70, 75, 80, 86, 89), 70, 89, 30)
    assert parsed.artifact(asset_name("linux-x64-rocm-gfx120X")).mapped_targets == ("gfx1200", "gfx1201")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "payload",
    [{"schema_version": 2, "component": "llama.cpp", "artifacts": "anything"},
     {"schema_version": 1, "component": "whisper.cpp", "upstream_tag": "v1", "artifacts": []}],
)  # fmt: skip
def test_a_manifest_of_another_schema_or_component_is_ignored_not_fatal(payload: dict[str, Any]) -> None:
    assert parse_manifest(json.dumps(payload).encode(), "m") is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"<html>", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"schema_version": 1, "component": "llama.cpp", "artifacts": []}', "no upstream_tag"),
        (b'{"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1"}', "no artifacts list"),
        (b'{"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": '
         b'[{"asset_name": "a", "install_kind": "linux-cuda", "min_sm": "sixty"}]}', "not an SM number"),
        (b'{"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": '
         b'[{"asset_name": "a", "install_kind": "linux-cuda", "supported_sms": "86"}]}', "not a list"),
        (b'{"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": '
         b'[{"asset_name": "a", "install_kind": "linux-rocm", "mapped_targets": [1]}]}', "not a list of names"),
        (b'{"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": '
         b'[{"asset_name": "a", "install_kind": "linux-cuda", "rank": true}]}', "'rank'"),
    ],
)  # fmt: skip
def test_a_malformed_version_1_manifest_is_refused_not_half_read(payload: bytes, message: str) -> None:
    with pytest.raises(RemoteDataError, match=message):
        parse_manifest(payload, "m")


def test_checksum_index_gives_each_files_sha_and_must_be_this_releases() -> None:
    digest = "ab" * 32
    index = {"release_tag": TAG, "artifacts": {MANIFEST_ASSET: {"sha256": digest.upper()}, "a.zip": {"sha256": digest}}}
    assert parse_checksum_index(json.dumps(index).encode(), TAG, "i") == {MANIFEST_ASSET: digest, "a.zip": digest}
    with pytest.raises(RemoteDataError, match="not 'b1'"):
        parse_checksum_index(json.dumps(index).encode(), "b1", "i")
    index["artifacts"] = {MANIFEST_ASSET: {"sha256": "zz"}}
    with pytest.raises(RemoteDataError, match="no valid sha256"):
        parse_checksum_index(json.dumps(index).encode(), TAG, "i")


# -- end to end through the fake GitHub ------------------------------------------------------


def publish_fork(
    github: FakeGitHub, tmp_path: Path, *, approve: dict[str, str] | None = None, digests: bool = True
) -> None:
    """The fork's release as it publishes it: bundles (the CPU one installable), the manifest, and the
    checksum index approving every file's sha256 (``approve`` overrides entries)."""
    files: dict[str, bytes] = {asset_name(p): b"x" * 64 for p in [*PROFILES, *ROCM, *OTHERS]}
    cpu = stand_in_tarball(tmp_path / "fork-cpu.tar.gz", tag=TAG, script=stand_in_server("version: 9596 (e6f2453)"))
    files[asset_name("linux-x64-cpu")] = cpu.read_bytes()
    files[MANIFEST_ASSET] = json.dumps(manifest_json()).encode()
    approved = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()} | (approve or {})
    index = {"schema_version": 1, "component": "llama.cpp", "release_tag": TAG, "upstream_tag": "b9596",
             "artifacts": {name: {"sha256": sha, "repo": FORK} for name, sha in approved.items()}}  # fmt: skip
    files[CHECKSUM_INDEX_ASSET] = json.dumps(index).encode()
    github.add_release(FORK, TAG, dict(files), digests=digests)


def test_plan_host_reads_the_forks_manifest_once_and_plans_pascal_and_blackwell(
    tmp_path: Path, github: FakeGitHub
) -> None:
    publish_fork(github, tmp_path)
    common = ["--home", str(tmp_path / "home"), "--api-url", github.api_url, "--repo", FORK, "--json"]

    def plan_for(facts: Mapping[str, object]) -> dict[str, Any]:
        path = tmp_path / "host.json"
        path.write_text(json.dumps({"host": facts}))
        done = cli_process("plan", "--tag", TAG, "--host", str(path), "--explain", *common)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    pascal = {"os": "linux", "arch": "x64", "cuda_driver_version": "12.4", "compute_capabilities": ["6.1"]}
    planned = plan_for(pascal)
    assert planned["asset"] == asset_name("linux-x64-cuda12-legacy")
    why = {c["asset"]: c["why"] for c in planned["candidates"]}
    assert "not for sm_61 (release manifest)" in why[asset_name("linux-x64-cuda12-portable")]
    assert f"GPU coverage of its bundles from its {MANIFEST_ASSET}" in planned["resolution"]
    blackwell = {"os": "linux", "arch": "x64", "cuda_driver_version": "12.8", "compute_capabilities": ["12.0"]}
    assert plan_for(blackwell)["asset"] == asset_name("linux-x64-cuda12-newer")


@pytest.mark.parametrize("path", ["update --tag", "the scheduled check's cheap path"])
def test_a_repeated_resolve_reads_the_manifest_from_the_cache_while_the_asset_is_unchanged(
    path: str, tmp_path: Path, github: FakeGitHub
) -> None:
    publish_fork(github, tmp_path)
    cache = JsonFileEtagCache(tmp_path / "etags.json")
    for _ in range(2):
        with GitHubClient(github.api_url, FORK, etag_cache=cache) as client:
            if path == "update --tag":
                found = resolve_tag_remote(client, TAG).release
            else:
                peek = peek_latest_build(client, "stable")
                assert peek.build_tag == TAG
                found = peek.release
        assert found.manifest is not None
        assert found.manifest.artifact(asset_name("linux-x64-cuda12-legacy")) is not None
    assert len(github.requests_to("blob", MANIFEST_ASSET)) == 1
    assert len(github.requests_to("blob", CHECKSUM_INDEX_ASSET)) == 1


def test_a_mirror_carries_the_manifest_so_its_clients_choose_as_from_github(tmp_path: Path, github: FakeGitHub) -> None:
    publish_fork(github, tmp_path)
    dest = tmp_path / "mirror"
    synced = cli_process("mirror", "sync", "--dest", str(dest), "--repo", FORK, "--tag", TAG, "--platform", "linux-x64",
                 "--api-url", github.api_url, "--home", str(tmp_path / "home"), "--json")  # fmt: skip
    assert synced.returncode == 0, synced.stdout + synced.stderr
    host = tmp_path / "pascal.json"
    host.write_text(json.dumps({"os": "linux", "arch": "x64", "cuda_driver_version": "12.4",
                                "compute_capabilities": ["6.1"]}))  # fmt: skip
    planned = cli_process("plan", "--repo", FORK, "--tag", TAG, "--host", str(host), "--api-url", dest.as_uri(),
                  "--home", str(tmp_path / "home"), "--json")  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert json.loads(planned.stdout)["asset"] == asset_name("linux-x64-cuda12-legacy")


def test_list_available_judges_fork_bundles_by_their_manifest_read_only_for_releases_it_examines(
    tmp_path: Path, github: FakeGitHub
) -> None:
    bare = release(manifest=False)
    seen: list[str] = []

    def enrich(r: Release) -> Release:
        seen.append(r.tag)
        return replace(r, manifest=release().manifest)

    builds = [ResolvedRelease(bare.tag, None, bare)]
    listed = available_builds(builds, nvidia("12.4", "6.1"), "auto", installed=set(), limit=1, enrich=enrich)
    assert [a.asset for a in listed] == [asset_name("linux-x64-cuda12-legacy")] and seen == [TAG]
    # Through the CLI: the source attaches the manifest (one download) before choosing.
    publish_fork(github, tmp_path)
    done = cli_process("list", "--available", "--repo", FORK, "--api-url", github.api_url,
               "--home", str(tmp_path / "home"), "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(github.requests_to("blob", MANIFEST_ASSET)) == 1


def test_the_index_approval_of_an_archive_is_checked_against_githubs_digest(
    tmp_path: Path, github: FakeGitHub, b7000_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = asset_name("linux-x64-cpu")
    publish_fork(github, tmp_path, approve={cpu: "0" * 64})  # the publisher's index disowns the bytes
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--repo", FORK, "--tag", TAG)
    assert code == 8, payload
    assert f"{cpu} and the one its {CHECKSUM_INDEX_ASSET} approves differ" in payload["error"]["message"]
    guard.assert_intact("b7000")


@pytest.mark.parametrize("honest", [True, False])
def test_without_githubs_digest_the_index_sha256_is_what_the_download_must_match(
    honest: bool, tmp_path: Path, github: FakeGitHub, b7000_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = asset_name("linux-x64-cpu")
    publish_fork(github, tmp_path, approve=None if honest else {cpu: "1" * 64}, digests=False)
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--repo", FORK, "--tag", TAG)
    if honest:
        assert code == 0, payload
        assert payload["active"]["tag"] == TAG
        assert json.loads(Path(payload["active"]["marker_path"]).read_text())["digest_verified"] is True
        return
    assert code == 8, payload
    guard.assert_intact("b7000")


def test_a_damaged_cached_manifest_is_read_again_not_blamed_on_the_fork(tmp_path: Path, github: FakeGitHub) -> None:
    publish_fork(github, tmp_path)
    cache = JsonFileEtagCache(tmp_path / "etags.json")
    with GitHubClient(github.api_url, FORK, etag_cache=cache) as client:
        assert resolve_tag_remote(client, TAG).release.manifest is not None
    data = json.loads((tmp_path / "etags.json").read_text())
    for entry in data.values():
        if isinstance(entry.get("body"), str) and '"upstream_tag": "b9596", "artifacts": [' in entry["body"]:
            entry["body"] = entry["body"][:40]  # cut short on disk
    (tmp_path / "etags.json").write_text(json.dumps(data))
    with GitHubClient(github.api_url, FORK, etag_cache=cache) as client:
        assert resolve_tag_remote(client, TAG).release.manifest is not None
    assert len(github.requests_to("blob", MANIFEST_ASSET)) == 2


@pytest.mark.parametrize(
    ("artifacts", "message"),
    [
        ([{"asset_name": "a", "install_kind": "linux-cuda", "min_sm": "²"}], "not an SM number"),
        ([{"asset_name": "a", "install_kind": "linux-cuda", "min_sm": 89, "max_sm": 70}], "min_sm 89 is above"),
        ([{"asset_name": "a", "install_kind": "linux-cpu"}, {"asset_name": "a", "install_kind": "linux-cuda"}],
         "describes 'a' twice"),
    ],
)  # fmt: skip
def test_a_manifest_that_contradicts_itself_is_refused(artifacts: list[dict[str, Any]], message: str) -> None:
    payload = {"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": artifacts}
    with pytest.raises(RemoteDataError, match=message):
        parse_manifest(json.dumps(payload).encode(), "m")


def test_schema_version_true_is_not_version_1() -> None:
    payload = {"schema_version": True, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": []}
    assert parse_manifest(json.dumps(payload).encode(), "m") is None


def test_plan_explain_says_when_a_manifest_of_another_schema_was_not_read(tmp_path: Path, github: FakeGitHub) -> None:
    newer = {"schema_version": 2, "component": "llama.cpp", "artifacts": {"anything": "new"}}
    github.add_release(FORK, TAG, {asset_name("linux-x64-cpu"): b"x" * 64, MANIFEST_ASSET: json.dumps(newer).encode()})
    done = cli_process("plan", "--repo", FORK, "--tag", TAG, "--backend", "cpu", "--explain", "--api-url",
                       github.api_url, "--home", str(tmp_path / "home"), "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert any("was not read (another schema" in n for n in json.loads(done.stdout)["resolution"])


def test_a_cuda_bundle_the_manifest_leaves_out_ranks_after_those_it_says_cover_the_gpu() -> None:
    unlisted = {k: v for k, v in PROFILES.items() if "portable" not in k}
    data = manifest_json(unlisted)  # the portable bundles are published but not described
    parsed = parse_manifest(json.dumps(data).encode(), "m")
    choice = choose_asset(replace(release(), manifest=parsed), nvidia("12.4", "6.1"), "auto")
    assert choice.asset.name == asset_name("linux-x64-cuda12-legacy")
    verdicts = {c.asset_name: c.why for c in choice.candidates}
    assert verdicts[asset_name("linux-x64-cuda12-portable")] == f"ranked below {choice.asset.name}"


def test_a_cuda_pin_with_a_minor_matches_the_forks_major_line_bundles() -> None:
    choice = choose_asset(release(), nvidia("12.8", "12.0"), "cuda", cuda_version="12.8")
    assert choice.asset.name == asset_name("linux-x64-cuda12-newer")


def test_the_cuda_13_floor_reads_every_gpus_capability_not_only_the_lowest_field() -> None:
    # A host file may give compute_capabilities alone; Pascal still never gets a 13.x build.
    choice = choose_asset(release(manifest=False), nvidia("13.0", "6.1"), "auto")
    assert choice.asset.name == asset_name("linux-x64-cuda12-portable")


def test_a_manifest_served_drop_by_drop_gives_up_at_its_deadline_and_changes_nothing(
    tmp_path: Path,
    github: FakeGitHub,
    b7000_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_runtime.updater.sources import github as github_source

    publish_fork(github, tmp_path)
    guard = HomeGuard(tmp_path, b7000_home)
    monkeypatch.setattr(github_source, "SMALL_ASSET_DEADLINE_SECONDS", 1.0)
    github.inject(MANIFEST_ASSET, Fault(drip_seconds=0.3, drip_chunk=16, times=None))
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--repo", FORK, "--tag", TAG)
    assert code == 7, payload
    assert f"longer than 1 s to send {MANIFEST_ASSET}" in payload["error"]["message"]
    guard.assert_intact("b7000")


def test_one_release_with_a_broken_manifest_does_not_hide_the_others_from_list_available(
    tmp_path: Path, github: FakeGitHub
) -> None:
    old = "b9500-mix-aaaaaaa"
    github.add_release(FORK, old, {f"app-{old}-linux-x64-cpu.tar.gz": b"x" * 64, MANIFEST_ASSET: b"<html>"})
    publish_fork(github, tmp_path)
    done = cli_process("list", "--available", "--limit", "5", "--repo", FORK, "--api-url", github.api_url,
                       "--home", str(tmp_path / "home"), "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert [a["tag"] for a in json.loads(done.stdout)["available"]] == [TAG]


def test_a_mirror_of_a_fork_keeps_its_newest_releases_and_names_its_latest(tmp_path: Path, github: FakeGitHub) -> None:
    for n, tag in enumerate(("b9590-mix-aaaaaaa", "b9593-mix-bbbbbbb")):
        github.add_release(FORK, tag, {f"app-{tag}-linux-x64-cpu.tar.gz": b"x" * (64 + n)})
    publish_fork(github, tmp_path)  # b9596-mix-e6f2453, the newest
    dest = tmp_path / "mirror"
    home = str(tmp_path / "home")
    synced = cli_process("mirror", "sync", "--dest", str(dest), "--repo", FORK, "--newest", "3", "--platform",
                         "linux-x64", "--api-url", github.api_url, "--home", home, "--json")  # fmt: skip
    assert synced.returncode == 0, synced.stdout + synced.stderr
    report = json.loads(synced.stdout)
    assert sorted(report["releases"]) == ["b9590-mix-aaaaaaa", "b9593-mix-bbbbbbb", TAG]
    assert report["latest"] == TAG
    planned = cli_process("plan", "--repo", FORK, "--backend", "cpu", "--api-url", dest.as_uri(),
                          "--home", str(tmp_path / "home"), "--json")  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert json.loads(planned.stdout)["tag"] == TAG
