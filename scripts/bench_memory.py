"""Memory side of scripts/benchmark.py: resident and address-space size, the per-measurement
memory budget (``--memory-limit-mb``) and recognising an out-of-memory failure; and the clock
(``--clock``). Run through scripts/benchmark.py, not on its own."""

import os
import resource
import time


def clock(name: str):
    """The timer of ``--clock``: ``wall`` = :func:`time.perf_counter`; ``cpu`` =
    :func:`time.process_time`, the CPU seconds of this process (all its threads), which
    other jobs on a shared machine do not inflate; with one thread it reads what the wall
    clock reads on an idle core."""
    return time.process_time if name == "cpu" else time.perf_counter


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# glibc serves blocks of 32 MB or more (its largest dynamic mmap threshold) with a fresh mmap and
# returns them at free, so a 64k-token activation (64k × 128 × 4 bytes) is page-faulted in at every
# use: measured on a 2-core x86_64 CPU, the summarizer encoder's forward spent 4.1 of its 38.3 µs per
# token in the kernel at 64k tokens against 0.8 of 32.1 at 16k, and none with these settings
CACHED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**40)}


def allocator_environment(allocator: str) -> dict:
    """Environment of a worker for ``--allocator``: ``cached`` keeps freed memory in the
    process (no mmap per large tensor, no trimming); ``system`` leaves glibc's defaults."""
    return dict(CACHED_MALLOC) if allocator == "cached" else {}


def peak_rss_mb():
    """The process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _address_space_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def apply_memory_limit(limit_mb, device):
    """Make allocations beyond ``limit_mb`` MB (above what the process holds now) fail."""
    import torch

    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = (torch.cuda.memory_allocated(device) + limit_mb * 2**20) / total
        torch.cuda.set_per_process_memory_fraction(min(fraction, 1.0), device)
        return
    torch.ones(64, 64) @ torch.ones(64, 64)  # start the thread pool (its stacks count) first
    limit = int((_address_space_mb() + limit_mb) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def is_out_of_memory(err) -> bool:
    """CUDA out-of-memory, a CPU allocator failure or Python's MemoryError."""
    import torch

    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
