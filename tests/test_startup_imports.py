"""Start-up stays light: ``from llama_runtime import RuntimeUpdater`` and ``ensure()`` import none of
the modules that only a check or an update needs (the list scripts/bench_startup.py times against).

A merge of modules can pull a heavy import onto this path without any behaviour changing (one did:
process identity merged beside the health probe brought ``http.client`` to every app's start-up),
so the set is checked here, in a fresh interpreter, not only in the benchmark.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llama_runtime.runtime.sandbox import detect_sandbox

ROOT = Path(__file__).resolve().parent.parent


def bench_startup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_startup", ROOT / "scripts" / "bench_startup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("installed", [True, False], ids=["accepted runtime", "nothing installed"])
def test_public_api_and_ensure_import_no_deferred_module(tmp_path: Path, installed: bool) -> None:
    bench = bench_startup()
    home = tmp_path / "home"
    if installed:
        bench.seed_home(home)  # the pointer, the marker, the binary and the trust record ensure() checks
    bench.seed_finished_job(home)  # ensure() reads the last job's record on every start
    code = bench.REPORT.format(deferred=bench.DEFERRED)
    if not installed:
        code = code.replace("assert ready.ready, ready.problem\n", "assert ready.code == 'nothing_installed'\n")
    argv = [sys.executable, "-c", code, str(home)]
    if installed:  # the first start records the files' stat fingerprints (a write); every later one only reads
        subprocess.run(argv, capture_output=True, text=True, check=False)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


#: What ``status --json`` may import of this package: reading the home, the pointer, the marker and the
#: lock's probe, and the command line (its own command's module: no other command's parser is built).
#: A module added here is a cost every ``status`` pays (the benchmark's (e) and scripts/bench_status.py
#: time it); one missing from here fails this test.
STATUS_MODULES = frozenset(
    {
        "llama_runtime",
        "llama_runtime._version",
        "llama_runtime.errors",
        "llama_runtime.runtime",
        "llama_runtime.runtime.binary",
        "llama_runtime.runtime.clock",
        "llama_runtime.runtime.diskuse",
        "llama_runtime.runtime.errors",
        "llama_runtime.runtime.failed_builds",
        "llama_runtime.runtime.fingerprint",
        "llama_runtime.runtime.fsutil",
        "llama_runtime.runtime.inference",
        "llama_runtime.runtime.layout",
        "llama_runtime.runtime.lock",
        "llama_runtime.runtime.marker",
        "llama_runtime.runtime.pin",
        "llama_runtime.runtime.sandbox",  # status names the level a new build's first runs get
        "llama_runtime.runtime.trust",  # the active runtime is checked against its trust record
        "llama_runtime.runtime.spans",
        "llama_runtime.runtime.trial",
        "llama_runtime.updater",
        "llama_runtime.updater.api",
        "llama_runtime.updater.api.boundary",
        "llama_runtime.updater.api.inventory",
        "llama_runtime.updater.api.ready",
        "llama_runtime.updater.api.service",
        "llama_runtime.updater.api.vocabulary",
        "llama_runtime.updater.cli",
        "llama_runtime.updater.cli.common",
        "llama_runtime.updater.cli.gateopts",
        "llama_runtime.updater.cli.main",
        "llama_runtime.updater.cli.output",
        "llama_runtime.updater.cli.status",
        "llama_runtime.updater.cli.watchdog",
        "llama_runtime.updater.config",
        "llama_runtime.updater.credentials",
        "llama_runtime.updater.logs",
        "llama_runtime.updater.net",
        "llama_runtime.updater.net.origin",
        "llama_runtime.updater.verify",
        "llama_runtime.updater.verify.measures",
    }
)
#: Never on ``status``'s path: the network (and its TLS context), logging's configuration, process
#: control, the release model, the inflater, the sandbox's tools, the composition root.
STATUS_DEFERRED = (
    "llama_runtime.updater.engine",
    "llama_runtime.runtime.snapshot",
    "httpx",
    "ssl",
    "certifi",
    "structlog",
    "filelock",
    "subprocess",
    "psutil",
    "packaging",
    "tempfile",
    "isal",
    "sigstore",
)

STATUS = """
import json, sys
from llama_runtime.updater.cli.main import main
code = main(["status", "--json"])
print(json.dumps({{"code": code, "ours": sorted(m for m in sys.modules if m.startswith("llama_runtime")),
    "deferred": sorted(m for m in {deferred!r} if m in sys.modules), "ctypes": "ctypes" in sys.modules}}),
    file=sys.stderr)
"""


def test_status_imports_only_the_listed_modules_and_no_deferred_one(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_status", ROOT / "scripts" / "bench_status.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    home = tmp_path / "home"
    bench.seed_home(home)
    env = {"PATH": "/usr/bin:/bin", "LLAMA_RUNTIME_HOME": str(home), "LLAMA_RUNTIME_GITHUB_API": "http://127.0.0.1:9"}
    code = STATUS.format(deferred=STATUS_DEFERRED)
    # The first status records the binary's stat fingerprint (a write); every later one only reads.
    argv = [sys.executable, "-c", code]
    subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, done.stdout
    assert report["deferred"] == []
    if detect_sandbox({"PATH": env["PATH"]}).level == "bubblewrap":
        assert not report["ctypes"]  # Landlock's ABI is asked for only where bubblewrap cannot be used
    assert sorted(set(report["ours"]) - STATUS_MODULES) == []


def test_every_command_is_mapped_to_the_module_that_adds_it() -> None:
    from llama_runtime.updater.cli.main import COMMAND_MODULE_OF, build_parser

    every = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(COMMAND_MODULE_OF) == sorted(every or ())
    for command in COMMAND_MODULE_OF:
        alone = build_parser(only=command)._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        assert command in (alone or ()), command


def test_command_named_finds_the_command_only_where_argparse_reads_the_same_one() -> None:
    from llama_runtime.updater.cli.main import command_named

    assert command_named(["status", "--json"]) == "status"
    assert command_named(["--json", "-v", "--home", "/h", "--api-url=x", "update", "--tag", "b1"]) == "update"
    assert command_named(["--home", "status", "list"]) == "list"  # a global option's value is no command
    assert command_named(["--hom", "list", "status"]) is None  # an abbreviation: argparse decides
    assert command_named(["-vv", "status"]) == "status"
    assert command_named(["-vq", "status"]) is None  # a cluster of short flags: argparse decides
    assert command_named(["--help"]) is None
    assert command_named(["bogus"]) is None
    assert command_named([]) is None
