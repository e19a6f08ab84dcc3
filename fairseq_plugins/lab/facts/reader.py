"""Controlled long-document summarization (prepare-summarization.sh --corpus facts): real
filler text with a few marked facts scattered through it; the summary lists the facts in
order of appearance (docs/data-preparation.md, "The facts corpus").

``--input`` is the output folder of ``data-prep/prepare-lm.sh`` (its ``raw/{train,valid,
test}.txt``) or a folder holding those three files: the filler sentences of the train, valid
and test documents come from the matching split, so no filler text is shared between splits.

Each example (drawn from ``numpy.random.default_rng([seed, split_id, i])``, train 0, valid 1,
test 2, as the sorting task does) is:

- a passage of consecutive filler sentences from a random place in the split's text, about
  ``--doc-tokens`` sentencepiece tokens long (counted as words x :data:`TOKENS_PER_WORD`);
- ``--facts`` K carrier sentences ``"The hidden word is VALUE."`` inserted at sentence
  boundaries, the K values drawn WITHOUT replacement from the closed set :data:`VALUES`;
- the summary: the K values in order of appearance, separated by single spaces.

Where the facts go (``--placement``):

- ``strata`` (the default): stratified over the strata ``[0, 1k)``, ``[1k, 4k)`` and
  ``[4k, end)`` of the document (the windows of the truncated summarizers; strata past the
  document's end are dropped): stratum b of the n present holds ``K // n`` facts, one more for
  the first ``K % n``, placed at sentence boundaries drawn uniformly inside
  ``[lo·(1 + MARGIN), hi·(1 - MARGIN))`` so that tokenisation noise rarely moves a fact across a
  window edge. Equal counts per stratum: at 16k tokens a third of the facts lie past 4k.
- ``uniform``: the K sentence boundaries drawn uniformly (without replacement) from those that
  start in ``[0, end·(1 - MARGIN))``, so each stratum holds facts in proportion to its length:
  at 16k tokens about 70% of the facts lie past 4k and 6% in the first 1k.

A model that reads only the first 1k (or 4k) tokens can therefore recover at best the facts it
sees and must guess the others (chance 1 / (|VALUES| - seen) per slot). Filler sentences that
contain a value or the words "hidden word" are dropped, so the carrier sentences are the only
places where values occur.

The reader also returns, per example, the manifest of its facts (written by the pipeline to
``raw/{split}.facts.jsonl``): each fact's value, the character offset of its carrier sentence
and of its value in the normalised document; :func:`add_token_offsets` adds the
sentencepiece-token offsets once ``tok/`` exists.
"""
import json
import os
import re
from typing import Dict, List, Sequence, Tuple

import numpy as np

from fairseq_plugins.lab.data.manifest import files_identity
from fairseq_plugins.lab.data.readers import Reader, ReaderOption
from fairseq_plugins.lab.data.text import SPLITS, _SENTENCE_END, normalize_text, read_lines
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import text_writer, write_atomically

# the closed set of fact values (|VALUES| = 32): single capitalised words; values never repeat
# inside a summary, so a summary repeats no n-gram (decoding blocks repeated trigrams)
VALUES = ("Agate", "Amber", "Azure", "Beryl", "Cobalt", "Coral", "Crimson", "Cyan", "Ebony", "Emerald",
          "Garnet", "Indigo", "Ivory", "Jade", "Jasper", "Lilac", "Magenta", "Maroon", "Ochre", "Olive",
          "Onyx", "Opal", "Quartz", "Russet", "Saffron", "Scarlet", "Sepia", "Silver", "Topaz", "Umber",
          "Violet", "Zircon")
CARRIER = "The hidden word is {}."
# sentencepiece tokens per whitespace word of the books corpus' text (data/books/spm.model, 8000
# pieces: 1.27 train, 1.30 valid, 1.38 test): the nominal length is converted to words with it
TOKENS_PER_WORD = 1.3
# the strata edges, in tokens: the truncated models' windows (docs/summarization.md)
EDGES = (1024, 4096)
MARGIN = 0.1
# filler sentences of this many words only (no headings, no run-on paragraphs)
MIN_WORDS, MAX_WORDS = 4, 60
DEFAULTS = {"doc_tokens": 4096, "facts": 6, "examples": (1000, 100, 100), "seed": 1, "placement": "strata"}
PLACEMENTS = ("strata", "uniform")
_EXCLUDED = re.compile(r"\b(" + "|".join(VALUES) + r")\b|hidden word", re.IGNORECASE)
SIDE_FILE = "facts"


def options(doc_tokens=None, facts=None, examples=None, seed=None, placement=None) -> Dict[str, object]:
    """The validated options ``{"doc_tokens", "facts", "examples": (train, valid, test), "seed",
    "placement"}`` from the pipeline's strings (None: the default).

    Raises:
        ConfigError: a value that is not a positive integer (or three of them for --examples),
            more facts than values, a document too short for its facts, or an unknown placement.
    """
    def integer(name, value, low):
        if not re.fullmatch(r"\d+", str(value)) or int(value) < low:
            raise ConfigError(f"--{name} must be an integer >= {low}, not '{value}'")
        return int(value)

    out = {"doc_tokens": integer("doc-tokens", doc_tokens, 64) if doc_tokens is not None else DEFAULTS["doc_tokens"],
           "facts": integer("facts", facts, 1) if facts is not None else DEFAULTS["facts"],
           "seed": integer("seed", seed, 0) if seed is not None else DEFAULTS["seed"],
           "placement": DEFAULTS["placement"] if placement is None else str(placement)}
    if out["placement"] not in PLACEMENTS:
        raise ConfigError(f"--placement must be one of {', '.join(PLACEMENTS)}, not '{placement}'")
    if examples is None:
        out["examples"] = DEFAULTS["examples"]
    else:
        parts = str(examples).split(",")
        if len(parts) != 3 or not all(re.fullmatch(r"\d+", p.strip()) and int(p) > 0 for p in parts):
            raise ConfigError(f"--examples must be TRAIN,VALID,TEST (three positive integers), not '{examples}'")
        out["examples"] = tuple(int(p) for p in parts)
    if out["facts"] > len(VALUES):
        raise ConfigError(f"--facts must be at most {len(VALUES)} (the closed set's size), not {out['facts']}")
    if out["facts"] * 8 > out["doc_tokens"]:
        raise ConfigError(f"--doc-tokens {out['doc_tokens']} is too short for {out['facts']} facts "
                          f"(at least 8 tokens per fact)")
    return out


def split_files(folder: str) -> Dict[str, str]:
    """``{split: path}`` of the filler text: FOLDER/raw/{split}.txt (prepare-lm.sh output) or
    FOLDER/{split}.txt.

    Raises:
        ConfigError: neither layout is complete.
    """
    for base in (os.path.join(folder, "raw"), folder):
        found = {s: os.path.join(base, f"{s}.txt") for s in SPLITS}
        if all(os.path.isfile(p) for p in found.values()):
            return found
    raise ConfigError(f"{folder} holds neither raw/{{train,valid,test}}.txt nor {{train,valid,test}}.txt "
                      f"(pass the output folder of data-prep/prepare-lm.sh, e.g. data/books)")


def filler_sentences(path: str) -> List[Tuple[str, int]]:
    """The filler sentences of one split file, in text order: ``(normalised sentence, words)``
    for every sentence of MIN_WORDS..MAX_WORDS words without a value or "hidden word"."""
    out = []
    for line in read_lines(path):
        start = 0
        for m in list(_SENTENCE_END.finditer(line)) + [None]:
            end = m.end() if m else len(line)
            sentence = normalize_text(line[start:end])
            start = end
            words = len(sentence.split())
            if MIN_WORDS <= words <= MAX_WORDS and not _EXCLUDED.search(sentence):
                out.append((sentence, words))
    return out


def strata(doc_tokens: int, k: int) -> List[Tuple[float, float, int]]:
    """``(lo, hi, facts)`` in words: where the facts of each stratum of a document of
    ``doc_tokens`` nominal tokens go, and how many (module docstring; every stratum keeps
    MARGIN clear at both ends, so no fact lies in the last 10% of the document)."""
    edges = [0] + [e for e in EDGES if e < doc_tokens] + [doc_tokens]
    present = len(edges) - 1
    return [(edges[b] * (1 + MARGIN) / TOKENS_PER_WORD, edges[b + 1] * (1 - MARGIN) / TOKENS_PER_WORD,
             k // present + (1 if b < k % present else 0)) for b in range(present)]


def regions(doc_tokens: int, k: int, placement: str) -> List[Tuple[float, float, int]]:
    """``(lo, hi, facts)`` in words: the regions the facts of a document are drawn from
    (:func:`strata`, or one region ``[0, end·(1 - MARGIN))`` holding all K for ``uniform``)."""
    if placement == "uniform":
        return [(0.0, doc_tokens * (1 - MARGIN) / TOKENS_PER_WORD, k)]
    return strata(doc_tokens, k)


def make_example(sentences: Sequence[Tuple[str, int]], doc_tokens: int, k: int,
                 rng: np.random.Generator, placement: str = "strata") -> Tuple[str, str, List[Dict[str, object]]]:
    """One example: ``(document, summary, facts)``, facts = ``[{"value", "char", "sentence_char"}]``
    in order of appearance (character offsets in ``document``); ``placement`` as in the module doc.

    Raises:
        ConfigError: the split's text is shorter than one document, or a region of the document
            has fewer sentence boundaries than facts to place there.
    """
    doc_words = round(doc_tokens / TOKENS_PER_WORD)
    total = sum(w for _, w in sentences)
    if total < doc_words:
        raise ConfigError(f"the filler text has {total} words, fewer than one document's {doc_words} words "
                          f"(lower --doc-tokens or use a larger corpus)")
    start = int(rng.integers(len(sentences)))
    passage, words, offsets = [], 0, []  # offsets: words before each passage sentence
    while words < doc_words:
        sentence, w = sentences[(start + len(passage)) % len(sentences)]
        offsets.append(words)
        passage.append(sentence)
        words += w
    values = [VALUES[i] for i in rng.choice(len(VALUES), size=k, replace=False)]
    slots = []  # the passage sentence index before which each fact goes
    for lo, hi, count in regions(doc_tokens, k, placement):
        candidates = [i for i, o in enumerate(offsets) if lo <= o < hi and i not in slots]
        if len(candidates) < count:
            hint = "raise --doc-tokens or lower --facts" + (", or --placement uniform" if placement == "strata" else "")
            raise ConfigError(f"--doc-tokens {doc_tokens} leaves too few sentences for {k} facts ({hint})")
        slots += [candidates[j] for j in rng.choice(len(candidates), size=count, replace=False)]
    before = {slot: value for slot, value in zip(sorted(slots), values)}
    parts, facts, char = [], [], 0
    for i, sentence in enumerate(passage):
        if i in before:
            carrier = CARRIER.format(before[i])
            facts.append({"value": before[i], "sentence_char": char, "char": char + carrier.index(before[i])})
            parts.append(carrier)
            char += len(carrier) + 1
        parts.append(sentence)
        char += len(sentence) + 1
    document = " ".join(parts)
    if normalize_text(document) != document:
        raise ConfigError("a facts document changed under text normalisation; its character offsets would be wrong")
    return document, " ".join(values), facts


def read(folder, doc_tokens=None, facts=None, examples=None, seed=None, placement=None):
    """The examples of every split: ``(split, id, document, summary, places, manifest)``, with
    ``manifest = {"id", "facts": [...]}`` (:func:`make_example`)."""
    opts = options(doc_tokens, facts, examples, seed, placement)
    for split_id, (split, path) in enumerate(split_files(folder).items()):
        sentences = filler_sentences(path)
        if not sentences:
            raise ConfigError(f"{path} has no sentences of {MIN_WORDS}-{MAX_WORDS} words to use as filler")
        for i in range(opts["examples"][split_id]):
            rng = np.random.default_rng([opts["seed"], split_id, i])
            try:
                document, summary, found = make_example(sentences, opts["doc_tokens"], opts["facts"], rng,
                                                        opts["placement"])
            except ConfigError as err:  # name the split's file: its text is what falls short
                raise ConfigError(f"{split} ({path}): {err}") from None
            ex_id = f"facts-{split}-{i}"
            yield (split, ex_id, document, summary, (f"{ex_id} (document)", f"{ex_id} (summary)"),
                   {"id": ex_id, "facts": found})


def identity(folder, doc_tokens=None, facts=None, examples=None, seed=None, placement=None):
    """The manifest's input: the three filler files' content, the generator's options
    (``"options"``: what the user sets) and its constants (``"generator"``)."""
    ident = files_identity(folder, list(split_files(folder).values()))
    opts = options(doc_tokens, facts, examples, seed, placement)
    ident["options"] = {**opts, "examples": list(opts["examples"])}
    ident["generator"] = {"values": list(VALUES), "carrier": CARRIER, "tokens_per_word": TOKENS_PER_WORD,
                          "edges": list(EDGES), "margin": MARGIN, "filler_words": [MIN_WORDS, MAX_WORDS]}
    return ident


# ----------------------------------------------------------------------------- token offsets


def piece_offsets(text: str, pieces: Sequence[str]) -> List[int]:
    """The character offset in ``text`` where each sentencepiece piece starts (its leading ``▁``,
    the space before a word, counts as the character before the word).

    Raises:
        ConfigError: the pieces do not spell ``text`` (not its encoding).
    """
    starts, pos = [], -1  # sentencepiece's dummy prefix: the first "▁" stands before character 0
    for piece in pieces:
        starts.append(pos)
        pos += len(piece)
    if "".join(pieces).replace("\u2581", " ") != " " + text:
        raise ConfigError("the sentencepiece pieces do not spell the document (tok/ is not the encoding of raw/)")
    return starts


def token_of(starts: Sequence[int], char: int) -> int:
    """The index of the piece that holds character ``char`` (``starts`` from :func:`piece_offsets`)."""
    lo, hi = 0, len(starts)
    while hi - lo > 1:  # last piece starting at or before char
        mid = (lo + hi) // 2
        if starts[mid] <= char:
            lo = mid
        else:
            hi = mid
    return lo


def add_token_offsets(out: str) -> None:
    """Complete OUT/raw/{split}.facts.jsonl with sentencepiece offsets from OUT/tok/{split}.source:
    per example ``"tokens"`` (pieces of the source, without the ``</s>`` fairseq appends) and per
    fact ``"token"`` (the index of the first piece of its value) and ``"token_end"`` (one past
    its last piece). Rewritten whole (idempotent).

    Raises:
        ConfigError: line counts differ, or the pieces do not spell the document.
    """
    writers = {}
    for split in SPLITS:
        manifest_path = os.path.join(out, "raw", f"{split}.{SIDE_FILE}.jsonl")
        texts = read_lines(os.path.join(out, "raw", f"{split}.source"))
        pieces = read_lines(os.path.join(out, "tok", f"{split}.source"))
        entries = [json.loads(line) for line in read_lines(manifest_path)]
        if not len(texts) == len(pieces) == len(entries):
            raise ConfigError(f"{manifest_path}: {len(entries)} lines, but raw/{split}.source has {len(texts)} "
                              f"and tok/{split}.source {len(pieces)}")
        for text, line, entry in zip(texts, pieces, entries):
            toks = line.split(" ")
            starts = piece_offsets(text, toks)
            entry["tokens"] = len(toks)
            for fact in entry["facts"]:
                fact["token"] = token_of(starts, fact["char"])
                fact["token_end"] = token_of(starts, fact["char"] + len(fact["value"]) - 1) + 1
        writers[manifest_path] = text_writer("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
    write_atomically(writers)


READER = Reader(
    name="facts", pipeline="summarization", read=read, identity=identity, side_file=SIDE_FILE,
    complete_side_file=add_token_offsets, prepared_defaults={"placement": DEFAULTS["placement"]},
    summary="controlled long documents: real filler from prepare-lm.sh's raw/ + marked facts; summary = the facts in order",
    options=(ReaderOption("doc-tokens", f"facts: document length in sentencepiece tokens [{DEFAULTS['doc_tokens']}]"),
             ReaderOption("facts", f"facts: facts per document, from {len(VALUES)} values [{DEFAULTS['facts']}]"),
             ReaderOption("examples", "facts: examples per split, TRAIN,VALID,TEST [1000,100,100]"),
             ReaderOption("seed", f"facts: random seed [{DEFAULTS['seed']}]"),
             ReaderOption("placement", "facts: where the facts go: strata (equal counts in [0,1k), [1k,4k), "
                          "[4k,end)) or uniform (over the document) [strata]", choices=PLACEMENTS)),
)
