"""The sentence splitter of the Lead-k baseline and of ROUGE-Lsum (docs/summarization.md#lead-k).

A regular expression, as nltk's punkt model is data that cannot be fetched offline: a sentence
ends at ``.``, ``!`` or ``?`` (optionally followed by closing quotes or brackets) when
whitespace and then an upper-case letter, a digit or an opening quote/bracket follow, except
after a known abbreviation (``e.g.``, ``i.e.``, ``et al.``, ``Fig.``, ``Eq.``, ``Sec.``,
``Tab.``, ``vs.``, ``cf.``, ``Dr.``, ``Mr.`` ...) or a single-letter initial (``J. Smith``).
Line breaks inside a text (rare: the data holds one document per line) also end a sentence.
"""

import re
from typing import List

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


def split_sentences(text: str) -> List[str]:
    """The sentences of ``text`` (the module docstring's rule), stripped, empty ones dropped;
    ``[]`` for blank text."""
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
