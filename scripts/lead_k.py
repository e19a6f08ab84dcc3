#!/usr/bin/env python3
"""Lead-k baseline: the first k sentences of each source document.

    python scripts/lead_k.py --source data/aclsum/raw/test.source --k 3 --out lead3.txt [--force]

Reads one document per line (the prepared ``raw/SPLIT.source``) and writes one line per
document: its first k sentences joined by one space (fewer if the document has fewer; an
empty document gives an empty line), so the output is line-aligned with ``raw/SPLIT.target``
and is scored by ``scripts/score_summaries.py`` exactly like a model's ``hyp.txt``.

Sentence splitting is a regular expression (nltk's punkt model is data that cannot be fetched
offline): a sentence ends at ``.``, ``!`` or ``?`` (optionally followed by closing quotes or
brackets) when whitespace and then an upper-case letter, a digit or an opening quote/bracket
follow, except after a known abbreviation (``e.g.``, ``i.e.``, ``et al.``, ``Fig.``, ``Eq.``,
``Sec.``, ``Tab.``, ``vs.``, ``cf.``, ``Dr.``, ``Mr.`` ...) or a single-letter initial
(``J. Smith``). Line breaks inside a text (rare here: one document per line) also end a sentence.
"""

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from script_errors import ScriptError, run_main  # noqa: E402

PROG = "lead_k.py"

# lower-cased, without the final period; multi-word ones are matched on the text before the period
ABBREVIATIONS = {
    "e.g", "i.e", "al", "etc", "fig", "figs", "eq", "eqs", "sec", "secs", "tab", "vs", "cf", "dr", "mr",
    "mrs", "ms", "prof", "no", "nos", "approx", "resp", "inc", "ltd", "jr", "sr", "st", "vol", "pp", "ch",
    "ref", "refs", "viz", "ca", "corp", "dept", "est", "fn", "app", "def", "thm", "lem", "alg",
}
# a candidate end: terminal punctuation, closing quotes/brackets, whitespace, then a sentence start
_BOUNDARY = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_WORD_BEFORE = re.compile(r"(\S+)$")


def _is_abbreviation(text_before_period: str) -> bool:
    m = _WORD_BEFORE.search(text_before_period)
    if not m:
        return False
    word = m.group(1).lstrip("\"'(\u201c\u2018[").lower()
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def split_sentences(text: str) -> list:
    """Split ``text`` into sentences (see the module docstring for the rule).

    Returns the sentences stripped, empty ones dropped; ``[]`` for blank text.
    """
    sentences = []
    for block in text.split("\n"):
        start = 0
        for m in _BOUNDARY.finditer(block):
            if block[m.start()] == "." and _is_abbreviation(block[start:m.start()]):
                continue
            end = m.end()
            sentence = block[start:end].strip()
            if sentence:
                sentences.append(sentence)
            start = end
        rest = block[start:].strip()
        if rest:
            sentences.append(rest)
    return sentences


def lead(text: str, k: int) -> str:
    """The first ``k`` sentences of ``text`` joined by single spaces."""
    return " ".join(split_sentences(text)[:k])


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--source", required=True, help="documents, one per line (e.g. OUT/raw/test.source)")
    p.add_argument("--k", type=int, default=3, help="sentences to keep per document (default 3)")
    p.add_argument("--out", required=True, help="output file, one summary per line")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = p.parse_args(argv)
    sys.exit(run_main(lambda: write_lead(args), PROG, 2))


def write_lead(args):
    if args.k < 1:
        raise ScriptError(f"--k must be >= 1, got {args.k}")
    if not os.path.isfile(args.source):
        raise ScriptError(f"--source {args.source} not found")
    if os.path.exists(args.out) and not args.force:
        raise ScriptError(f"{args.out} exists (use --force to overwrite)")
    with open(args.source, encoding="utf-8") as f:
        docs = f.read().split("\n")
    if docs and docs[-1] == "":
        docs.pop()
    if not docs:
        raise ScriptError(f"--source {args.source} is empty")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for doc in docs:
            f.write(lead(doc.rstrip("\r"), args.k) + "\n")
    os.replace(tmp, args.out)
    print(f"{PROG}: wrote lead-{args.k} of {len(docs)} documents to {args.out}")


if __name__ == "__main__":
    main()
