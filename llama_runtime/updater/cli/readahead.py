"""Read ahead the files an ``update`` is about to import, while it imports them.

On a cold page cache (the first update after a boot or a quiet night, a scheduled job, the
benchmark after ``drop_caches``) an update's start mostly waits for ~350 small files, the bytecode
and extension modules of what it imports, read one at a time: each import waits for its file before
the next begins. One daemon thread asks the kernel for all of them at once
(``posix_fadvise(POSIX_FADV_WILLNEED)``: read-ahead queued, nothing copied into this process) while
the main thread goes on importing, so the reads overlap each other and the imports' own work.
Measured on the (shared, 2-core) benchmark machine, a tiny update alternating with and without it,
medians of 9: cold 0.61 -> 0.55 s and 0.60 -> 0.54 s, warm 0.38 -> 0.39 s and 0.35 -> 0.33 s
(docs/benchmarks.md). Started before the argument parser instead, it cost warm runs ~0.07 s: the
thread's own Python work then competes with the parser's imports for the interpreter lock.

Advice only, once per process: a file that is missing, of another Python version or unreadable is
skipped; nothing here can fail an update or change what it runs. Where the call does not exist
(macOS, Windows) no thread starts.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Final

#: Third-party packages an update imports before and while it downloads (``python -X importtime``
#: of ``update``, 2026-12): found on ``sys.path``, every bytecode and extension file under each.
THIRD_PARTY: Final = ("httpx", "httpcore", "h11", "idna", "certifi", "filelock", "psutil", "packaging", "isal")
#: Standard library packages it imports from (a whole package's bytecode is a few hundred kB).
STDLIB_PACKAGES: Final = ("collections", "ctypes", "email", "http", "importlib", "json", "logging", "re", "urllib")
#: Standard library modules outside those packages that it imports (CPython 3.11, measured as
#: above). A name missing here only costs its file being read on demand; an extra one, one read.
# fmt: off
STDLIB_MODULES: Final = (
    "__future__", "_compression", "_weakrefset", "argparse", "ast", "base64", "bisect", "bz2", "calendar",
    "contextlib", "copy", "copyreg", "csv", "dataclasses", "datetime", "decimal", "dis", "enum", "fnmatch",
    "fractions", "functools", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "inspect", "ipaddress",
    "keyword", "linecache", "locale", "lzma", "mimetypes", "numbers", "opcode", "operator", "pathlib", "platform",
    "queue", "quopri", "random", "reprlib", "secrets", "selectors", "shutil", "signal", "socket", "ssl",
    "statistics", "string", "stringprep", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading",
    "token", "tokenize", "traceback", "types", "typing", "warnings", "weakref", "zipfile",
)
#: Extension modules of the standard library it loads (``lib-dynload``; built in on some builds).
STDLIB_EXTENSIONS: Final = (
    "_bisect", "_blake2", "_bz2", "_csv", "_ctypes", "_datetime", "_decimal", "_hashlib", "_heapq", "_json",
    "_lzma", "_opcode", "_posixsubprocess", "_queue", "_random", "_sha512", "_socket", "_ssl", "_statistics",
    "_struct", "_typing", "array", "binascii", "fcntl", "grp", "math", "resource", "select", "unicodedata", "zlib",
)
# fmt: on

_started = False
_start_lock = threading.Lock()


def start_readahead() -> threading.Thread | None:
    """Start reading ahead in a daemon thread, once per process; ``None`` when not started.

    Not started a second time (the files stay cached) nor where ``posix_fadvise`` does not exist.
    """
    global _started
    if not hasattr(os, "posix_fadvise"):
        return None
    with _start_lock:
        if _started:
            return None
        _started = True
    thread = threading.Thread(target=read_ahead, args=(readahead_paths(),), name="llama-runtime-readahead", daemon=True)
    thread.start()
    return thread


def read_ahead(paths: Iterable[str], advise: Callable[[str], bool] | None = None) -> int:
    """Advise the kernel to read each of ``paths`` ahead; how many it was asked for."""
    ask = advise or will_need
    return sum(1 for path in paths if ask(path))


def will_need(path: str) -> bool:
    """``posix_fadvise(WILLNEED)`` on the whole of ``path``; ``False`` when it cannot be opened or advised."""
    if sys.platform == "win32" or sys.platform == "darwin":  # no posix_fadvise there
        return False
    else:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True


def readahead_paths() -> Iterator[str]:
    """The files to read ahead: this package's, the third-party packages' and the standard library's.

    Generated lazily, so the first files are advised while the later directories are still listed.
    """
    yield from _package_files(Path(__file__).resolve().parents[2])  # llama_runtime/
    for entry in dict.fromkeys(sys.path):
        for name in THIRD_PARTY:
            yield from _package_files(Path(entry or ".") / name)
    stdlib = Path(os.__file__).parent
    tag = sys.implementation.cache_tag
    if tag:
        yield from (str(stdlib / "__pycache__" / f"{name}.{tag}.pyc") for name in STDLIB_MODULES)
    for name in STDLIB_PACKAGES:
        yield from _package_files(stdlib / name)
    if EXTENSION_SUFFIXES:
        yield from (str(stdlib / "lib-dynload" / (name + EXTENSION_SUFFIXES[0])) for name in STDLIB_EXTENSIONS)


def _package_files(directory: Path) -> Iterator[str]:
    """Every bytecode file of this interpreter, extension module and PEM bundle under ``directory``.

    (certifi's ``cacert.pem`` is read by every HTTP client's TLS context.)
    """
    tag = sys.implementation.cache_tag
    pyc = f".{tag}.pyc" if tag else None
    read_as_is = (*EXTENSION_SUFFIXES, ".pem")
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d not in ("test", "tests")]  # a package's own test suite is never imported
        in_cache = os.path.basename(root) == "__pycache__"
        for name in files:
            if (in_cache and pyc is not None and name.endswith(pyc)) or name.endswith(read_as_is):
                yield os.path.join(root, name)
