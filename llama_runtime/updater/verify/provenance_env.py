"""The signer opt-ins of the environment, parsed and checked (pure).

``LLAMA_RUNTIME_PROVENANCE_WORKFLOW`` pins the signing workflow of one
repository, ``owner/name=.github/workflows/x.yml``, several separated by
commas; a bare ``.github/workflows/x.yml`` is the deprecated form (a pin for
every fork, never for upstream). ``LLAMA_RUNTIME_PROVENANCE_SIGNER`` lets a
reusable workflow of another repository sign for one repository,
``owner/name=signer-owner/signer-name/.github/workflows/x.yml``.

Invariant: a value that is not of these forms is bad input (exit 2) naming the
valid form, never a policy that silently accepts more or less than asked.
"""

from __future__ import annotations

import re
from typing import Final

from llama_runtime.runtime.errors import UserInputError

__all__ = ["parse_signers", "parse_workflows"]

# GitHub's own name rules: an owner is letters, digits and inner hyphens (at most 39);
# a repository name letters, digits, '.', '-' and '_' (not '.' or '..').
_REPO: Final = r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?(?:$|/|=))[A-Za-z0-9._-]{1,100}"
# Workflows live in .github/workflows/ as .yml or .yaml files (GitHub docs, "Workflow syntax").
_WORKFLOW: Final = r"\.github/workflows/[A-Za-z0-9._-]+\.ya?ml"
_REPO_RE: Final = re.compile(rf"^{_REPO}$")
_WORKFLOW_RE: Final = re.compile(rf"^{_WORKFLOW}$")
_SIGNER_RE: Final = re.compile(rf"^{_REPO}/{_WORKFLOW}$")
_WORKFLOW_FORM: Final = (
    "LLAMA_RUNTIME_PROVENANCE_WORKFLOW=OWNER/NAME=.github/workflows/FILE.yml (several separated by commas)"
)
_SIGNER_FORM: Final = (
    "LLAMA_RUNTIME_PROVENANCE_SIGNER=OWNER/NAME=SIGNER-OWNER/SIGNER-NAME/.github/workflows/FILE.yml "
    "(several separated by commas)"
)


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _pair(item: str, right: re.Pattern[str], form: str, env: str) -> tuple[str, str]:
    repo, _, target = (part.strip() for part in item.partition("="))
    if not _REPO_RE.match(repo) or not right.match(target):
        raise UserInputError(f"{env} has {item!r}, which is not of the form {form}.")
    return repo.casefold(), target


def parse_workflows(value: str) -> tuple[str | None, dict[str, str]]:
    """The bare (deprecated) workflow pin and the per-repository pins of ``value``.

    Raises:
        UserInputError: An item is neither ``owner/name=path`` nor a bare path,
            two bare paths are given, or one repository is pinned twice.
    """
    env = "LLAMA_RUNTIME_PROVENANCE_WORKFLOW"
    bare: str | None = None
    pins: dict[str, str] = {}
    for item in _items(value):
        if "=" not in item:
            if not _WORKFLOW_RE.match(item) or bare is not None:
                raise UserInputError(f"{env} has {item!r}, which is not of the form {_WORKFLOW_FORM}.")
            bare = item
            continue
        repo, workflow = _pair(item, _WORKFLOW_RE, _WORKFLOW_FORM, env)
        if repo in pins:
            raise UserInputError(f"{env} pins {repo} twice; give one workflow per repository ({_WORKFLOW_FORM}).")
        pins[repo] = workflow
    return bare, pins


def parse_signers(value: str) -> dict[str, str]:
    """The reusable-workflow opt-ins of ``value``: casefolded ``owner/name`` -> ``o/n/.github/workflows/x.yml``.

    Raises:
        UserInputError: An item is not ``owner/name=o/n/.github/workflows/x.yml``,
            or one repository is named twice.
    """
    env = "LLAMA_RUNTIME_PROVENANCE_SIGNER"
    signers: dict[str, str] = {}
    for item in _items(value):
        repo, signer = _pair(item, _SIGNER_RE, _SIGNER_FORM, env)
        if repo in signers:
            raise UserInputError(f"{env} names {repo} twice; give one signer per repository ({_SIGNER_FORM}).")
        signers[repo] = signer
    return signers
