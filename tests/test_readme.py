"""The README as a newcomer meets it: its walkthrough runs as written, every command in it parses.

The walkthrough block (marked ``<!-- walkthrough``) runs in bash after the setup block's activation line
(which puts ``llama-runtime`` on ``PATH``; nothing else does),
``HOME`` a temporary directory (so the default home is used, as a new user's would be) holding the
tests' tiny model at ``~/models/model.gguf``, and ``LLAMA_RUNTIME_GITHUB_API`` naming the local
GitHub-like server that publishes the real build; only the port is substituted (8080 may be taken).
Scheduler recipes cannot run on Linux CI, so they are parsed: the plist with ``plistlib``, the systemd
units with ``systemd-analyze --user verify`` where it is installed (an ini parse elsewhere), and the
command each scheduler runs with llama-runtime's own parser.
"""

from __future__ import annotations

import configparser
import json
import os
import plistlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from llama_runtime.updater.cli.main import build_parser
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, assert_runs, real_build
from tests.tinymodel import write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The walkthrough starts a real server on a model and waits for its health (generous on a loaded CI box).
WALKTHROUGH_TIMEOUT_SECONDS = 300
#: Words after which the shell, not llama-runtime, reads the rest of a line.
SHELL_OPERATORS = frozenset({"|", "||", "&&", ";", ">", ">>", "<", "&", "(", ")"})


@dataclass(frozen=True)
class Block:
    """A fenced block of the README and the ``<!-- … -->`` marker just above it, if any."""

    lang: str
    body: str
    marker: str


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    lines = README.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            end = lines.index("```", index + 1)
            previous = lines[index - 1] if index else ""
            marker = previous[4:-3].strip() if previous.startswith("<!--") else ""
            blocks.append(Block(line[3:].strip(), "\n".join(lines[index + 1 : end]), marker))
            index = end
        index += 1
    return blocks


def marked(prefix: str) -> Block:
    found = [block for block in readme_blocks() if block.marker.startswith(prefix)]
    assert len(found) == 1, f"the README has one block marked {prefix!r}"
    return found[0]


def shell_words(line: str) -> list[str]:
    """A shell line's words, operators (``>``, ``&&``, ``|``) split off, comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def is_llama_runtime(word: str) -> bool:
    return word == "llama-runtime" or word.endswith(("/llama-runtime", "\\llama-runtime.exe"))


def llama_runtime_commands(words: list[str]) -> list[list[str]]:
    """The arguments of each ``llama-runtime`` command (by name or path) in a shell line's words."""
    commands: list[list[str]] = []
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in SHELL_OPERATORS:
            segment.append(word)
            continue
        while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
            segment.pop(0)  # VAR=value before a command
        if segment and is_llama_runtime(segment[0]):
            commands.append(segment[1:])
        segment = []
    return commands


def llama_runtime_words(words: list[str]) -> list[str] | None:
    """The arguments of the one ``llama-runtime`` command of a line, if it has one."""
    commands = llama_runtime_commands(words)
    assert len(commands) <= 1, words
    return commands[0] if commands else None


def readme_commands() -> list[list[str]]:
    """Every llama-runtime command line of the README: shell blocks line by line, and inline code."""
    commands: list[list[str]] = []
    for block in readme_blocks():
        if block.lang == "sh":
            for line in block.body.splitlines():
                commands += llama_runtime_commands(shell_words(line))
    prose = re.sub(r"```.*?```", "", README.read_text(), flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if span.startswith("llama-runtime "):
            commands += llama_runtime_commands(shell_words(span))
    return commands


def assert_parses(words: list[str]) -> None:
    """llama-runtime's own parser takes the words (``--`` and after belong to llama-server)."""
    ours = words[: words.index("--")] if "--" in words else words
    args = build_parser().parse_args(ours)
    assert args.command, words


def test_every_llama_runtime_command_in_the_readme_parses() -> None:
    commands = readme_commands()
    assert len(commands) >= 15, "the README's commands were found"
    for words in commands:
        assert_parses(words)


def test_a_mistyped_command_is_caught_by_the_parse() -> None:
    from llama_runtime import UserInputError

    with pytest.raises(UserInputError):
        assert_parses(["update", "--tagg", "b7000"])


def test_every_shell_block_of_the_readme_is_valid_bash() -> None:
    for block in readme_blocks():
        if block.lang == "sh":
            result = subprocess.run(["bash", "-n"], input=block.body, text=True, capture_output=True)
            assert result.returncode == 0, (block.body, result.stderr)


# -- the scheduler recipes ------------------------------------------------------------------------------


def test_the_cron_line_is_five_fields_and_a_check_that_parses() -> None:
    line = marked("recipe: cron").body.strip()
    fields = line.split(None, 5)
    assert fields[0] == "17" and fields[1:5] == ["*", "*", "*", "*"]
    words = llama_runtime_words(shell_words(fields[5]))
    assert words is not None and words[:2] == ["check", "--apply"]
    assert_parses(words)


def test_the_launchd_plist_parses_and_runs_a_check() -> None:
    plist = plistlib.loads(marked("recipe: launchd").body.encode())
    assert plist["Label"] == "org.llama-runtime.check"
    program = plist["ProgramArguments"]
    assert program[0].startswith("/") and "~" not in program[0], "launchd expands no ~"
    assert_parses(program[1:])
    assert plist["StartInterval"] == 3600
    assert all(isinstance(value, str) for value in plist["EnvironmentVariables"].values())


def test_the_task_scheduler_command_runs_a_waiting_check_whether_or_not_logged_on() -> None:
    line = marked("recipe: schtasks").body.strip()
    words = shlex.split(line)  # cmd.exe's quoting: \" is a quote inside quotes, other backslashes are kept
    assert words[:2] == ["schtasks", "/Create"]
    options: dict[str, str] = {}
    for index, word in enumerate(words[2:], start=2):
        if word.startswith("/"):
            following = words[index + 1] if index + 1 < len(words) else "/"
            options[word] = "" if following.startswith("/") else following
    assert options["/SC"] == "HOURLY" and "/RU" in options, "a task that runs whether or not the user is logged on"
    task = llama_runtime_words(shlex.split(options["/TR"]))
    assert task is not None and "--wait" in task, "waits instead of ending busy (exit 3 reads as a failure)"
    assert_parses(task)


def systemd_units(tmp_path: Path) -> list[Path]:
    paths = []
    for block in readme_blocks():
        if block.marker.startswith("recipe: systemd "):
            path = tmp_path / block.marker.split()[-1]
            path.write_text(block.body + "\n")
            paths.append(path)
    assert sorted(p.suffix for p in paths) == [".service", ".timer"]
    return paths


def test_the_systemd_units_run_a_check_that_parses(tmp_path: Path) -> None:
    service = next(p for p in systemd_units(tmp_path) if p.suffix == ".service")
    unit = configparser.ConfigParser(interpolation=None)
    unit.read_string(service.read_text())
    words = llama_runtime_words(shlex.split(unit["Service"]["ExecStart"]))
    assert words is not None
    assert_parses(words)
    assert unit["Service"]["SuccessExitStatus"] == "3"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = systemd_units(tmp_path)
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "llama-runtime").symlink_to(Path(sys.executable).with_name("llama-runtime"))
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime_dir)}
    result = subprocess.run(
        ["systemd-analyze", "--user", "verify", *map(str, units)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# -- the walkthrough ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: The venv's own command, for the test's clean-up (the walkthrough itself finds it through the README's activation).
CLI = str(Path(sys.executable).parent / "llama-runtime")


def activation_line() -> str:
    """The setup block's line that puts ``llama-runtime`` on ``PATH``, with the checkout's venv as the README's."""
    line = next(line for line in marked("setup").body.splitlines() if ". .venv/bin/activate" in line)
    assert line.startswith("python3 -m venv .venv && . .venv/bin/activate &&"), line  # the first command activates
    return f". {sys.prefix}/bin/activate"


def walkthrough_env(home: Path, api_url: str) -> dict[str, str]:
    """A newcomer's shell: no llama-runtime on PATH until the README's activation line runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_RUNTIME_", "XDG_", "VIRTUAL_ENV"))}
    env.pop("LLAMA_SERVER_PATH", None)
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        HOME=str(home),
        PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin),
        LLAMA_RUNTIME_GITHUB_API=api_url,
        GGML_VK_VISIBLE_DEVICES="0",  # llama.cpp lists Mesa's software Vulkan device only when told
    )
    return env


def test_the_walkthrough_runs_as_written_to_a_running_model(
    github: FakeGitHub, real_vulkan_tarball: Path, tmp_path: Path
) -> None:
    real_build()  # skips where the real build cannot run
    # The real build under both Linux x64 names: whichever `auto` picks on this host is the real binary.
    github.add_release(
        REPO,
        "b7000",
        {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball, CPU_TAR.format(tag="b7000"): real_vulkan_tarball},
    )
    home = tmp_path / "user"
    (home / "models").mkdir(parents=True)
    write_tiny_llama(home / "models" / "model.gguf")
    port = free_port()
    script = activation_line() + "\n" + marked("walkthrough").body.replace("8080", str(port))
    env = walkthrough_env(home, github.api_url)
    try:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-xc", script],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=WALKTHROUGH_TIMEOUT_SECONDS,
        )
    finally:
        subprocess.run([CLI, "server", "stop"], env=env, capture_output=True, timeout=60)
    print(result.stderr, result.stdout, sep="\n")  # the note pastes this (pytest -s)
    assert result.returncode == 0, result.stderr + result.stdout
    assert '"status":"ok"' in result.stdout.replace(" ", "")
    data_home = home / ".local" / "share" / "llama-runtime"
    status = subprocess.run([CLI, "status", "--json"], env=env, capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    active = json.loads(status.stdout)["active"]
    assert active["tag"] == "b7000" and Path(active["binary"]).is_relative_to(data_home), "the default home"
    assert_runs(Path(active["binary"]))


def test_every_relative_link_of_the_readme_and_docs_names_a_file_that_exists() -> None:
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}"


def test_the_embedding_example_runs_against_a_local_server(
    github: FakeGitHub, real_vulkan_tarball: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_build()
    github.add_release(REPO, "b7000", {VULKAN_TAR.format(tag="b7000"): real_vulkan_tarball})
    for name in [n for n in os.environ if n.startswith("LLAMA_RUNTIME_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LLAMA_RUNTIME_GITHUB_API", github.api_url)
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    calls: dict[str, list[tuple[object, ...]]] = {}

    def recorder(name: str) -> object:
        return lambda *args: calls.setdefault(name, []).append(args)

    block = next(b for b in readme_blocks() if b.lang == "python")
    names = {n: recorder(n) for n in ("start_server", "show", "show_done", "show_error", "log")}
    exec(compile(block.body, "README.md", "exec"), names)
    assert "start_server" not in calls, "nothing was installed at start-up"
    assert calls["show_done"] == [("b7000", ())], calls
    assert calls["show"], "the job reported progress"
    assert "show_error" not in calls and "log" not in calls, calls
    assert names["result"].applied is False and names["result"].update_available is False  # type: ignore[attr-defined]
    assert_runs(Path(names["updater"].ensure().binary))  # type: ignore[attr-defined]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_example_is_valid_javascript(tmp_path: Path) -> None:
    block = next(b for b in readme_blocks() if b.lang == "js")
    path = tmp_path / "excerpt.mjs"
    path.write_text(block.body)
    result = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def inline_commands(program: str) -> list[list[str]]:
    """The README's inline code and shell lines that run ``program``, as words."""
    text = README.read_text()
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    lines = [line for block in readme_blocks() if block.lang == "sh" for line in block.body.splitlines()]
    found = []
    for candidate in spans + lines:
        words = shell_words(candidate.replace("$(id -u)", "UID").replace("$USER", "USER"))
        if words and words[0] == program:
            found.append(words)
    return found


def test_the_scheduler_and_uninstall_commands_name_what_the_recipes_and_the_package_define() -> None:
    import tomllib

    distribution = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    timer = next(b.marker.split()[-1] for b in readme_blocks() if b.marker.endswith(".timer"))
    label = plistlib.loads(marked("recipe: launchd").body.encode())["Label"]
    task = shlex.split(marked("recipe: schtasks").body)[shlex.split(marked("recipe: schtasks").body).index("/TN") + 1]
    systemctl = inline_commands("systemctl")
    assert ["systemctl", "--user", "enable", "--now", timer] in systemctl
    assert ["systemctl", "--user", "disable", "--now", timer] in systemctl
    assert ["loginctl", "enable-linger", "USER"] in inline_commands("loginctl")
    launchctl = inline_commands("launchctl")
    assert ["launchctl", "bootstrap", "gui/UID", f"~/Library/LaunchAgents/{label}.plist"] in launchctl
    assert ["launchctl", "bootout", f"gui/UID/{label}"] in launchctl
    assert ["schtasks", "/Delete", "/TN", task] in inline_commands("schtasks")
    assert ["pipx", "uninstall", distribution] in inline_commands("pipx")
    assert ["pipx", "install", "."] in inline_commands("pipx")
