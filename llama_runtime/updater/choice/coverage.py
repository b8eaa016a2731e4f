"""Which GPUs a fork's bundle was compiled for, from its release manifest (pure, no IO).

The rules are Unsloth Studio's (``linux_cuda_choice_from_release`` in its
installer), applied to the facts the fork publishes
(:mod:`updater.sources.build_manifest`):

* A CUDA bundle runs here only if **every** visible GPU's SM is in its
  ``supported_sms`` and inside ``[min_sm, max_sm]``. A bundle whose manifest
  entry gives no coverage is not taken: coverage unknown is not "covers all".
* When the host's compute capabilities are unknown, only the ``portable``
  bundle (compiled for every GPU the line supports) is taken.
* Among bundles that cover the host: targeted ones first, tightest SM range,
  then the fork's ``rank``, then the lower ``max_sm``; ``portable`` last.
* A ROCm bundle holds exactly its ``mapped_targets`` (or its family's members):
  a prefix is not a family.

Examples from the fork's live manifest (profiles as the fork lists them):
``cuda12-legacy`` holds sm_50–61, ``cuda12-older`` sm_70–89, ``cuda12-newer``
sm_86–120, ``cuda12-portable`` sm_70–120. A Pascal card (sm_61) gets
``legacy``, never ``portable``; a Blackwell card (sm_120) never gets ``older``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from llama_runtime.updater.choice.facts import gfx_family_members

if TYPE_CHECKING:
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.sources.build_manifest import ArtifactFacts

_CAPABILITY: Final = re.compile(r"^\s*(\d{1,2})\.(\d)\s*$")
#: Sort key of a bundle that covers the host: (portable last, SM span, rank, max SM).
CoverageKey = tuple[int, int, int, int]


def host_sms(host: HostFacts) -> tuple[int, ...]:
    """The SM number of every visible NVIDIA GPU (compute capability 8.6 -> 86), sorted; ``()`` if unknown."""
    caps = host.compute_capabilities or ((host.compute_capability,) if host.compute_capability else ())
    found = {int(m[1]) * 10 + int(m[2]) for c in caps if (m := _CAPABILITY.match(c))}
    return tuple(sorted(found))


def _span(artifact: ArtifactFacts) -> str:
    if artifact.min_sm is not None and artifact.max_sm is not None:
        return f"sm_{artifact.min_sm}–sm_{artifact.max_sm}"
    return "an unstated SM range"


def _label(artifact: ArtifactFacts) -> str:
    return artifact.bundle_profile or artifact.coverage_class or "this"


def cuda_coverage(artifact: ArtifactFacts, host: HostFacts) -> tuple[CoverageKey | None, str]:
    """Whether the CUDA bundle ``artifact`` covers every GPU of ``host``.

    Returns:
        ``(sort key, why)``; a ``None`` key means the bundle cannot run here.
    """
    sms, label = host_sms(host), _label(artifact)
    if not sms:
        if artifact.portable:
            return (1, 0, artifact.rank, 0), f"usable: {label} is the portable bundle (compute capability unknown)"
        return None, (
            f"the {label} bundle covers only {_span(artifact)} and this GPU's compute capability "
            "is unknown; only the portable bundle is taken then"
        )
    low, high = artifact.min_sm, artifact.max_sm
    if not artifact.supported_sms or low is None or high is None:
        return None, f"the release manifest gives the {label} bundle no SM coverage"
    missing = [sm for sm in sms if sm not in artifact.supported_sms or not low <= sm <= high]
    if missing:
        compiled = ", ".join(f"sm_{s}" for s in artifact.supported_sms)
        return None, (
            f"the {label} bundle is compiled for {compiled} only, not for "
            f"{', '.join(f'sm_{s}' for s in missing)} (release manifest)"
        )
    key = (1 if artifact.portable else 0, high - low, artifact.rank, high)
    gpus = ", ".join(f"sm_{s}" for s in sms)
    return key, f"usable: the release manifest says {label} ({_span(artifact)}) covers {gpus}"


def rocm_targets(artifact: ArtifactFacts) -> tuple[str, ...]:
    """The gfx targets a ROCm bundle holds: its ``mapped_targets``, else its family's members."""
    if artifact.mapped_targets:
        return artifact.mapped_targets
    label = (artifact.gfx_target or "").lower()
    return gfx_family_members(label) or ((label,) if label else ())


__all__ = ["CoverageKey", "cuda_coverage", "host_sms", "rocm_targets"]
