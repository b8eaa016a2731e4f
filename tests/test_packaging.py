"""The import name is llama_runtime: packaging lists every package, and apps' own modules never collide."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = {
    "llama_runtime": ROOT / "llama_runtime",
    "llama_runtime.updater": ROOT / "updater",
    "llama_runtime.runtime": ROOT / "runtime",
}


def _source_packages() -> set[str]:
    found: set[str] = set()
    for name, folder in SOURCE_ROOTS.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder).parts
            found.add(".".join((name, *relative)))
    return found


def test_pyproject_lists_every_package_folder() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _source_packages()
    assert config["package-dir"] == {name: str(path.relative_to(ROOT)) for name, path in SOURCE_ROOTS.items()}


def test_app_with_its_own_updater_and_runtime_modules_embeds_the_library(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "updater.py").write_text("raise ImportError('the app updater, not ours')\n")
    (app / "runtime.py").write_text("raise ImportError('the app runtime, not ours')\n")
    (app / "main.py").write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from llama_runtime import BusyError, LlamaRuntimeError, RuntimeUpdater\n"
        "ready = RuntimeUpdater(Path(sys.argv[1])).ensure()\n"
        "assert issubclass(BusyError, LlamaRuntimeError)\n"
        "print('ready' if ready.ready else 'not-ready')\n"
    )
    done = subprocess.run(
        [sys.executable, "main.py", str(tmp_path / "home")], cwd=app, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "not-ready"


def test_unknown_public_name_is_an_attribute_error() -> None:
    import llama_runtime

    try:
        llama_runtime.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("llama_runtime.NoSuchThing resolved")
