"""The import name is llama_runtime: packaging lists every package, and apps' own modules never collide."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = {"llama_runtime": ROOT / "llama_runtime"}


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
    assert "package-dir" not in config  # the checkout is laid out as installed: no mapping, no import hook


def test_checkout_has_the_installed_shape_and_the_design_cards_folders_as_links() -> None:
    """The source is llama_runtime/{updater,runtime}; the top-level updater/ and runtime/ link to it."""
    for name in ("updater", "runtime"):
        link = ROOT / name
        assert link.is_symlink(), f"{link} must be a symbolic link (on Windows: git clone -c core.symlinks=true)"
        assert link.resolve() == (ROOT / "llama_runtime" / name).resolve()
        assert not (ROOT / "llama_runtime" / name).is_symlink()
    tracked = subprocess.run(
        ["git", "ls-files", "-s", "updater", "runtime"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if tracked.returncode == 0 and tracked.stdout:  # a git checkout (not an sdist): committed as links
        assert [line.split()[0] for line in tracked.stdout.splitlines()] == ["120000", "120000"]


def test_source_folders_imported_top_level_fail_with_a_message_instead_of_a_second_copy() -> None:
    for name in ("updater", "runtime"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert done.returncode != 0
        assert f"import llama_runtime.{name} instead" in done.stderr, done.stderr


def test_one_copy_of_each_class_however_it_is_imported() -> None:
    probe = (
        "import llama_runtime, llama_runtime.runtime.errors as e, importlib;"
        "m = importlib.import_module('llama_runtime.updater.engine');"
        "print(llama_runtime.LlamaRuntimeError is e.LlamaRuntimeError, m.__file__)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT.parent, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    same, path = done.stdout.split()
    assert same == "True"
    assert Path(path) == ROOT / "llama_runtime" / "updater" / "engine.py"


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


def test_metadata_builds_without_deprecation_warnings_and_carries_the_spdx_license(tmp_path: Path) -> None:
    """`license = { text = "MIT" }` drew setuptools' "stops building after 2027-02-18" warning."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT" and project["project"]["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project["project"].get("classifiers", []))
    (requirement,) = project["build-system"]["requires"]
    assert requirement.startswith("setuptools>=77") and ",<" in requirement  # PEP 639 support, and bounded
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(ROOT / "llama_runtime", source / "llama_runtime", ignore=shutil.ignore_patterns("__pycache__"))
    probe = (
        "import sys, warnings; warnings.simplefilter('always');"
        "from setuptools import build_meta;"
        "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], cwd=source, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Deprecat" not in done.stderr + done.stdout, done.stderr
    metadata = (tmp_path / done.stdout.split()[-1] / "METADATA").read_text()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert "Name: llama-runtime-updater" in metadata
    # The version is the package's own constant, which the CLI and the User-Agent read without metadata.
    from llama_runtime import __version__

    assert f"Version: {__version__}\n" in metadata


def test_readme_names_the_distribution_the_command_and_how_to_uninstall() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "`llama-runtime-updater`" in readme and "`llama-runtime`" in readme
    assert "uninstall llama-runtime-updater" in readme
