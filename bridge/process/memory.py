"""The bridge's own memory: big blocks it frees go back to the system, not into its heap."""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Final

log = logging.getLogger(__name__)

#: mallopt's parameter for the size from which a block is a mapping of its own (malloc.h).
M_MMAP_THRESHOLD: Final = -3
#: Blocks of this size or more are mapped on their own and unmapped when freed.
MMAP_THRESHOLD_BYTES: Final = 1024 * 1024


def return_big_blocks() -> bool:
    """Fix glibc's mmap threshold at a megabyte; whether it was set (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc's among them
    except (OSError, AttributeError):  # musl and others: no mallopt to call
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused; the heap keeps glibc's own threshold")
    return done
