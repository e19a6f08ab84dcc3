"""Writers of a data-prep output folder's text files (docs/data-preparation.md).

:class:`SplitWriter`: language-modelling documents into ``raw/{split}.txt`` and
``raw/documents.tsv``; :func:`write_examples`: summarization pairs into ``raw/{split}.ids``,
``.source``, ``.target``; :func:`write_fairseq_dict`: a fairseq ``dict.txt`` from sentencepiece
pieces and their counts (:func:`count_pieces`). Standard library only.
"""
import os

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import written_in_place
from fairseq_plugins.lab.data.text import SPLITS, finish_paragraphs


def _clean_name(name):
    return name.replace("\t", " ").replace("\n", " ")


class SplitWriter:
    """LM text: writes documents to OUT/{split}.txt (one paragraph per line, one empty line
    between documents) and, grouped by split in the same order, one row per document to
    OUT/documents.tsv. A document without text is listed in ``empty`` instead."""

    def __init__(self, out):
        os.makedirs(out, exist_ok=True)
        self.files = {s: open(written_in_place(os.path.join(out, f"{s}.txt")), "w", encoding="utf-8", newline="\n")
                      for s in SPLITS}
        self.tsv_path = written_in_place(os.path.join(out, "documents.tsv"))
        self.rows = {s: [] for s in SPLITS}
        self.count = {s: 0 for s in SPLITS}
        self.empty = []

    def add(self, split, name, paragraphs):
        lines = finish_paragraphs(paragraphs)
        if not lines:
            self.empty.append(name)
            return
        f = self.files[split]
        if self.count[split]:
            f.write("\n")  # exactly one empty line between documents
        f.write("".join(line + "\n" for line in lines))
        self.count[split] += 1
        self.rows[split].append(f"{split}\t{_clean_name(name)}\t{len(lines)}\t{sum(len(x) for x in lines)}\n")

    def close(self):
        for f in self.files.values():
            f.close()
        with open(self.tsv_path, "w", encoding="utf-8", newline="\n") as tsv:
            tsv.write("split\tname\tlines\tchars\n")
            for split in SPLITS:
                tsv.write("".join(self.rows[split]))


def write_examples(out, kept):
    """Summarization text: OUT/{split}.ids, .source, .target, one example per line, from
    ``kept[split]`` = [(id, document, summary), ...]."""
    os.makedirs(out, exist_ok=True)
    for split in SPLITS:
        for ext, col in (("ids", 0), ("source", 1), ("target", 2)):
            with open(written_in_place(os.path.join(out, f"{split}.{ext}")), "w", encoding="utf-8",
                      newline="\n") as f:
                for ex in kept[split]:
                    f.write(ex[col].replace("\n", " ") + "\n")


# ----------------------------------------------------------------------------- fairseq dictionary


def count_pieces(paths):
    """{piece: occurrences} over whitespace-separated encoded files."""
    counts = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                for tok in line.split():
                    counts[tok] = counts.get(tok, 0) + 1
    return counts


def write_fairseq_dict(path, pieces, counts):
    """``piece count`` lines, in the given order; a piece fairseq cannot hold is an error."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for piece in pieces:
            if not piece or any(c.isspace() for c in piece):
                raise ConfigError(f"sentencepiece piece {piece!r} cannot be written to a fairseq dictionary")
            f.write(f"{piece} {counts.get(piece, 0)}\n")
