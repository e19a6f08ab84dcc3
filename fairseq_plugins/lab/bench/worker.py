"""Every benchmark measurement runs in a fresh worker process (docs/benchmark.md).

A fresh process per measurement keeps one measurement's memory (the peak resident size, the
allocator's cache, ``--memory-limit-mb``) and thread pool out of the next. The parent calls
:func:`run` with a measuring function of a ``fairseq_plugins.lab.bench`` module and its keyword
arguments; the worker (``python -m fairseq_plugins.lab.bench JOB``, :func:`main`) rebuilds the
options, sets ``--threads``, calls ``function(args, **kwargs)`` and prints its result (a dict
of JSON values) as the last line of its output.
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
from typing import Callable, Dict, List, Optional, Tuple

from fairseq_plugins.lab.bench.resources import allocator_environment

PACKAGE = "fairseq_plugins.lab.bench."
# outcomes of a measurement that are results (the row reads them), not failures of the run
OUTCOMES = ("OOM", "timeout > ")
# the measurements of this process that failed otherwise: (what was measured, the error), in order
FAILURES: List[Tuple[str, str]] = []


def _settings(args) -> Dict:
    """The options a worker needs: every JSON value of ``args``."""
    return {k: v for k, v in vars(args).items() if v is None or isinstance(v, (bool, int, float, str, list))}


def run(function: Callable[..., Dict], args, timeout: Optional[float] = None, **kwargs) -> Dict:
    """``function(args, **kwargs)`` in a fresh worker process, under ``--allocator``, given at most
    ``timeout`` seconds (default ``--timeout``): its result, or ``{"error": ...}``: ``"OOM"``
    (an allocation failure, or the worker killed by the kernel), ``"timeout > Ns"``, or the last
    line the worker wrote to stderr (a failure: also recorded in :data:`FAILURES`, so that the
    run exits non-zero)."""
    result = _run(function, args, timeout, **kwargs)
    error = result.get("error")
    if error is not None and not str(error).startswith(OUTCOMES):
        what = ", ".join(f"{k} {v}" for k, v in kwargs.items())
        FAILURES.append((f"{function.__module__.rsplit('.', 1)[-1]} {what}".strip(), str(error)))
    return result


def _run(function: Callable[..., Dict], args, timeout: Optional[float], **kwargs) -> Dict:
    """:func:`run` without the bookkeeping of failures."""
    timeout = args.timeout if timeout is None else timeout
    job = {"call": f"{function.__module__}:{function.__qualname__}", "kwargs": kwargs, "settings": _settings(args)}
    cmd = [sys.executable, "-m", PACKAGE.rstrip("."), json.dumps(job)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **allocator_environment(args.allocator)})
    except subprocess.TimeoutExpired:
        return {"error": f"timeout > {timeout:.0f}s"}
    if proc.returncode != 0:
        text = proc.stderr
        if "out of memory" in text.lower() or "can't allocate memory" in text.lower() or \
                proc.returncode in (-9, 137):  # -9/137: killed, by the kernel's OOM killer on Linux
            return {"error": "OOM"}
        return {"error": (text.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def work(job: Dict) -> Dict:
    """In the worker: the result of the job's function, ``{"error": "OOM"}`` after an
    allocation failure (any other exception propagates)."""
    from fairseq_plugins.lab.bench.resources import is_out_of_memory

    module, _, name = job["call"].partition(":")
    if not module.startswith(PACKAGE):
        raise ValueError(f"a benchmark worker runs functions of {PACKAGE}* only, not {module}")
    function = getattr(importlib.import_module(module), name)
    args = argparse.Namespace(**job["settings"])
    if args.threads is not None:
        import torch
        torch.set_num_threads(args.threads)
    try:
        return function(args, **job["kwargs"])
    except (RuntimeError, MemoryError) as err:  # CUDA/CPU allocation failures
        if not is_out_of_memory(err):
            raise
        return {"error": "OOM"}


def main(argv: List[str]) -> int:
    """``python -m fairseq_plugins.lab.bench JOB``: print :func:`work`'s result as one JSON line."""
    print(json.dumps(work(json.loads(argv[0]))))
    return 0
