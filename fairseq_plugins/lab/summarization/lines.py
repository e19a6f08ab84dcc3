"""Line-aligned text files: one example per line (the prepared ``raw/SPLIT.source`` and
``raw/SPLIT.target``, a model's ``hyp.txt``, a Lead-k output; docs/summarization.md)."""

import os
from typing import List

from fairseq_plugins.errors import ConfigError


def read_lines(path: str, what: str) -> List[str]:
    """The lines of ``path``: split at ``\\n`` (a final newline ends the last line), a trailing
    ``\\r`` dropped; other Unicode line separators stay inside their line, as in the raw data.

    Raises:
        ConfigError: ``path`` is missing, empty or not UTF-8 (``what`` names it in the message, e.g.
            ``--hyp``).
    """
    if not os.path.isfile(path):
        raise ConfigError(f"{what} {path} not found")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError as e:
        with open(path, "rb") as f:
            line = f.read()[:e.start].count(b"\n") + 1
        raise ConfigError(f"{what} {path}:{line} is not UTF-8 text; convert the file to UTF-8 (e.g. iconv -f latin1 "
                          "-t utf-8)") from None
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ConfigError(f"{what} {path} is empty")
    return [line.rstrip("\r") for line in lines]


def count_lines(path: str) -> int:
    """How many lines ``path`` holds (a last line without its newline counts; an empty file: 0)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text.count("\n") + (text != "" and not text.endswith("\n"))


def lines_writer(lines: List[str]):
    """A writer (:func:`fairseq_plugins.lab.common.files.write_atomically`) of ``lines``, each ended
    by ``\\n`` (no line: an empty file)."""
    def write(path: str) -> None:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(line + "\n" for line in lines)
    return write
