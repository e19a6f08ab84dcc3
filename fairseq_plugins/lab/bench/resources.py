"""Time and memory of one benchmark measurement (docs/benchmark.md).

The clock (``--clock``), the process's resident and peak memory, the per-measurement memory
budget (``--memory-limit-mb``), the workers' C allocator (``--allocator``), recognising an
out-of-memory failure, and the timed repeats a measurement takes. Memory is in MB (2**20
bytes), times in seconds unless a name says ms.
"""

import ctypes
import gc
import os
import resource
import statistics
import time
from typing import Callable, Dict, Tuple


def clock(name: str) -> Callable[[], float]:
    """The timer of ``--clock``: ``wall`` = :func:`time.perf_counter`; ``cpu`` =
    :func:`time.process_time`, the CPU seconds of this process (all its threads), which
    other jobs on a shared machine do not inflate; with one thread it reads what the wall
    clock reads on an idle core."""
    return time.process_time if name == "cpu" else time.perf_counter


def synchronize(device) -> None:
    """Wait for the GPU's queued work (nothing on a CPU), so that a clock reading covers it."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


# ---- the process's memory ----------------------------------------------------------------


def _statm_mb(field: int) -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[field]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb() -> float:
    """The process's resident memory now, in MB."""
    return _statm_mb(1)


def peak_rss_mb() -> float:
    """The process's peak resident memory over its lifetime, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# glibc serves blocks of 32 MB or more (its largest dynamic mmap threshold) with a fresh mmap and
# returns them at free, so that a long context's activations are page-faulted in at every use
# (what that costs is measured in docs/benchmark.md); these thresholds keep such blocks in the process
CACHED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**40)}


def allocator_environment(allocator: str) -> Dict[str, str]:
    """Environment of a worker for ``--allocator``: ``cached`` keeps freed memory in the
    process (no mmap per large tensor, no trimming); ``system`` leaves glibc's defaults."""
    return dict(CACHED_MALLOC) if allocator == "cached" else {}


def apply_memory_limit(limit_mb: float, device) -> None:
    """Make allocations beyond ``limit_mb`` MB (above what the process holds now) fail.
    CUDA: ``torch.cuda.set_per_process_memory_fraction``; CPU: an address-space limit
    (``RLIMIT_AS``), approximate since it counts address space, not resident memory."""
    import torch

    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = (torch.cuda.memory_allocated(device) + limit_mb * 2**20) / total
        torch.cuda.set_per_process_memory_fraction(min(fraction, 1.0), device)
        return
    torch.ones(64, 64) @ torch.ones(64, 64)  # start the thread pool (its stacks count) first
    limit = int((_statm_mb(0) + limit_mb) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA out-of-memory, a CPU allocator failure or Python's MemoryError."""
    import torch

    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _release_freed_memory() -> None:
    """Give the memory the C allocator keeps after frees back to the system (glibc's
    ``malloc_trim``), so that the resident memory is what is in use; elsewhere a no-op."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak_resident() -> bool:
    """Reset the process's peak resident memory to the current one (Linux ≥ 4.0); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_resident_mb(reset: bool) -> float:
    if not reset:  # the lifetime peak
        return peak_rss_mb()
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


class Peak:
    """The peak memory since :meth:`start`, in MB above what was in use at the first start
    (CUDA: allocated tensors; CPU: resident memory, the allocator's free memory released and
    the kernel's peak reset through ``/proc/self/clear_refs``)."""

    def __init__(self, device):
        import torch
        self.torch, self.device, self.base, self.reset = torch, device, None, False

    def start(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats(self.device)
            now = self.torch.cuda.memory_allocated(self.device) / 2**20
        else:
            _release_freed_memory()
            self.reset = _reset_peak_resident()
            now = rss_mb()
        self.base = now if self.base is None else self.base

    def peak(self) -> float:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            top = self.torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            top = _peak_resident_mb(self.reset)
        return max(top - self.base, 0.0)


# ---- timed repeats --------------------------------------------------------------------------


def time_and_peak(run_once: Callable[[], None], args, device) -> Tuple[float, float]:
    """Median seconds of ``run_once`` (``--repeats`` after ``--warmup``, on ``--clock``) and the
    peak memory in MB above what the process holds when called (the built model and its input),
    under ``--memory-limit-mb``. CPU: the process's peak resident memory, which the warm-up
    reaches as well as the timed repeats."""
    import torch

    if args.memory_limit_mb is not None:
        apply_memory_limit(args.memory_limit_mb, device)
    timer = clock(args.clock)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_mb()
    for _ in range(args.warmup):
        run_once()
    times = []
    for _ in range(args.repeats):
        synchronize(device)
        t0 = timer()
        run_once()
        synchronize(device)
        times.append(timer() - t0)
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = max(peak_rss_mb() - base, 0.0)
    return statistics.median(times), peak


def median_ms(fn: Callable[[], object], repeats: int, device, timer: Callable[[], float]) -> float:
    """Median milliseconds of ``fn()`` on ``timer`` over ``repeats`` calls after two untimed ones."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = timer()
        fn()
        synchronize(device)
        times.append(timer() - t0)
    return 1000 * statistics.median(times)
