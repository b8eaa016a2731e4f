"""docs/cli-contract.md and docs/schemas/ cannot drift from the code.

* every command in the contract exists in the parser, and every parser command is in the contract;
* every flag in the configuration table exists (or is marked *planned* and does not exist yet);
* every key in the JSON table is required by that command's schema, and real ``--json`` output of
  every command validates against its schema (so every documented key is really there);
* the README links docs/, never ../shared (a user's clone has no ../shared).
* docs/api.md's exception tree and table name every exported exception under its real base.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from llama_runtime.updater.cli.main import build_parser
from tests.fakegithub import FakeGitHub
from tests.helpers import publish_stand_in, run_json

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "cli-contract.md"
SCHEMAS = ROOT / "docs" / "schemas"


def table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table under ``## heading``, header and rule excluded."""
    text = CONTRACT.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[2:]]


def ticks(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def parser_commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def all_flags() -> set[str]:
    """Option strings of the top level and of every command (some options belong to a few commands)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parsers = [parser, *sub.choices.values()]
    return {flag for p in parsers for action in p._actions for flag in action.option_strings}


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return loaded


def registry() -> Registry[Any]:
    resources = [
        (s["$id"], Resource.from_contents(s))
        for s in map(schema, (p.stem.split(".")[0] for p in SCHEMAS.glob("*.json")))
    ]
    return Registry().with_resources(resources)


def validate(name: str, payload: object) -> None:
    jsonschema.Draft202012Validator(schema(name), registry=registry()).validate(payload)


# -- the document against the parser ------------------------------------------------------------


def test_every_documented_command_exists_and_every_command_is_documented() -> None:
    documented = {ticks(row[0])[0].split()[0] for row in table("Commands")}
    assert documented == parser_commands()


def test_every_configuration_flag_exists_unless_it_is_marked_planned() -> None:
    flags = all_flags()
    for row in table("Configuration (flag > environment > default)"):
        if not row[0].startswith("`-"):
            continue
        flag = ticks(row[0])[0].split()[0]
        planned = "*planned*" in " ".join(row)
        assert (flag in flags) != planned, f"{flag}: {'remove the *planned* mark' if planned else 'missing'}"


def test_every_option_of_every_command_is_in_the_contract() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    shared = {flag for action in parser._actions for flag in action.option_strings}  # global options
    text = CONTRACT.read_text()
    missing = [
        f"{name} {flag}"
        for name, command in sub.choices.items()
        for action in command._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag not in shared and not re.search(rf"[`\[ |/]{re.escape(flag)}\b", text)
    ]
    assert not missing, missing


def test_every_key_in_the_json_table_is_required_by_the_commands_schema() -> None:
    rows = table("Minimum JSON keys")
    assert rows
    for row in rows:
        command = "error" if row[0] == "any non-zero exit" else ticks(row[0])[0]
        required = set(schema(command)["required"])
        documented = set(ticks(row[1]))
        assert documented and documented <= required, (command, documented - required)


def test_the_runtime_object_lists_the_schemas_required_keys() -> None:
    paragraph = CONTRACT.read_text().split("## Minimum JSON keys\n\n", 1)[1].split("\n\n", 1)[0]
    before_planned = paragraph.split("*planned*", 1)[0]
    assert set(ticks(before_planned)) >= set(schema("runtime")["required"])


def test_every_exit_code_of_the_error_tree_is_documented() -> None:
    codes = {int(row[0]) for row in table("Exit codes")} - {0}
    assert codes == set(schema("error")["properties"]["error"]["properties"]["exit_code"]["enum"])
    from llama_runtime.runtime import errors

    raised = {
        cls.exit_code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.LlamaRuntimeError)
    }
    assert raised <= codes


def test_the_readme_links_docs_and_never_the_shared_folder() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


# -- the schemas against real output ----------------------------------------------------------


def test_real_json_output_of_every_command_matches_its_schema(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    for tag in ("b7000", "b7001", "b7002"):
        publish_stand_in(github, tmp_path, tag)
    seen: dict[str, Any] = {}
    for tag in ("b7000", "b7001"):
        code, seen["update"] = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, seen["update"]
    steps = [
        ("status", ["status"]),
        ("list", ["list", "--available"]),
        ("which", ["which"]),
        ("check", ["check"]),
        ("plan", ["plan", "--backend", "cpu", "--explain"]),
        ("doctor", ["doctor"]),
        ("use", ["use", "b7000"]),
        ("rollback", ["rollback"]),
        ("update", ["update", "--tag", "b7000"]),  # switched
        ("update", ["update", "--tag", "b7002"]),
        ("remove", ["remove", "b7001"]),
    ]
    for name, args in steps:
        code, payload = run_json(capsys, home, github.api_url, *args)
        assert code == 0, (args, payload)
        validate(name, payload)
        seen[name] = payload
    assert seen["list"]["available"], "the available list was exercised"
    assert_every_key_is_documented(seen)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "7000")
    assert code == 2
    validate("error", payload)
    code, payload = run_json(capsys, tmp_path / "empty", github.api_url, "which")
    assert code == 5
    validate("error", payload)


def assert_every_key_is_documented(seen: dict[str, Any]) -> None:
    """Every top-level key of a command's real ``--json`` output is named in its row of the JSON table
    (keys or details) and in its schema's ``properties``: nothing an app reads goes undocumented."""
    rows = {ticks(row[0])[0]: row for row in table("Minimum JSON keys") if row[0] != "any non-zero exit"}
    missing: dict[str, dict[str, tuple[bool, bool]]] = {}
    for name, payload in seen.items():
        named = {word for cell in rows[name][1:] for word in ticks(cell)}
        properties = set(schema(name).get("properties", {}))
        gaps = {key: (key in named, key in properties) for key in payload if key not in named & properties}
        if gaps:
            missing[name] = gaps
    assert not missing, json.dumps(missing)


# -- docs/api.md's exception tree against the classes ----------------------------------------------

API = ROOT / "docs" / "api.md"
TREE_START = "<!-- exception tree: tests/test_docs_contract.py checks it against the code -->"


def exported_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class ``llama_runtime.errors`` exports (the whole tree), by name."""
    import llama_runtime.errors

    found = {name: getattr(llama_runtime.errors, name) for name in llama_runtime.errors.__all__}
    return {name: cls for name, cls in found.items() if isinstance(cls, type) and issubclass(cls, BaseException)}


def render_tree(classes: dict[str, type[BaseException]]) -> str:
    """The tree as docs/api.md draws it: one class a line, children by name, its exit code and code."""
    from llama_runtime import LlamaRuntimeError

    lines: list[str] = []

    def walk(cls: type[BaseException], prefix: str, branch: str, inner: str) -> None:
        assert issubclass(cls, LlamaRuntimeError)
        label = f"{prefix}{branch}{cls.__name__}"
        lines.append(f"{label:<40}exit {cls.exit_code:<5}{cls.code}")
        children = sorted((c for c in classes.values() if c.__bases__[0] is cls), key=lambda c: c.__name__)
        for i, child in enumerate(children):
            last = i == len(children) - 1
            walk(child, prefix + inner, "`-- " if last else "+-- ", "    " if last else "|   ")

    walk(LlamaRuntimeError, "", "", "")
    return "\n".join(lines)


def documented_tree() -> str:
    text = API.read_text()
    assert TREE_START in text, f"docs/api.md lost its marker {TREE_START!r}"
    block = text.split(TREE_START, 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    return block.rstrip("\n")


def test_every_public_error_class_is_exported_from_llama_runtime() -> None:
    import importlib
    import pkgutil

    import llama_runtime
    from llama_runtime import LlamaRuntimeError

    for module in pkgutil.walk_packages(llama_runtime.__path__, "llama_runtime."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    every: set[type[BaseException]] = set()
    pending: list[type[BaseException]] = [LlamaRuntimeError]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in every:
                every.add(sub)
                pending.append(sub)
    public = {cls.__name__ for cls in every if not cls.__name__.startswith("_")}
    assert public <= set(exported_exceptions()), sorted(public - set(exported_exceptions()))


def test_the_exception_tree_in_the_api_doc_is_the_codes() -> None:
    expected = render_tree(exported_exceptions())
    assert documented_tree() == expected, f"docs/api.md's tree should read:\n{expected}"


def test_every_exported_exception_is_in_the_api_docs_table_under_its_base() -> None:
    classes = exported_exceptions()
    section = API.read_text().split("| exception (subclasses) |", 1)[1].split("\n\n", 1)[0]
    named: list[str] = []
    for row in section.splitlines()[2:]:
        cell = row.split("|")[1]
        heads, _, inner = cell.partition("(")
        for head in ticks(heads):
            named.append(head)
            for sub in ticks(inner):
                assert issubclass(classes[sub], classes[head]), f"{sub} is no {head}"
                named.append(sub)
    assert sorted(named) == sorted(set(classes) - {"LlamaRuntimeError"}), "each exception once in the table"


# -- no internal tracker references, no headings cut short -------------------------------------

#: An internal tracker reference: "issue 28", "issues 10 and 19", "finding 6", "item 4", "issue-11", or a
#: bare "#25". Upstream references stay: "PR #770", "owner/name #967", and llama.cpp's five-digit
#: numbers ("#26375"), which the project's own tracker never reached.
_TRACKER = re.compile(r"\b(?:issues?[ -]\d+|findings? \d+|item \d+)\b|(?<![\w&/])#\d{1,3}\b", re.IGNORECASE)
_UPSTREAM = re.compile(r"(?:\bPR|[\w.-]+/[\w.-]+) #\d+")


def _prose_files() -> list[Path]:
    """README, docs/, and every Python file of the package, the tests and the scripts (comments, docstrings)."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.js"))]
    for folder in ("llama_runtime", "tests", "scripts"):
        found += sorted((ROOT / folder).rglob("*.py"))
    return [path for path in found if path.name != Path(__file__).name]


def test_no_user_doc_code_comment_or_test_cites_an_internal_issue_number() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in _prose_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in _TRACKER.finditer(_UPSTREAM.sub("", line))
    ]
    assert not cited, "the tracker is not in the repository; say what the code does instead:\n" + "\n".join(cited)


def test_no_test_file_is_named_after_an_issue() -> None:
    names = [path.name for path in (ROOT / "tests").glob("test_*.py")]
    assert not [name for name in names if re.search(r"issue|finding|smaller|first_week|today", name)], names


def test_no_heading_or_section_comment_is_cut_short() -> None:
    cut = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _prose_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.match(r"\s*# -- .*(?:\.\.\.|…) -+$", line)
        or (path.suffix == ".md" and re.match(r"#+ .*(?:\.\.\.|…)\s*$", line))
    ]
    assert not cut, "\n".join(cut)


def _resolves(target: str, package: str) -> bool:
    """Whether a Sphinx role's target (``updater.x.Y``, ``~llama_runtime.x``, ``.sibling``) names something real."""
    import importlib

    target = target.lstrip("~")
    if target.startswith("."):
        target = package + target
    elif not target.startswith("llama_runtime"):
        target = "llama_runtime." + target
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_module_a_docstring_or_comment_names_exists() -> None:
    role = re.compile(
        r":(?:func|class|meth|attr|data|exc):`(~?(?:\.|(?:llama_runtime\.)?(?:updater|runtime)\.)[\w.]+)`"
        r"|:mod:`(~?[\w.]+)`"
    )
    stale = []
    for path in sorted((ROOT / "llama_runtime").rglob("*.py")):
        package = ".".join(path.relative_to(ROOT).parent.parts)
        text = path.read_text(encoding="utf-8")
        stale += [
            f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(1) or m.group(2)}"
            for m in role.finditer(text)
            if not _resolves(m.group(1) or m.group(2), package)
        ]
    assert not stale, "\n".join(stale)


# -- the project's own CI runs the README's test command everywhere -----------------------------

CI_WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def test_ci_runs_the_readmes_test_command_on_every_os_and_supported_python() -> None:
    import tomllib

    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(CI_WORKFLOW.read_text())
    test = workflow["jobs"]["test"]
    assert set(test["strategy"]["matrix"]["os"]) == {"ubuntu-latest", "macos-latest", "windows-latest"}
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert floor == ">=3.11" and test["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]
    assert test["strategy"]["fail-fast"] is False, "one OS failing must not hide the others' results"
    readme_command = next(
        line for block in re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
        for line in block.splitlines() if line.startswith("bash .ci/")
    )  # fmt: skip
    assert any(readme_command in str(step.get("run", "")) for step in test["steps"]), readme_command
    lint = [str(step.get("run", "")).strip() for step in workflow["jobs"]["lint"]["steps"]]
    assert "python -m mypy" in lint, "plain mypy: the package, the tests, the scripts and the examples"
    for check in ("ruff check", "mypy --platform win32", "mypy --platform darwin"):
        assert any(check in run for run in lint), check


def test_pytest_turns_deprecation_warnings_into_errors() -> None:
    import tomllib

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert options["filterwarnings"][0] == "error::DeprecationWarning"


# -- docs/api.md names every public name ------------------------------------------------------------


def test_every_public_name_of_the_three_public_modules_is_documented_in_the_api_doc() -> None:
    import llama_runtime
    import llama_runtime.errors
    import llama_runtime.types

    text = API.read_text()
    public = {*llama_runtime.__all__, *llama_runtime.types.__all__, *llama_runtime.errors.__all__}
    assert sorted(name for name in public if f"`{name}`" not in text) == []
    assert len(llama_runtime.__all__) <= 45, "the top level stays small enough to hold in one's head"
