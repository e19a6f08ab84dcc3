#!/usr/bin/env python3
"""Keep what the user needs from a fairseq tool's stderr: drop the libraries' warnings.

    fairseq-train ... 2> >(python3 scripts/log_filter.py >&2)

Reads lines and writes them on at once, except
* Python warning blocks (``FILE:LINE: SomethingWarning: message`` + message lines + the source
  line) raised in an installed package (``site-packages``/``dist-packages``: hydra's pages of
  deprecation notes, torch's and fairseq's FutureWarnings), and hydra's ``sys:1`` schema warning;
* fairseq's ``Please install tensorboardX`` line.
Warnings from this project's own code, errors and tracebacks pass. At the end, if anything was
dropped, one line says how many lines. ``QUIET=0`` in the environment passes everything.
:func:`quiet_imports` does the same inside a script that imports fairseq itself.
"""

import os
import re
import sys

HEADER = re.compile(r"^(?P<path>\S[^:]*):\d+: (?P<category>\w*Warning): ")
LIBRARY = ("site-packages", "dist-packages")
MAX_BLOCK = 20  # a longer "warning block" is not one: pass it
# lines that never belong to a warning's message: fairseq's log lines, tracebacks, errors
NOT_MESSAGE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|Traceback |\S+: error: )")


def _library_warning(block) -> bool:
    path = HEADER.match(block[0]).group("path")
    if path == "sys":
        return "hydra" in "".join(block).lower()
    return any(part in path for part in LIBRARY)


def filter_lines(lines, write):
    """Write the lines to keep with ``write``; returns how many were dropped."""
    dropped, block = 0, []

    def end_block():
        nonlocal dropped, block
        if block and _library_warning(block):
            dropped += len(block)
        else:
            for b in block:
                write(b)
        block = []

    for line in lines:
        if HEADER.match(line):
            end_block()
            block = [line]
            continue
        if block and NOT_MESSAGE.match(line):
            end_block()
        if block:
            block.append(line)
            if line.startswith("  ") or len(block) > MAX_BLOCK:  # the source line ends a warning
                end_block()
            continue
        if "Please install tensorboardX" in line:
            dropped += 1
            continue
        write(line)
    end_block()
    return dropped


def quiet_imports():
    """Inside a script, before importing fairseq: no tensorboardX line, no library warnings."""
    import logging
    import warnings

    if os.environ.get("QUIET") == "0":
        return
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
    for module in ("hydra", "torch", "fairseq", "omegaconf"):
        warnings.filterwarnings("ignore", module=rf"{module}(\.|$)")


def main():
    if os.environ.get("QUIET") == "0":
        for line in iter(sys.stdin.readline, ""):
            sys.stdout.write(line)
            sys.stdout.flush()
        return 0

    def write(line):
        sys.stdout.write(line)
        sys.stdout.flush()

    dropped = filter_lines(iter(sys.stdin.readline, ""), write)
    if dropped:
        write(f"({dropped} lines of library warnings hidden; QUIET=0 shows them)\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C reaches the whole pipeline; the tool reports it
        sys.exit(130)
