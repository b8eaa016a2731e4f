"""What does checking build provenance add to an install, in time?

Measures, in the same run (so machine load affects all alike), N times each:

* ``python -c pass`` against ``python -c "import sigstore's verifier"``: the
  import an install pays once when an attestation has to be checked;
* one verification of a real Sigstore bundle (tests/data/sigstore, offline,
  against the staging trust root file): loading the root and every check.

``status`` never pays either (tests/test_provenance.py asserts that sigstore is
not imported there; scripts/bench_status.py measures status itself).

Usage: python scripts/bench_provenance.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

#: Enough runs that one cold start does not move the median.
DEFAULT_RUNS: Final[int] = 11
DATA: Final = Path(__file__).resolve().parent.parent / "tests" / "data" / "sigstore"
IMPORT: Final = "import llama_runtime.updater.verify.signer, sigstore.verify, sigstore.models"


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def verify_seconds(runs: int) -> list[float]:
    from llama_runtime.updater.verify.provenance import ProvenanceCheck

    bundle = json.loads((DATA / "a.dsse.staging-rekor-v2.txt.sigstore.json").read_text())
    check = ProvenanceCheck(
        workflow=".github/workflows/extremely-dangerous-oidc-beacon.yml",
        trusted_root=DATA / "staging_trusted_root.json",
    )
    repo = "sigstore-conformance/extremely-dangerous-public-oidc-beacon"
    subject = "a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"
    check.evaluate("a.txt", subject, repo, [bundle])  # warm: imports happen here, not below
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        assert check.evaluate("a.txt", subject, repo, [bundle]).status == "verified"
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    args = parser.parse_args()
    bare_argv, import_argv = [sys.executable, "-c", "pass"], [sys.executable, "-c", IMPORT]
    time_once(import_argv)  # warm the page cache and .pyc files
    bare: list[float] = []
    imported: list[float] = []
    for _ in range(args.runs):
        bare.append(time_once(bare_argv))
        imported.append(time_once(import_argv))
    bare_ms = statistics.median(bare) * 1000
    import_ms = statistics.median(imported) * 1000
    verify_ms = statistics.median(verify_seconds(args.runs)) * 1000
    print(f"python -c pass:                 median {bare_ms:7.1f} ms over {args.runs} runs")
    print(f"python -c 'import sigstore…':   median {import_ms:7.1f} ms  (+{import_ms - bare_ms:.1f} ms)")
    print(f"one bundle verified (offline):  median {verify_ms:7.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
