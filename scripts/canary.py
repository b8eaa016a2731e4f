#!/usr/bin/env python3
"""A canary for drift: does ggml-org/llama.cpp still publish the way this project expects?

It reads the real GitHub API (``https://api.github.com`` by default; ``--api-url``
or ``LLAMA_RUNTIME_GITHUB_API`` for another one, such as the tests' fake) and
compares what it sees with the expected facts kept in ``scripts/upstream-facts.json``:

* the pointer scheme: ``/releases/latest`` is a semver release holding only
  ``nightly-tag.txt``, builds are prereleases, the pointer's bytes match the digest
  GitHub publishes for it;
* stable and nightly, resolved by the project's own channel code
  (:meth:`llama_runtime.updater.sources.github.GitHubClient.resolve`);
* every asset name of those builds, matched against the known asset families
  (toolkit versions abstracted: a new CUDA version is a bump, a new family is drift)
  and read by the project's own :func:`~llama_runtime.updater.release.assetnames.parse_asset_name`;
* companions: every CUDA build has its ``cudart-…`` archive and the project's chooser takes it;
* the attestations of the assets the project chooses for a few hosts, verified through
  the project's :class:`~llama_runtime.updater.verify.provenance.ProvenanceCheck`
  (``LLAMA_RUNTIME_TRUSTED_ROOT`` and the other provenance settings honoured; the
  repository's default branch read as an install reads it), with the verified signer's
  workflow, trigger and ref compared with the facts' signing era.

Exit codes: 0 all matches; 1 drift (the report names it); 2 bad usage or facts file;
3 no network (DNS or connection failure, or no answer before the deadline, 60 s by default);
4 the check could not finish (GitHub refused: rate limit, 5xx). It writes nothing
anywhere: no llama-runtime home, no cache (a Sigstore trust-root refresh, when it runs,
uses sigstore's own cache directory).

Usage: ``python scripts/canary.py [--json] [--api-url URL] [--repo OWNER/NAME] [--facts FILE]``
(``GITHUB_TOKEN`` is optional and sent to api.github.com only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, Literal

import httpx

from llama_runtime.runtime.errors import (
    IntegrityError,
    LlamaRuntimeError,
    NetworkError,
    ProvenanceError,
    ReleaseNotFoundError,
    UserInputError,
)
from llama_runtime.updater.choice.choose import choose_asset
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.config import DEFAULT_API_URL, addressable, github_token, validate_repo
from llama_runtime.updater.release.assetnames import parse_asset_name
from llama_runtime.updater.release.channel import (
    MAX_NIGHTLY_TAG_BYTES,
    NIGHTLY_TAG_ASSET,
    Channel,
    ResolvedRelease,
    parse_nightly_tag,
)
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import parse_tag
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.verify.provenance import ProvenanceCheck
from llama_runtime.updater.verify.signer import Signer

EXIT_OK: Final = 0
EXIT_DRIFT: Final = 1
EXIT_USAGE: Final = 2
EXIT_OFFLINE: Final = 3
EXIT_INCOMPLETE: Final = 4
#: The whole run's bound (seconds): a daily job must end, and no network must say so quickly.
DEFAULT_DEADLINE_SECONDS: Final = 60.0
#: Per request (seconds): a connect that takes longer is a network that is not there.
_CONNECT_SECONDS: Final = 10.0
_READ_SECONDS: Final = 20.0
#: Tries per request: one retry for a blip; backoff sleeps are capped so the deadline holds.
_ATTEMPTS: Final = 2
_MAX_BACKOFF_SECONDS: Final = 2.0
#: Releases read for the pointer-scheme check: upstream publishes a dozen builds a day, so this
#: spans about two days of builds and usually the newest semver release.
_PAGE_SIZE: Final = 30
FACTS_FILE: Final = Path(__file__).with_name("upstream-facts.json")
_PLACEHOLDER: Final = re.compile(r"\{([a-z]+)\}")

Level = Literal["ok", "note", "unverified", "drift"]
_LEVELS: Final[tuple[Level, ...]] = ("drift", "unverified", "note", "ok")


class DeadlineExceeded(BaseException):
    """The run's deadline passed (raised from a timer signal, wherever the run was).

    A ``BaseException``: code under the run that catches ``Exception`` (a trust-root
    refresh does) must not swallow it.
    """


# -- the expected facts -----------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One asset family: a name pattern with ``{tag}`` and toolkit placeholders."""

    pattern: str
    parse: Mapping[str, Any] | str | None
    companion: str | None = None

    def regex(self, tag: str) -> re.Pattern[str]:
        """The pattern as an anchored regex for build ``tag`` (a toolkit placeholder is a dotted version)."""
        parts: list[str] = []
        pos = 0
        for match in _PLACEHOLDER.finditer(self.pattern):
            parts.append(re.escape(self.pattern[pos : match.start()]))
            key = match[1]
            parts.append(re.escape(tag) if key == "tag" else f"(?P<{key}>[0-9]+(?:\\.[0-9]+)*)")
            pos = match.end()
        parts.append(re.escape(self.pattern[pos:]))
        return re.compile("^" + "".join(parts) + "$")

    def fill(self, pattern: str, tag: str, versions: Mapping[str, str]) -> str:
        """``pattern`` (this family's companion) with the tag and the versions read from a name."""
        return _PLACEHOLDER.sub(lambda m: tag if m[1] == "tag" else versions.get(m[1], m[0]), pattern)


@dataclass(frozen=True)
class Era:
    """Who signs builds ``from_build``..``until_build`` (``None``: still today)."""

    workflow: str
    trigger: str
    ref: str
    from_build: int
    until_build: int | None

    def covers(self, build: int) -> bool:
        """Whether build number ``build`` falls in this era."""
        return build >= self.from_build and (self.until_build is None or build <= self.until_build)

    def describe(self) -> str:
        """``release.yml (push, refs/heads/master)``."""
        return f"{self.workflow} ({self.trigger}, {self.ref})"


@dataclass(frozen=True)
class Facts:
    """The expected-facts file, validated."""

    path: Path
    repository: str
    pointer: Mapping[str, Any]
    issuer: str
    signing_repository: str
    attested_from_build: int
    default_branch: str
    eras: tuple[Era, ...]
    toolkits: Mapping[str, tuple[str, ...]]
    families: tuple[Family, ...]
    assets_per_build: int
    hosts: tuple[Mapping[str, str], ...]


def _family(entry: Any) -> Family:
    """One ``families`` entry, its types checked (a malformed file is exit 2, never a traceback)."""
    name, parse, companion = entry["name"], entry["parse"], entry.get("companion")
    if not isinstance(name, str) or not (companion is None or isinstance(companion, str)):
        raise TypeError(f"a family's name and companion must be strings (got {name!r}, {companion!r})")
    if not (parse is None or isinstance(parse, str | dict)):
        raise TypeError(f"{name}: parse must be null, a string or an object (got {parse!r})")
    return Family(name, parse, companion)


def load_facts(path: Path) -> Facts:
    """Read and check the facts file.

    Raises:
        UserInputError: Unreadable, not JSON, or missing a field (the message names it).
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        signing = raw["signing"]
        facts = Facts(
            path=path,
            repository=str(raw["repository"]),
            pointer=dict(raw["pointer_scheme"]),
            issuer=str(signing["issuer"]),
            signing_repository=str(signing["repository"]),
            attested_from_build=int(signing["attested_from_build"]),
            default_branch=str(signing["default_branch"]),
            eras=tuple(
                Era(str(e["workflow"]), str(e["trigger"]), str(e["ref"]), int(e["from_build"]), e["until_build"])
                for e in signing["eras"]
            ),
            toolkits={k: tuple(v) for k, v in raw["toolkits"].items() if k != "about"},
            families=tuple(_family(f) for f in raw["families"]),
            assets_per_build=int(raw["assets_per_build"]),
            hosts=tuple(dict(h) for h in raw["chosen_for"]["hosts"]),
        )
        for key in ("build_tag", "version_tag"):
            re.compile(str(facts.pointer[key]))
    except OSError as exc:
        raise UserInputError(f"Cannot read the facts file {path}: {exc.strerror or exc}.") from None
    except (ValueError, KeyError, TypeError, AttributeError, re.error) as exc:
        raise UserInputError(f"The facts file {path} is malformed ({type(exc).__name__}: {exc}).") from None
    known = {"tag", *facts.toolkits}
    for family in facts.families:
        unknown = set(_PLACEHOLDER.findall(family.pattern + (family.companion or ""))) - known
        if unknown:
            raise UserInputError(
                f"The facts file {path}: {family.pattern} uses unknown placeholders {sorted(unknown)}."
            )
    return facts


# -- the report -------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One finding: its level, the topic it belongs to, and one sentence."""

    level: Level
    topic: str
    message: str


@dataclass
class Report:
    """Everything the run found, in order."""

    api_url: str
    repository: str
    facts: str
    items: list[Item] = field(default_factory=list)
    channels: dict[str, dict[str, str | None]] = field(default_factory=dict)
    signers: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None  # why the run could not finish ("offline", "incomplete")

    def add(self, level: Level, topic: str, message: str) -> None:
        """Record a finding (the same sentence once)."""
        item = Item(level, topic, message)
        if item not in self.items:
            self.items.append(item)

    def count(self, level: Level) -> int:
        """How many findings of ``level``."""
        return sum(1 for i in self.items if i.level == level)

    def exit_code(self) -> int:
        """3 offline, 4 incomplete, 1 drift, else 0 (unverified items are reported, not drift)."""
        if self.stopped == "offline":
            return EXIT_OFFLINE
        if self.stopped == "incomplete":
            return EXIT_INCOMPLETE
        return EXIT_DRIFT if self.count("drift") else EXIT_OK

    def result(self) -> str:
        """One word for the outcome."""
        return self.stopped or ("drift" if self.count("drift") else "ok")

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "schema": 1,
            "result": self.result(),
            "exit_code": self.exit_code(),
            "api_url": self.api_url,
            "repository": self.repository,
            "facts": self.facts,
            "channels": self.channels,
            "signers": self.signers,
            "counts": {level: self.count(level) for level in _LEVELS},
            "items": [{"level": i.level, "topic": i.topic, "message": i.message} for i in self.items],
        }

    def to_text(self) -> str:
        """The human report: the verdict, then findings, worst first."""
        counts = ", ".join(f"{self.count(level)} {level}" for level in _LEVELS)
        lines = [
            f"llama.cpp canary: {self.repository} at {self.api_url}, against {self.facts}",
            f"result: {self.result().upper()} ({counts})",
        ]
        for channel, seen in self.channels.items():
            version = f" via {seen['version']}" if seen.get("version") else ""
            lines.append(f"  {channel}: {seen['build']}{version}")
        for level in _LEVELS:
            lines += [f"  {level.upper():<10} {i.topic:<11} {i.message}" for i in self.items if i.level == level]
        return "\n".join(lines)


# -- the checks (each a small function over data the client fetched) ----------------------


def check_pointer_scheme(latest: Release, page: Sequence[Release], facts: Facts, report: Report) -> None:
    """Builds are prereleases, semver releases are not and hold only the pointer, latest is a semver release."""
    scheme = facts.pointer
    build_tag, version_tag = re.compile(scheme["build_tag"]), re.compile(scheme["version_tag"])
    allowed = set(scheme["version_assets"])
    if scheme.get("latest_is_version") and not version_tag.match(latest.tag):
        report.add(
            "drift", "pointer", f"/releases/latest is {latest.tag}, not a semver release: the pointer scheme changed"
        )
    releases = {r.tag: r for r in [latest, *page]}
    for release in releases.values():
        if build_tag.match(release.tag):
            if release.prerelease != bool(scheme["build_prerelease"]):
                state = "a prerelease" if release.prerelease else "not a prerelease"
                report.add("drift", "pointer", f"build {release.tag} is {state}: the pointer scheme changed")
        elif version_tag.match(release.tag):
            _check_version_release(release, allowed, scheme, report)
        else:
            report.add("drift", "pointer", f"release {release.tag} follows neither the build nor the semver scheme")
    report.add("ok", "pointer", f"{len(releases)} releases read: builds and semver releases as the facts say")


def _check_version_release(release: Release, allowed: set[str], scheme: Mapping[str, Any], report: Report) -> None:
    if release.prerelease != bool(scheme["version_prerelease"]):
        report.add(
            "drift", "pointer", f"semver release {release.tag} is {'a' if release.prerelease else 'not a'} prerelease"
        )
    names = sorted(a.name for a in release.assets)
    extra = [n for n in names if n not in allowed]
    if extra:
        report.add(
            "drift",
            "pointer",
            f"semver release {release.tag} holds {', '.join(extra[:3])}; expected only {sorted(allowed)}",
        )
    elif not names:
        level: Level = "note" if scheme.get("empty_version_allowed") else "drift"
        report.add(
            level,
            "pointer",
            f"semver release {release.tag} holds no {NIGHTLY_TAG_ASSET} (yet, or ever): a release in progress",
        )


def check_pointer_bytes(latest: Release, data: bytes, facts: Facts, report: Report) -> str | None:
    """The pointer's bytes against GitHub's digest for them; returns the build it names."""
    asset = latest.asset(NIGHTLY_TAG_ASSET)
    assert asset is not None
    try:
        published = asset.sha256
    except IntegrityError as exc:
        report.add("drift", "pointer", exc.message)
        return None
    if published is None:
        level: Level = "drift" if facts.pointer.get("pointer_has_digest") else "note"
        report.add(level, "pointer", f"{latest.tag}'s {NIGHTLY_TAG_ASSET} has no published digest")
    elif published != hashlib.sha256(data).hexdigest():
        report.add(
            "drift", "pointer", f"{latest.tag}'s {NIGHTLY_TAG_ASSET} does not match the sha256 GitHub publishes for it"
        )
        return None
    try:
        named = parse_nightly_tag(data, latest.tag)
    except IntegrityError as exc:
        report.add("drift", "pointer", exc.message)
        return None
    report.add("ok", "pointer", f"{latest.tag}'s {NIGHTLY_TAG_ASSET} names {named} and matches its published digest")
    return named


def match_family(name: str, tag: str, facts: Facts) -> tuple[Family, dict[str, str]] | None:
    """The family ``name`` belongs to in build ``tag``, and the toolkit versions it carries."""
    for family in facts.families:
        found = family.regex(tag).match(name)
        if found:
            return family, {k: v for k, v in found.groupdict().items() if v is not None}
    return None


def check_families(release: Release, facts: Facts, report: Report) -> None:
    """Every asset of a known family, read as the facts say; no family missing; companions paired."""
    tag = release.tag
    seen: set[str] = set()
    companions_wanted: set[str] = set()
    for asset in release.assets:
        found = match_family(asset.name, tag, facts)
        if found is None:
            shape = asset.name.replace(tag, "{tag}")
            report.add("drift", "families", f"{tag}: {shape} is a new asset family (not in the facts file)")
            continue
        family, versions = found
        seen.add(family.pattern)
        for key, version in versions.items():
            if version not in facts.toolkits.get(key, ()):
                report.add(
                    "note",
                    "toolkits",
                    f"{tag}: {key} {version} ({asset.name}) is a toolkit bump the facts file does not list",
                )
        _check_parse(asset.name, family, report)
        if family.companion:
            companions_wanted.add(family.fill(family.companion, tag, versions))
    names = {a.name for a in release.assets}
    for family in facts.families:
        if family.pattern not in seen:
            report.add("drift", "families", f"{tag}: no asset of the family {family.pattern}")
    for wanted in sorted(companions_wanted - names):
        report.add("drift", "companions", f"{tag}: the companion {wanted} is missing")
    for name in sorted(names):
        info = parse_asset_name(name)
        if info is not None and info.is_companion and name not in companions_wanted:
            report.add("drift", "companions", f"{tag}: {name} is a companion of no build in the release")
    if len(names) != facts.assets_per_build:
        report.add("note", "families", f"{tag} has {len(names)} assets; the facts file counts {facts.assets_per_build}")
    report.add("ok", "families", f"{tag}: {len(names)} assets read, {len(seen)} of {len(facts.families)} families seen")


def _check_parse(name: str, family: Family, report: Report) -> None:
    """The project's parser reads ``name`` as the facts say (``"any"``: reported only)."""
    info = parse_asset_name(name)
    expected = family.parse
    if expected == "any":
        read = f"{info.platform} {info.backend}" if info else "not understood (not a candidate)"
        report.add("note", "parser", f"{family.pattern}: this version reads it as {read}")
        return
    if expected is None or isinstance(expected, str):
        if info is not None:
            report.add(
                "drift",
                "parser",
                f"{name}: read as a runtime ({info.platform} {info.backend}); the facts say it is none",
            )
        return
    if info is None:
        report.add("drift", "parser", f"{name}: this version does not understand it; the facts expect {dict(expected)}")
        return
    got = {"os": info.os, "arch": info.arch, "backend": info.backend, "companion": info.is_companion}
    wrong = {k: got[k] for k, v in expected.items() if got.get(k, False) != v}
    if wrong:
        report.add("drift", "parser", f"{name}: read with {wrong}; the facts expect {dict(expected)}")


def windows_companions_identical(builds: Sequence[Release], report: Report) -> None:
    """Untagged companions keep their bytes from build to build (12.4-x64 8c79a9b2… from b10015 to b11541)."""
    digests: dict[str, set[str | None]] = {}
    for release in builds:
        for asset in release.assets:
            if asset.name.startswith("cudart-llama-bin-"):
                digests.setdefault(asset.name, set()).add(asset.digest)
    for name, values in sorted(digests.items()):
        if len(values) > 1:
            report.add("note", "companions", f"{name} changed bytes between {', '.join(r.tag for r in builds)}")


# -- signing ------------------------------------------------------------------------------


def compare_signer(
    asset: str, build: int, signer: Signer, facts: Facts, report: Report, *, tagged: bool = True
) -> None:
    """The verified signer against the era(s) the facts give build ``build``.

    An untagged asset (a Windows cudart zip) keeps its bytes from build to build, so
    the API lists every build's attestation of them: one from an earlier era is as good.
    """
    eras = [e for e in facts.eras if e.covers(build) or (not tagged and e.from_build <= build)]
    shown = f"{signer.workflow or signer.build_signer_uri} ({signer.trigger or '?'}, {signer.ref or '?'})"
    if signer.issuer != facts.issuer or signer.repository.casefold() != facts.signing_repository.casefold():
        report.add(
            "drift",
            "signing",
            f"{asset}: signed in {signer.repository} by {signer.issuer}; the facts expect {facts.signing_repository}",
        )
    elif matched := [
        e for e in eras if (e.workflow, e.trigger, e.ref) == (signer.workflow, signer.trigger, signer.ref)
    ]:
        earlier = "" if any(e.covers(build) for e in matched) else " (an earlier build's attestation of the same bytes)"
        report.add("ok", "signing", f"{asset}: signed by {shown}, as the facts expect for b{build}{earlier}")
    else:
        expected = " or ".join(e.describe() for e in eras) or "no era"
        report.add(
            "drift",
            "signing",
            f"{asset}: signed by {shown}, a new signing workflow; the facts expect {expected} for b{build}",
        )


def check_attestation(
    client: GitHubClient,
    asset: Asset,
    build: int,
    check: ProvenanceCheck,
    facts: Facts,
    report: Report,
    *,
    require: bool,
) -> None:
    """Fetch ``asset``'s attestations and verify them through the project's provenance check."""
    try:
        sha256 = asset.sha256
    except IntegrityError as exc:
        report.add("drift", "signing", exc.message)
        return
    if sha256 is None:
        report.add("drift", "signing", f"{asset.name} has no published digest: its attestation cannot be looked up")
        return
    record: dict[str, Any] = {"asset": asset.name, "build": build}
    report.signers.append(record)
    try:
        result = check.evaluate_answer(asset.name, sha256, client.repo, client.attestations(sha256))
    except ProvenanceError as exc:
        record.update(status="refused", reason=exc.message)
        report.add("drift", "signing", f"{asset.name}: the project refuses its attestation: {exc.message}")
        return
    record.update(result.summary())
    if result.status == "absent":
        attested = build >= facts.attested_from_build
        report.add(
            "drift" if attested else "ok",
            "signing",
            f"{asset.name}: {result.reason}"
            + (f" (builds from b{facts.attested_from_build} are attested)" if attested else ""),
        )
    elif result.status == "unverified":
        report.add(
            "drift" if require else "unverified",
            "signing",
            f"{asset.name}: the attestation could not be verified: {result.reason}",
        )
    elif result.signer is not None:
        compare_signer(asset.name, build, result.signer, facts, report, tagged=f"-b{build}-" in asset.name)


def provenance_check(client: GitHubClient, facts: Facts, report: Report) -> ProvenanceCheck:
    """The project's check as an install configures it: the environment's settings, the repository's default branch.

    The signer policy accepts a source ref of the default branch (or a tag); the facts' eras name
    ``refs/heads/<default_branch>``, so a renamed default branch is drift.
    """
    branch = client.repository().trusted_default_branch
    if branch is None:
        report.add("note", "signing", f"{client.repo}'s default branch is unknown; the policy accepts master and main")
    elif branch != facts.default_branch:
        report.add("drift", "signing", f"{client.repo}'s default branch is {branch}, not {facts.default_branch}")
    return ProvenanceCheck.from_env(os.environ).knowing_default_branch(client.repo, branch)


def check_chosen(
    client: GitHubClient, release: Release, facts: Facts, report: Report, check: ProvenanceCheck, *, require: bool
) -> None:
    """What the project chooses for each facts host, with its companions and their attestations."""
    parsed = parse_tag(release.tag).build
    build = parsed if parsed is not None else 0
    checked: set[str] = set()
    for host in facts.hosts:
        label = f"{host['platform']} {host['backend']}"
        try:
            choice = choose_asset(
                release, host_for_platform(host["platform"], host.get("cuda_version")), host["backend"]
            )
        except LlamaRuntimeError as exc:
            report.add("drift", "choice", f"{release.tag}: the project chooses nothing for {label}: {exc.message}")
            continue
        taken = (choice.asset, *choice.extra_assets)
        found = match_family(choice.asset.name, release.tag, facts)
        if found is not None and found[0].companion:
            wanted = found[0].fill(found[0].companion, release.tag, found[1])
            if wanted not in {a.name for a in choice.extra_assets}:
                report.add(
                    "drift",
                    "companions",
                    f"{release.tag}: for {label} the project takes {choice.asset.name} without {wanted}",
                )
        report.add(
            "ok",
            "choice",
            f"{release.tag}: for {label} the project chooses {', '.join(a.name for a in taken)}",
        )
        for asset in taken:
            if asset.name not in checked:
                checked.add(asset.name)
                check_attestation(client, asset, build, check, facts, report, require=require)


# -- the run ------------------------------------------------------------------------------


def resolve(client: GitHubClient, channel: Channel, report: Report) -> ResolvedRelease | None:
    """``channel`` resolved by the project's own code; a failure is drift (the report says why)."""
    try:
        found = client.resolve(channel)
    except (ReleaseNotFoundError, IntegrityError) as exc:
        report.add("drift", "resolution", f"{channel}: the project cannot resolve it: {exc.message}")
        return None
    for note in found.notes:
        report.add("note", "resolution", f"{channel}: {note}")
    report.channels[channel] = {"build": found.build_tag, "version": found.version}
    return found


def observe(client: GitHubClient, facts: Facts, report: Report, *, require: bool) -> None:
    """Every check, in the order a reader follows them."""
    latest = client.latest_published()
    report.stopped = None  # an answer came: from here on a failure is "incomplete", not "offline"
    check_pointer_scheme(latest, client.recent_releases(per_page=_PAGE_SIZE), facts, report)
    pointer = latest.asset(NIGHTLY_TAG_ASSET)
    named = (
        check_pointer_bytes(latest, client.read_small_asset(pointer, MAX_NIGHTLY_TAG_BYTES), facts, report)
        if pointer
        else None
    )
    builds: dict[str, Release] = {}
    for channel in ("stable", "nightly"):
        found = resolve(client, channel, report)
        if found is not None:
            builds.setdefault(found.build_tag, found.release)
    stable = report.channels.get("stable", {}).get("build")
    if named is not None and stable is not None and named != stable:
        report.add("drift", "resolution", f"stable resolved to {stable}, but {latest.tag} names {named}")
    check = provenance_check(client, facts, report)
    for release in builds.values():
        check_families(release, facts, report)
        check_chosen(client, release, facts, report, check, require=require)
    windows_companions_identical(list(builds.values()), report)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`DeadlineExceeded` in this thread after ``seconds``.

    A POSIX interval timer; where there is none (Windows) the per-request timeouts bound the run.
    """
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise DeadlineExceeded

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _offline(exc: NetworkError) -> bool:
    """A transport failure (DNS, refused, unreachable, timeout), not an HTTP answer."""
    return isinstance(exc.__cause__, httpx.TransportError)


def _target(args: argparse.Namespace, facts: Facts) -> tuple[str, str]:
    """The API root and repository to check.

    Raises:
        UserInputError: Not an http(s) URL, or not OWNER/NAME.
    """
    api_url = (args.api_url or os.environ.get("LLAMA_RUNTIME_GITHUB_API", "").strip() or DEFAULT_API_URL).rstrip("/")
    if not api_url.startswith(("https://", "http://")) or not addressable(api_url):
        raise UserInputError(f"Malformed API URL '{api_url}'. Use an http(s):// URL such as {DEFAULT_API_URL}.")
    return api_url, validate_repo(args.repo or facts.repository)


def run(args: argparse.Namespace, facts: Facts) -> Report:
    """Observe upstream within the deadline; the report says how far it got."""
    env = os.environ
    api_url, repo = _target(args, facts)
    report = Report(api_url, repo, str(facts.path), stopped="offline")
    timeout = httpx.Timeout(min(_READ_SECONDS, args.deadline), connect=min(_CONNECT_SECONDS, args.deadline))
    started = time.monotonic()
    with (
        GitHubClient(
            api_url,
            repo,
            token=github_token(env, api_url),
            timeout=timeout,
            attempts=_ATTEMPTS,
            sleep=lambda s: time.sleep(min(s, _MAX_BACKOFF_SECONDS)),
        ) as client,
        deadline(args.deadline),
    ):
        try:
            observe(client, facts, report, require=args.require_provenance)
        except DeadlineExceeded:
            report.stopped = report.stopped or "incomplete"
            report.add("note", "network", f"the {args.deadline:g} s deadline passed before the run finished")
        except NetworkError as exc:
            report.stopped = "offline" if report.stopped == "offline" and _offline(exc) else "incomplete"
            report.add("note", "network", exc.message)
        except UserInputError:
            raise  # a setting of this machine (LLAMA_RUNTIME_TRUSTED_ROOT …): exit 2
        except LlamaRuntimeError as exc:  # a rate limit, a refusal, malformed data: not drift, not done
            report.stopped = "incomplete"
            report.add("note", "network", exc.message)
    report.add("note" if report.stopped else "ok", "network", f"finished in {time.monotonic() - started:.1f} s")
    return report


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="canary.py", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--api-url", help=f"GitHub API root (default: $LLAMA_RUNTIME_GITHUB_API or {DEFAULT_API_URL})")
    parser.add_argument("--repo", help="OWNER/NAME to check (default: the facts file's repository)")
    parser.add_argument("--facts", type=Path, default=FACTS_FILE, help="the expected-facts file (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--require-provenance", action="store_true", help="an attestation that cannot be verified is drift"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_SECONDS,
        help="seconds for the whole run (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.deadline <= 600:
        parser.error(f"--deadline {args.deadline:g} is out of range; give 1 to 600 seconds")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the canary; returns the exit code."""
    args = parse_args(argv)
    try:
        report = run(args, load_facts(args.facts))
    except UserInputError as exc:
        print(f"canary: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(report.to_json(), indent=2) if args.json else report.to_text())
    return report.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
