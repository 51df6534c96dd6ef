"""Memory allocation for the processes that build big arrays: reuse freed memory.

The analysis (the Spark workers' per-partition checks, the report's digest)
and the history's columnar copy allocate and free arrays of hundreds of MB,
block after block. By default glibc serves every allocation over 32 MB with a
fresh ``mmap`` and returns it on ``free``, and pyarrow's mimalloc pool gives
pages back as well: each new array then costs the kernel zeroing every page
of it again. Measured on this machine kind (2 cores), about half of a large
partition's check CPU was that zeroing (an 18M-message partition: 6.6 s of
system time in 11.8 s of CPU; 1.0 s in 6.0 s with these settings), and a
quarter of the copy's on the final drain's lines (13.5 s to 9.8 s for 200 MB).

``ENV`` says the same to a process about to start (the Spark workers', by
``spark.executorEnv``; the recording process's helpers, by
``history.child_process.start``): allocations below 1 GiB come from the heap,
which keeps up to 2 GiB of freed memory for reuse, and pyarrow allocates
through glibc too. ``tune`` does it in a running process (glibc's ``mallopt``;
pyarrow's default pool). The cost is memory not handed back while the process
lives: its peak stays resident, which the callers' memory rules already count
(``harness.analysis.fits_beside``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 1 << 30          # bytes: smaller allocations from the heap, not a fresh mapping each
TRIM_THRESHOLD = (1 << 31) - 1    # bytes of free memory at the heap's top kept, not handed back
ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
       "ARROW_DEFAULT_MEMORY_POOL": "system"}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3       # mallopt's parameters (malloc.h)


def tune() -> bool:
    """This process from now on: glibc as ``ENV`` says, and pyarrow's default
    pool glibc's. False (and nothing changed but what succeeded) where the C
    library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        done = (libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(MMAP_THRESHOLD)) == 1
                and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(TRIM_THRESHOLD)) == 1)
    except (OSError, AttributeError) as exc:
        log.debug("no mallopt: %s", exc)
        return False
    if done:
        import pyarrow as pa   # here, not at the top: ENV's users (the drain's processes) need no pyarrow
        pa.set_memory_pool(pa.system_memory_pool())
    return done
