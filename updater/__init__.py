"""llama-runtime's updater: getting a llama.cpp release onto this machine.

Imports are lazy so that ``llama-runtime status`` starts fast.
"""

from __future__ import annotations
