"""The inference gate: a switch is complete only once the new server generates a real answer.

After a switch restarts llama-server on a new runtime and ``/health`` answers,
the gate sends the fixed completion request of :mod:`runtime.inference`, under
one wall-clock limit for the whole check and a first-token limit, both scaled to
the model and device (:func:`check_limits`). A failure (error, timeout, a crash
mid-answer, empty or whitespace output, a broken body) fails the switch like an
unhealthy server: flip back, restart the old server, exit 6 with the reason. A
changed greedy answer or one token repeated throughout warns.

The same request, timed several times on the old server just before it stops
and on the new one right after its check, is the speed guard: medians are
compared, and a drop acts (warns, or rolls back when the caller asked for that)
only beyond both the limit and the noise the samples showed (two standard errors
of the two medians). Answers and figures live in the
home's state (:mod:`.measures`), per runtime, model and arguments.
docs/inference-gate.md says why and how.

Pure decisions (:func:`model_key`, :func:`slowdown`, :func:`judge`, :func:`spread`) do no IO.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import read_cache, write_record
from llama_runtime.runtime.inference import GATE_TOKENS, InferenceResult, Speed, probe_inference
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.listen import arg_value
from llama_runtime.updater.config import GatePolicy
from llama_runtime.updater.logs import get_logger, warn_state
from llama_runtime.updater.verify.busy import OtherWork, busy_drop
from llama_runtime.updater.verify.measures import Measure, load_measure, store_measure

# -- gate --------------------------------------------------------------------------------------------------------

log = get_logger("llama_runtime.gate")

#: The first four bytes of every GGUF file (ggml's gguf.h, GGUF_MAGIC).
GGUF_MAGIC: Final = b"GGUF"

#: A drop must also show against the median of the old runtime's last this many measurements:
#: then one lucky figure just before its server stopped (a 2-core machine's speed moves by 10-30%
#: over tens of seconds) cannot roll back a build of the same speed.
RECENT_MEASUREMENTS: Final = 3
#: A drop within this many standard errors of the two figures is noise: normal noise alone
#: exceeds two one time in forty, and the limit must be exceeded too (a drop that acts is
#: measured once more before it does).
NOISE_SIGMAS: Final = 2.0
#: Normal errors: a standard deviation is 1.4826 median deviations, and a median of n samples
#: has a standard error of 1.2533 standard deviations over the square root of n.
_SIGMA_PER_MAD: Final = 1.4826
_MEDIAN_ERROR: Final = 1.2533
#: A prompt figure measuring less work than this is not compared: the gate's prompt is one
#: batch, a single matrix product per layer, and below a quarter second its speed is where the
#: threads landed, not the build (a 100 MB model on a 2-core CPU: 650 or 1250 tokens/s for the
#: same bytes, a whole run in one mode; a tiny model's prompt is ~3 ms of timer noise).
#: Generation is timed over many sequential tokens and always counts.
MIN_MEASURED_SECONDS: Final = 0.25
#: Start-up costs before a first token on any device: shader compilation (minutes on
#: lavapipe for a large graph), the weights' first page faults. A 194 MiB model on
#: lavapipe once needed over 60 s for the whole check, hence two minutes.
FIRST_TOKEN_BASE_SECONDS: Final = 120.0
#: Reading and evaluating the prompt per GiB of weights on a GPU: a 40 GiB model's pages fault in at ~1 GB/s.
FIRST_TOKEN_SECONDS_PER_GIB: Final = 2.0
#: One generated token per GiB of weights: a 40 GiB model on a GPU makes ~20 tokens/s (0.05 s),
#: on a CPU ~1 token/s; this allows about twice that.
TOKEN_SECONDS_PER_GIB: Final = 0.025
#: Prompt evaluation of one request beyond its first, on any model: a few dozen tokens.
PROMPT_SECONDS: Final = 2.0
#: CPUs compute ~4-10x slower than a GPU on the same model (the upstream README's CPU vs GPU figures).
CPU_FACTOR: Final = 4.0
#: A model named by repository (-hf) has no size before its download: assume a mid-size one (8B at Q8).
UNKNOWN_MODEL_GIB: Final = 8.0

_MODEL_PATH_FLAGS: Final = ("-m", "--model")
_MODEL_REPO_FLAGS: Final = ("-hf", "--hf-repo", "-mu", "--model-url", "-dr", "--docker-repo")
# Arguments that change where a server listens, not how fast it computes.
_ADDRESS_FLAGS: Final = frozenset({"--host", "--port", "--api-key", "--api-key-file"})


@dataclass(frozen=True)
class Verdict:
    """The gate's judgement of one new runtime."""

    ok: bool
    reason: str = ""
    warnings: tuple[str, ...] = ()
    speed: Speed | None = None
    previous_speed: Speed | None = None
    #: The slowdown figures for people when it stayed within the measured noise (else empty).
    noise: str = ""
    answer: str | None = None
    previous_answer: str | None = None


@dataclass(frozen=True)
class Limits:
    """One check's wall-clock limits: all of it, and the wait for each request's first token."""

    overall: float
    first_token: float


# -- pure decisions ------------------------------------------------------------------


def parse_slowdown(text: str) -> float | None:
    """``20%``, ``20`` or ``off`` as a fraction (0.2) or None.

    Raises:
        UserInputError: Anything else.
    """
    value = text.strip().lower()
    if value in {"off", "none", "no"}:
        return None
    try:
        percent = float(value.removesuffix("%"))
    except ValueError:
        percent = -1.0
    if not 0 < percent < 100:
        raise UserInputError(
            f"Invalid --max-slowdown '{text}'. Use a percentage between 0 and 100 (for example 20%), or off."
        )
    return percent / 100


def model_key(args: Sequence[str]) -> str | None:
    """The model a server with ``args`` loads at start (its file name or repo), or None."""
    for flag in _MODEL_PATH_FLAGS:
        value = arg_value(args, flag)
        if value:
            return Path(value).name
    for flag in _MODEL_REPO_FLAGS:
        value = arg_value(args, flag)
        if value:
            return value
    return None


def args_fingerprint(args: Sequence[str]) -> str:
    """Twelve hex digits naming the arguments that shape speed (not the address)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _ADDRESS_FLAGS:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:12]


def api_key(args: Sequence[str]) -> str | None:
    """The key a server started with ``args`` demands (``--api-key``, or the first of ``--api-key-file``)."""
    key = arg_value(args, "--api-key")
    if key:
        return key.split(",")[0]
    path = arg_value(args, "--api-key-file")
    if path:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        return next((line.strip() for line in lines if line.strip()), None)
    return None


def check_limits(policy: GatePolicy, args: Sequence[str], backend: str | None, requests: int) -> Limits:
    """The limits of one check of ``requests`` requests on a server started with ``args`` (pure but one stat).

    Scaled by default to the model's size and the device: a first token has
    :data:`FIRST_TOKEN_BASE_SECONDS` (start-up costs: shader compilation, the
    weights' first page faults) plus :data:`FIRST_TOKEN_SECONDS_PER_GIB` per GiB
    of model; every generated token :data:`TOKEN_SECONDS_PER_GIB` per GiB; both
    times :data:`CPU_FACTOR` when the server computes on the CPU (the ``cpu``
    backend, ``--device none``, ``-ngl 0``). A ``--gate-timeout`` replaces the
    overall limit, and the first-token limit never exceeds it.
    """
    gib = _model_gib(args)
    factor = CPU_FACTOR if _on_cpu(args, backend) else 1.0
    first = FIRST_TOKEN_BASE_SECONDS + FIRST_TOKEN_SECONDS_PER_GIB * gib * factor
    scaled = first + requests * (PROMPT_SECONDS + GATE_TOKENS * TOKEN_SECONDS_PER_GIB * gib * factor)
    overall = policy.timeout if policy.timeout is not None else scaled
    return Limits(overall=overall, first_token=min(first, overall))


def _model_gib(args: Sequence[str]) -> float:
    for flag in _MODEL_PATH_FLAGS:
        value = arg_value(args, flag)
        if value:
            try:
                return Path(value).stat().st_size / 2**30
            except OSError:
                break
    return UNKNOWN_MODEL_GIB  # a repository's model (-hf): its size is not known before the download


def _on_cpu(args: Sequence[str], backend: str | None) -> bool:
    device = arg_value(args, "--device") or arg_value(args, "-dev")
    layers = arg_value(args, "-ngl") or arg_value(args, "--n-gpu-layers") or arg_value(args, "--gpu-layers")
    return backend == "cpu" or device == "none" or layers == "0"


def median_speed(samples: Sequence[Speed]) -> Speed | None:
    """Each figure's median over ``samples`` (None without samples): robust to one slow or lucky request."""
    if not samples:
        return None
    return Speed(
        prompt_per_second=statistics.median(s.prompt_per_second for s in samples),
        predicted_per_second=statistics.median(s.predicted_per_second for s in samples),
        prompt_n=samples[0].prompt_n,
        predicted_n=samples[0].predicted_n,
    )


def spread(samples: Sequence[Speed]) -> float:
    """The noise the samples show: the median absolute deviation over the median, of each counted figure.

    The median deviation, not the range: one request a scheduler delayed moves
    the range, not this. 0 for fewer than two samples.
    """
    if len(samples) < 2:
        return 0.0
    figures = [[s.predicted_per_second for s in samples]]
    if all(_prompt_counts(s) for s in samples):
        figures.append([s.prompt_per_second for s in samples])
    return max(_relative_mad(f) for f in figures)


def noise_of(old_samples: Sequence[Speed], new_samples: Sequence[Speed]) -> float:
    """The drop noise alone can make: :data:`NOISE_SIGMAS` standard errors of the two medians, in quadrature.

    Each median's error comes from its own samples' spread (:func:`median_error`):
    more samples pin it down better. Independent errors add in quadrature;
    their plain sum would overstate them and hide a real slowdown.
    """
    return NOISE_SIGMAS * math.hypot(median_error(old_samples), median_error(new_samples))


def median_error(samples: Sequence[Speed]) -> float:
    """The relative standard error of the samples' median, from their spread (0 for fewer than two)."""
    if len(samples) < 2:
        return 0.0
    return _MEDIAN_ERROR * _SIGMA_PER_MAD * spread(samples) / math.sqrt(len(samples))


def _relative_mad(values: Sequence[float]) -> float:
    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values) / middle


def _prompt_counts(speed: Speed) -> bool:
    """Whether the prompt figure measures enough work to compare (:data:`MIN_MEASURED_SECONDS`)."""
    return speed.prompt_n <= 0 or speed.prompt_n / speed.prompt_per_second >= MIN_MEASURED_SECONDS


def slowdown(old: Speed, new: Speed) -> float:
    """The larger relative drop of prompt and generation speed (0 when not slower).

    The prompt counts only when it measured enough work on both (:data:`MIN_MEASURED_SECONDS`).
    """
    drops = [1 - new.predicted_per_second / old.predicted_per_second]
    if _prompt_counts(old) and _prompt_counts(new):
        drops.append(1 - new.prompt_per_second / old.prompt_per_second)
    return max(0.0, *drops)


def judge(
    old: Speed | None,
    new: Speed | None,
    policy: GatePolicy,
    *,
    old_name: str,
    new_name: str,
    noise: float = 0.0,
    old_recent: Speed | None = None,
    busy: float = 0.0,
) -> Verdict:
    """Whether ``new`` is acceptably fast next to ``old`` under ``policy``.

    A drop acts (warns, or rolls back) only when it exceeds both ``max_slowdown``
    and ``noise``, the drop noise alone can make (:func:`noise_of`), and, given
    ``old_recent`` (the median of the old runtime's recent measurements), shows
    against that too. ``busy``, the drop other work on the machine explains
    (:func:`~updater.verify.busy.busy_drop`), widens the noise: a guard that cannot
    tell a slower build from a busier machine says so instead of acting. A drop
    beyond the limit but within the noise is reported as such, with the figures.
    """
    if old is None or new is None or policy.max_slowdown is None:
        return Verdict(True, speed=new, previous_speed=old)
    drop = slowdown(old, new)
    if old_recent is not None:
        drop = min(drop, slowdown(old_recent, new))
    if drop <= policy.max_slowdown:
        return Verdict(True, speed=new, previous_speed=old)
    figures = (
        f"(prompt {new.prompt_per_second:.1f} vs {old.prompt_per_second:.1f} tokens/s, "
        f"generation {new.predicted_per_second:.1f} vs {old.predicted_per_second:.1f} tokens/s"
    )
    if drop <= noise + busy:
        allow = f"the samples allow {noise:.0%}" + (f" and other work on the machine {busy:.0%}" if busy else "")
        within = (
            f"{new_name} measured {drop:.0%} slower than {old_name}, within noise: {allow} "
            f"{figures}; the limit is {policy.max_slowdown:.0%}, and a drop must exceed both)"
        )
        return Verdict(True, speed=new, previous_speed=old, noise=within)
    sentence = (
        f"{new_name} is {drop:.0%} slower than {old_name} on the same request {figures}; "
        f"the limit is {policy.max_slowdown:.0%}" + (f", noise allows {noise:.0%})" if noise else ")")
    )
    if policy.on_slowdown == "rollback":
        return Verdict(False, sentence, speed=new, previous_speed=old)
    return Verdict(True, warnings=(sentence + ".",), speed=new, previous_speed=old)


def answer_warnings(
    answer: str, repeats: bool, previous: str | None, *, old_name: str, new_name: str
) -> tuple[str, ...]:
    """What the greedy answer says about the new runtime: a changed answer, one repeated token (pure)."""
    found: list[str] = []
    if previous is not None and previous != answer:
        found.append(
            f"{new_name} answers the gate's prompt differently from {old_name} (greedy, same model and arguments; "
            f"numerics may move between builds): {answer!r} vs {previous!r}."
        )
    if repeats:
        found.append(f"{new_name} answered the gate's prompt with one token repeated throughout: {answer!r}.")
    return tuple(found)


# -- the figures in the marker (the smoke model's) ---------------------------------------


def recorded_speed(runtime: InstalledRuntime | None, key: str, fingerprint: str) -> Speed | None:
    """The figure ``runtime`` has on record for ``key`` measured with the same arguments."""
    if runtime is None:
        return None
    record = runtime.marker.speeds.get(key)
    if record is None or record.get("args") != fingerprint:
        return None
    return Speed.from_json(record)


# -- the gate ------------------------------------------------------------------------------


Probe = Callable[..., InferenceResult]


class InferenceGate:
    """Runs the completion request on running servers and judges the new runtime.

    Args:
        policy: What to check and what a slowdown does.
        clock: The measurement time written next to the figures.
        probe: The request seam (:func:`runtime.inference.probe_inference`).
        state_dir: The home whose state keeps the answers and figures (:mod:`.measures`);
            None keeps nothing (the smoke model's scratch servers).
        other_work: Measures other work's share of the CPU during each timing (:mod:`.busy`).
    """

    def __init__(
        self,
        policy: GatePolicy,
        *,
        clock: Callable[[], str],
        probe: Probe = probe_inference,
        state_dir: Path | None = None,
        other_work: Callable[[], OtherWork] = OtherWork,
    ) -> None:
        self.policy = policy
        self.other_work = other_work
        self.clock = clock
        self.probe = probe
        self.state_dir = state_dir
        #: Other work's share of the CPU while the old server was timed (None: not timed, or unknown).
        self._old_busy: float | None = None

    def measure(
        self,
        url: str,
        args: Sequence[str],
        *,
        backend: str | None = None,
        samples: int = 1,
        deadline: float | None = None,
    ) -> InferenceResult:
        """``samples`` completion requests against the server at ``url`` started with ``args``.

        Under their own limits (:func:`check_limits`), or what is left until ``deadline``
        (monotonic seconds), the one limit of a whole check.
        """
        limits = check_limits(self.policy, args, backend, samples)
        if deadline is not None:
            left = max(deadline - time.monotonic(), 0.001)
            limits = Limits(overall=left, first_token=min(limits.first_token, left))
        return self.probe(
            url,
            timeout=limits.overall,
            first_token_timeout=limits.first_token,
            samples=samples,
            api_key=api_key(args),
        )

    def baseline(self, url: str, args: Sequence[str], current: InstalledRuntime | None) -> None:
        """Measure the running old server just before it stops; its record is refreshed every time.

        A failure here is the old runtime's, not the new one's: it is logged and
        the switch goes on (the new build may be the fix).
        """
        key = model_key(args)
        if key is None or current is None or self.state_dir is None:
            return
        backend = current.marker.backend
        # One request more than timed: a server restarted without a request since pays one-time costs first.
        result, self._old_busy = self._measure_busy(url, args, backend=backend, samples=self.policy.samples + 1)
        if not result.ok or len(result.samples) < 2:
            log.warning("could not measure the running server before the switch", reason=result.reason)
            return
        self._store(current, key, args, result, result.samples[1:])
        log.info(
            "measured the running server", model=key, **(median_speed(result.samples) or result.samples[0]).to_json()
        )

    def check(self, url: str, args: Sequence[str], new: InstalledRuntime, current: InstalledRuntime | None) -> Verdict:
        """Does the new server at ``url`` generate a real answer, and fast enough next to ``current``?

        The check's own request (which pays the new server's one-time costs) is
        not timed; :attr:`GatePolicy.samples` more requests are, under the same
        overall limit. A drop beyond the limit is measured once more before it acts.
        """
        # One limit for the whole check: its own request and every timed one (a second round included).
        deadline = (
            time.monotonic() + check_limits(self.policy, args, new.marker.backend, 1 + 3 * self.policy.samples).overall
        )
        first = self.measure(url, args, backend=new.marker.backend, samples=1, deadline=deadline)
        if not first.ok:
            return Verdict(False, f"its completion request failed: {first.reason}")
        key = model_key(args)
        if key is None:
            return Verdict(True, answer=first.content)
        old = self._recorded(current, key, args)
        warnings = answer_warnings(
            first.content, first.repeats, old.answer if old else None, old_name=_name(current), new_name=_name(new)
        )
        verdict = self._speed_verdict(url, args, new, current, old, first, deadline)
        self._store(new, key, args, first, verdict.speed_samples)
        return dataclasses.replace(
            verdict.verdict,
            warnings=(*warnings, *verdict.verdict.warnings),
            answer=first.content,
            previous_answer=old.answer if old else None,
        )

    def _speed_verdict(
        self,
        url: str,
        args: Sequence[str],
        new: InstalledRuntime,
        current: InstalledRuntime | None,
        old: Measure | None,
        first: InferenceResult,
        deadline: float,
    ) -> _Timed:
        """Time the new server and judge it against ``old``'s samples (a drop is confirmed once)."""
        samples = self.policy.samples
        backend = new.marker.backend
        busy: float | None = None
        if samples > 0:
            timed, busy = self._measure_busy(url, args, backend=backend, samples=samples, deadline=deadline)
        else:
            timed = first
        if not timed.ok:
            return _Timed(Verdict(False, f"its completion request failed: {timed.reason}"), ())
        taken = timed.samples or first.samples
        verdict = self._judge(old, taken, current, new, busy)
        if verdict.noise:
            # Beyond the limit but within the noise: twice the samples tell noise from a slowdown.
            again, busy_again = self._measure_busy(url, args, backend=backend, samples=samples, deadline=deadline)
            if again.ok and again.samples:
                taken, busy = (*taken, *again.samples), _busier(busy, busy_again)
                verdict = self._judge(old, taken, current, new, busy)
        if not verdict.ok or verdict.warnings:
            again, busy_again = self._measure_busy(url, args, backend=backend, samples=samples, deadline=deadline)
            if again.ok and again.samples:
                # The better of two rounds: a slowdown must show twice before it acts.
                better = max(
                    (taken, again.samples), key=lambda s: (median_speed(s) or Speed(1, 1)).predicted_per_second
                )
                busy = _busier(busy, busy_again)
                taken, verdict = better, self._judge(old, better, current, new, busy)
        return _Timed(verdict, taken)

    def _measure_busy(
        self, url: str, args: Sequence[str], *, backend: str | None, samples: int, deadline: float | None = None
    ) -> tuple[InferenceResult, float | None]:
        """:meth:`measure`, and other work's share of the CPU meanwhile (None: unknown)."""
        other = self.other_work()
        other.start()
        result = self.measure(url, args, backend=backend, samples=samples, deadline=deadline)
        return result, other.share()

    def _judge(
        self,
        old: Measure | None,
        new_samples: Sequence[Speed],
        current: InstalledRuntime | None,
        new: InstalledRuntime,
        busy: float | None = None,
    ) -> Verdict:
        # The old runtime's figure is the one measured just before its server stopped: the
        # closest in time to the new one's, so the machine has had the least time to change.
        # The median of its recent ones guards against that one being lucky.
        recent = old.history[-RECENT_MEASUREMENTS:] if old else ()
        return judge(
            old.speed if old else None,
            median_speed(new_samples),
            self.policy,
            old_name=_name(current),
            new_name=_name(new),
            noise=noise_of(old.samples if old else (), new_samples),
            old_recent=median_speed(recent) if len(recent) > 1 else None,
            busy=busy_drop(self._old_busy, busy),
        )

    def _recorded(self, runtime: InstalledRuntime | None, key: str, args: Sequence[str]) -> Measure | None:
        if runtime is None or self.state_dir is None:
            return None
        return load_measure(self.state_dir, runtime.name, key, args_fingerprint(args))

    def _store(
        self,
        runtime: InstalledRuntime,
        key: str,
        args: Sequence[str],
        answer: InferenceResult,
        samples: Sequence[Speed],
    ) -> None:
        if self.state_dir is None:
            return
        measure = Measure(
            runtime=runtime.name,
            model=key,
            args=args_fingerprint(args),
            answer=answer.content,
            speed=median_speed(samples),
            samples=tuple(samples),
            measured_at=self.clock(),
        )
        store_measure(self.state_dir, measure)


@dataclass(frozen=True)
class _Timed:
    """A speed verdict with the samples it was judged on."""

    verdict: Verdict
    speed_samples: tuple[Speed, ...] | Sequence[Speed]


def _busier(a: float | None, b: float | None) -> float | None:
    """The larger of two shares of other work (None when neither is known)."""
    known = [share for share in (a, b) if share is not None]
    return max(known) if known else None


def _name(runtime: InstalledRuntime | None) -> str:
    return f"{runtime.marker.tag} ({runtime.marker.backend})" if runtime else "the unmanaged runtime"


def validate_gguf(path: str | Path) -> Path:
    """``path`` as an absolute path to a GGUF file.

    Raises:
        UserInputError: It does not exist, is not a file, or does not start with the GGUF magic.
    """
    model = Path(path).expanduser().absolute()
    try:
        with open(model, "rb") as handle:
            head = handle.read(len(GGUF_MAGIC))
    except FileNotFoundError:
        raise UserInputError(f"The model {model} does not exist. Give the path of a .gguf model file.") from None
    except IsADirectoryError:
        raise UserInputError(f"{model} is a directory. Give the path of a .gguf model file.") from None
    except OSError as exc:
        raise UserInputError(f"Cannot read the model {model}: {exc.strerror or exc}.") from None
    if head != GGUF_MAGIC:
        raise UserInputError(
            f"{model} is not a GGUF model (it does not start with 'GGUF'). Give a .gguf file that llama-server loads."
        )
    return model


# -- gate_store: The inference gate's stored settings: ``<home>/gate.json``. -------------------------------------

GATE_SETTINGS_NAME: Final = "gate.json"
_ON_SLOWDOWN: Final = ("warn", "rollback")


def gate_settings_path(home_root: Path) -> Path:
    """Where the stored gate settings of a home live."""
    return home_root / GATE_SETTINGS_NAME


def load_gate_settings(home_root: Path) -> GatePolicy:
    """The stored policy, or the default one when nothing (valid) is stored."""
    payload = read_cache(gate_settings_path(home_root), warn=warn_state)
    if not isinstance(payload, dict):
        return GatePolicy()
    policy = GatePolicy()
    enabled = payload.get("enabled")
    if isinstance(enabled, bool):
        policy = dataclasses.replace(policy, enabled=enabled)
    timeout = payload.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and 0 < timeout <= 3600:
        policy = dataclasses.replace(policy, timeout=float(timeout))
    if "max_slowdown" in payload:
        value = payload["max_slowdown"]
        if value is None or (isinstance(value, float | int) and not isinstance(value, bool) and 0 < value < 1):
            policy = dataclasses.replace(policy, max_slowdown=None if value is None else float(value))
    on_slowdown = payload.get("on_slowdown")
    if on_slowdown in _ON_SLOWDOWN:
        policy = dataclasses.replace(policy, on_slowdown=on_slowdown)
    smoke = payload.get("smoke_model")
    if isinstance(smoke, str) and smoke:
        policy = dataclasses.replace(policy, smoke_model=Path(smoke))
    extra = payload.get("smoke_args")
    if isinstance(extra, list) and all(isinstance(a, str) for a in extra) and len(extra) <= 64:
        policy = dataclasses.replace(policy, smoke_args=tuple(extra))
    return policy


def save_gate_settings(home_root: Path, policy: GatePolicy) -> Path:
    """Store ``policy`` for later updates of this home; returns the file written.

    Raises:
        UserInputError: The smoke model does not exist or is not a GGUF file.
    """
    smoke = validate_gguf(policy.smoke_model) if policy.smoke_model is not None else None
    path = gate_settings_path(home_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, gate_settings_json(dataclasses.replace(policy, smoke_model=smoke)))
    return path


def gate_settings_json(policy: GatePolicy) -> dict[str, object]:
    """``policy`` as the stored (and printed) JSON object."""
    return {
        "enabled": policy.enabled,
        "timeout": policy.timeout,
        "max_slowdown": policy.max_slowdown,
        "on_slowdown": policy.on_slowdown,
        "smoke_model": str(policy.smoke_model) if policy.smoke_model else None,
        "smoke_args": list(policy.smoke_args),
    }
