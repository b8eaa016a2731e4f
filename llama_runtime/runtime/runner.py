"""The one process-runner seam: run a short-lived command to completion, time-boxed.

Everything that runs a command and reads what it printed goes through a
:data:`ProcessRunner`: the binary checks (``llama-server --version`` and
``--list-devices``), the transaction's verification, ``doctor``, and host
detection's probes (``nvidia-smi``, ``vulkaninfo`` …). Tests replace the
runner with a function that answers from a table; by default it is
:func:`run_process`, :func:`subprocess.run` with a timeout, so a hung child
can never hang an update. The runner never raises for a child that is missing,
cannot start or hangs: those are results (:data:`CANNOT_EXECUTE`, ``None``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

#: The return code of a command that could not be started at all (missing,
#: not executable): the shell's "found but cannot execute" code, 126.
CANNOT_EXECUTE: Final = 126


@dataclass(frozen=True)
class ProcessResult:
    """What a finished (or timed-out) child process did."""

    returncode: int | None  # None: killed after the timeout
    output: str  # stdout and stderr together (stdout alone when run with keep_stderr=False)

    @property
    def succeeded(self) -> bool:
        """Whether the command ran to the end and exited 0."""
        return self.returncode == 0


#: Runs ``argv`` with a timeout in seconds and an environment (``None``: ours).
ProcessRunner = Callable[[Sequence[str], float, Mapping[str, str] | None], ProcessResult]


def run_process(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None, *, keep_stderr: bool = True
) -> ProcessResult:
    """Run ``argv`` to completion, killed after ``timeout`` seconds; never raises for the child.

    Args:
        argv: The command, run without a shell, stdin closed.
        timeout: Seconds before the child is killed (the result's ``returncode`` is then ``None``).
        env: The child's environment; ``None`` inherits ours.
        keep_stderr: ``True`` merges stderr into ``output`` in the order printed (what a person
            reading a failure needs); ``False`` discards it, so parsers read stdout alone.

    Returns:
        The exit code and output; :data:`CANNOT_EXECUTE` with a sentence when it could not start.
    """
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if keep_stderr else subprocess.DEVNULL,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode("utf-8", "replace") if isinstance(exc.output, bytes) else ""
        return ProcessResult(None, out)
    except OSError as exc:
        return ProcessResult(CANNOT_EXECUTE, f"cannot execute {argv[0]}: {exc.strerror or exc}")
    return ProcessResult(done.returncode, done.stdout.decode("utf-8", "replace"))
