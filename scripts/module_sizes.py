"""Module and function sizes of llama-runtime at a commit (the ~700-line / ~60-line style budget).

Reads every ``.py`` under ``updater/``, ``runtime/`` and ``llama_runtime/`` as stored at COMMIT
(``git show``, so the work tree does not matter), counts lines per module and measures every
``def`` with :mod:`ast` (``end_lineno - lineno + 1``, decorators excluded).

Usage: python scripts/module_sizes.py [COMMIT ...]   (default: HEAD)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
FOLDERS: Final = ("updater", "runtime", "llama_runtime")
#: The style budget: a module is a concept (up to about 700 lines), functions under ~60.
MODULE_BUDGET: Final = 700
FUNCTION_BUDGET: Final = 60
SHOWN: Final = 8


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def measure(commit: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    files = [f for f in git("ls-tree", "-r", "--name-only", commit).split() if f.endswith(".py")]
    modules, functions = [], []
    for path in (f for f in files if f.split("/")[0] in FOLDERS):
        text = git("show", f"{commit}:{path}")
        modules.append((len(text.splitlines()), path))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                functions.append((node.end_lineno - node.lineno + 1, f"{path}:{node.name}"))
    return sorted(modules, reverse=True), sorted(functions, reverse=True)


def main() -> int:
    for commit in sys.argv[1:] or ["HEAD"]:
        modules, functions = measure(commit)
        big = [m for m in modules if m[0] > MODULE_BUDGET]
        long = [f for f in functions if f[0] > FUNCTION_BUDGET]
        print(f"{commit}: {len(modules)} modules, {sum(n for n, _ in modules)} lines")
        print(f"  modules over {MODULE_BUDGET} lines: {len(big)}: " + ", ".join(f"{p} {n}" for n, p in big))
        print(
            f"  functions over {FUNCTION_BUDGET} lines: {len(long)} of {len(functions)}: "
            + ", ".join(f"{p} {n}" for n, p in long)
        )
        print("  longest functions: " + ", ".join(f"{p} {n}" for n, p in functions[:SHOWN]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
