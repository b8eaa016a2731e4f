"""A clock whose time moves only when a test (or the code's ``sleep`` seam) moves it."""

from __future__ import annotations


class FakeClock:
    """A :class:`~llama_runtime.runtime.clock.Clock` for tests.

    Wall and monotonic time both read ``now``; calling the clock reads it too,
    for seams that take a plain ``() -> float``.
    """

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
