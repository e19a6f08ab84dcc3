"""The Lead-k baseline: the first k sentences of each source document (docs/summarization.md#lead-k).

Its output is line-aligned with ``raw/SPLIT.target`` and scored exactly like a model's
``hyp.txt`` (:mod:`.scoring`).
"""

import os

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import write_atomically
from fairseq_plugins.lab.summarization.lines import lines_writer, read_lines
from fairseq_plugins.lab.summarization.sentences import split_sentences


def lead(text: str, k: int) -> str:
    """The first ``k`` sentences of ``text`` (:func:`.split_sentences`) joined by single spaces
    (fewer if it has fewer; ``""`` for blank text)."""
    return " ".join(split_sentences(text)[:k])


def write_lead(source: str, k: int, out: str, force: bool = False) -> int:
    """Write the Lead-``k`` summary of each document of ``source`` (one per line) to ``out``, one
    line per document, whole or not at all. Returns the number of documents.

    Raises:
        ConfigError: ``k`` < 1, ``source`` missing or empty, ``out`` exists without ``force``.
    """
    if k < 1:
        raise ConfigError(f"--k must be >= 1, got {k}")
    docs = read_lines(source, "--source")
    if os.path.exists(out) and not force:
        raise ConfigError(f"{out} exists (use --force to overwrite)")
    write_atomically({out: lines_writer([lead(doc, k) for doc in docs])})
    return len(docs)
