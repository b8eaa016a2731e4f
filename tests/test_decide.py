"""The one update decision: request x active runtime x release x host -> plan (table-driven, no IO)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llama_runtime import BackendUnavailableError
from llama_runtime.types import InstallMarker
from llama_runtime.updater.choice.decide import (
    ActiveState,
    Mode,
    Plan,
    UpdateRequest,
    build_number,
    decide,
    highest_build_tag,
    newest_releases,
    pick_latest,
    settled,
)
from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.release.release import Asset, Release
from tests.helpers import REPO

FORK = "someone/llama.cpp"
X86 = frozenset({"sse4_2", "avx", "avx2", "fma"})
CPU_HOST = HostFacts(os="linux", arch="x64", cpu_features=X86)
VULKAN_HOST = replace(CPU_HOST, vulkan=True)


def release(tag: str, *backends: str, repo: str = REPO, draft: bool = False, prerelease: bool = False) -> Release:
    names = {"cpu": f"llama-{tag}-bin-ubuntu-x64.tar.gz", "vulkan": f"llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz"}
    assets = tuple(
        Asset(name=names[b], size=1000, download_url=f"http://127.0.0.1/{names[b]}") for b in backends or ("cpu",)
    )
    return Release(repo=repo, tag=tag, assets=assets, draft=draft, prerelease=prerelease)


def active(
    tag: str = "b7000", backend: str = "cpu", *, request: str | None = None, repo: str = REPO, intact: bool = True
) -> ActiveState:
    asset = release(tag, backend, repo=repo).assets[0].name
    marker = InstallMarker(
        repo=repo,
        tag=tag,
        backend=backend,
        backend_request=request or backend,
        asset=asset,
        size=1000,
        sha256="0" * 64,
        digest_verified=True,
        installed_at="2026-01-01T00:00:00.000Z",
        binary="build/bin/llama-server",
    )
    return ActiveState(marker, intact=intact, name=f"{tag}-{backend}")


# (case, request, active, release, host, mode) -> (action, backend request recorded, warning fragment)
TABLE: list[tuple[str, UpdateRequest, ActiveState | None, Release, HostFacts, Mode, str, str, str]] = [
    ("first install takes auto", UpdateRequest(REPO), None, release("b7001"), CPU_HOST, "update",
     "install", "auto", ""),
    ("same build is up to date", UpdateRequest(REPO), active("b7001"), release("b7001"), CPU_HOST, "update",
     "up_to_date", "cpu", ""),
    ("newer build installs", UpdateRequest(REPO), active("b7000"), release("b7001"), CPU_HOST, "update",
     "install", "cpu", ""),
    ("latest older than active is kept", UpdateRequest(REPO), active("b7002"), release("b7001"), CPU_HOST,
     "update", "up_to_date", "cpu", "older than the active b7002"),
    ("pinned older tag goes back on purpose", UpdateRequest(REPO, tag="b7001"), active("b7002"), release("b7001"),
     CPU_HOST, "update", "install", "cpu", ""),
    ("damaged active build is reinstalled", UpdateRequest(REPO), active("b7001", intact=False), release("b7001"),
     CPU_HOST, "update", "install", "cpu", ""),
    ("stored request that cannot be served falls back to auto", UpdateRequest(REPO), active("b7000", "vulkan"),
     release("b7001", "cpu"), CPU_HOST, "update", "refuse", "auto", "falling back to auto"),
    ("explicit backend without a build is refused", UpdateRequest(REPO, backend="vulkan"), None,
     release("b7001", "cpu"), VULKAN_HOST, "update", "refuse", "vulkan", ""),
    ("explicit cpu may replace a GPU runtime", UpdateRequest(REPO, backend="cpu"), active("b7000", "vulkan"),
     release("b7001", "cpu", "vulkan"), VULKAN_HOST, "update", "install", "cpu", ""),
    ("stored auto keeps the GPU build", UpdateRequest(REPO), active("b7000", "vulkan", request="auto"),
     release("b7001", "cpu", "vulkan"), VULKAN_HOST, "update", "install", "auto", ""),
    ("another repository installs when asked", UpdateRequest(FORK), active("b7000"), release("b7001", repo=FORK),
     CPU_HOST, "update", "install", "cpu", ""),
    # the scheduled check: strictly newer builds of the same repository only
    ("check: newer build is available", UpdateRequest(REPO), active("b7000"), release("b7001"), CPU_HOST,
     "upgrade_only", "install", "cpu", ""),
    ("check: never a downgrade", UpdateRequest(REPO), active("b7002"), release("b7001"), CPU_HOST, "upgrade_only",
     "up_to_date", "cpu", ""),
    ("check: another repository is not an update", UpdateRequest(REPO), active("b7000", repo=FORK),
     release("b7001"), CPU_HOST, "upgrade_only", "up_to_date", "cpu", ""),
    ("check: no build for the stored backend", UpdateRequest(REPO), active("b7000", "vulkan"),
     release("b7001", "cpu"), VULKAN_HOST, "upgrade_only", "refuse", "vulkan", ""),
    ("check: unorderable tag is never an update", UpdateRequest(REPO), active("b7000"),
     release("llama-prebuilt-master-1f1aaa4"), CPU_HOST, "upgrade_only", "up_to_date", "cpu", ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "request_", "active_", "release_", "host", "mode", "action", "backend_request", "warning"),
    TABLE,
    ids=[row[0] for row in TABLE],
)
def test_decision_table(
    case: str,
    request_: UpdateRequest,
    active_: ActiveState | None,
    release_: Release,
    host: HostFacts,
    mode: Mode,
    action: str,
    backend_request: str,
    warning: str,
) -> None:
    plan = decide(request_, active_, release_, host, mode=mode)
    assert (plan.action, plan.backend_request) == (action, backend_request), plan.reason
    assert plan.reason
    if warning:
        assert any(warning in w for w in plan.warnings), plan.warnings
    else:
        assert plan.warnings == ()
    if action == "refuse":
        assert isinstance(plan.error, BackendUnavailableError)
        with pytest.raises(BackendUnavailableError):
            plan.raise_if_refused()
    else:
        plan.raise_if_refused()
        assert plan.choice is not None


def test_stored_gpu_request_never_trades_a_working_gpu_runtime_for_cpu() -> None:
    plan = decide(UpdateRequest(REPO), active("b7000", "vulkan", request="auto"), release("b7001", "cpu"), CPU_HOST)
    assert plan.action == "refuse"
    assert plan.error is not None and "Refusing to replace the working vulkan runtime" in plan.error.message


def test_pinned_tag_already_active_is_settled_without_a_release() -> None:
    plan = settled(UpdateRequest(REPO, tag="b7000"), active("b7000"))
    assert plan is not None and plan.action == "up_to_date" and plan.release is None
    assert settled(UpdateRequest(REPO, tag="b7000"), active("b7000", intact=False)) is None
    assert settled(UpdateRequest(REPO, tag="b7000", backend="vulkan"), active("b7000")) is None
    assert settled(UpdateRequest(REPO), active("b7000")) is None


def test_settled_and_decided_agree_and_the_decision_names_the_asset() -> None:
    request, state = UpdateRequest(REPO, tag="b7000"), active("b7000")
    plan: Plan = decide(request, state, release("b7000"), CPU_HOST)
    assert plan.action == "up_to_date" and plan.choice is not None
    assert plan.choice.asset.name == state.marker.asset


def test_installed_copy_of_the_choice_is_switched_to_not_downloaded() -> None:
    kept = active("b7001")
    plan = decide(UpdateRequest(REPO, tag="b7001"), active("b7002"), release("b7001"), CPU_HOST, installed=[kept])
    assert (plan.action, plan.switch_to) == ("switch", kept.name)
    damaged = replace(kept, intact=False)
    plan = decide(UpdateRequest(REPO, tag="b7001"), active("b7002"), release("b7001"), CPU_HOST, installed=[damaged])
    assert plan.action == "install"


# -- which release is latest ------------------------------------------------------------


def test_latest_is_the_published_build_with_the_highest_number() -> None:
    releases = [
        release("b9999"),
        release("b10000"),
        release("b10001", prerelease=True),
        release("b10002", draft=True),
        release("b10003-mix-1a2b3c4"),
        release("v1.0.0"),
    ]
    picked = pick_latest(releases)
    assert picked is not None and picked.tag == "b10000"
    assert [r.tag for r in newest_releases(releases, 2)] == ["b10000", "b9999"]
    assert pick_latest([release("v1.0.0")]) is None


def test_highest_build_tag_orders_numbers_not_text() -> None:
    assert highest_build_tag(["b998", "b10000", "b9999", "latest", "b10000-mix-1a2b3c4"]) == "b10000"
    assert highest_build_tag(["v1.2.3"]) is None
    assert build_number("b10000") == 10000 and build_number("b1-mix-1a2b3c4") is None
