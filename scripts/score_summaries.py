#!/usr/bin/env python3
"""Score summaries against references: ROUGE-1/2/L/Lsum F1 and sacreBLEU.

    python scripts/score_summaries.py --hyp RUN/test/hyp.txt --ref data/aclsum/raw/test.target \\
        --model infinite_former --checkpoint RUN/checkpoint_last.pt --split test \\
        --decoding "beam=4 lenpen=2.0 ..." --out RUN/test [--force]

--hyp and --ref hold one summary per line, line-aligned (detokenized text: the output of
scripts/generate-summaries.sh or scripts/lead_k.py, and the prepared raw/SPLIT.target).
Metrics, all x100:
  rouge1, rouge2, rougeL  mean over examples of the F1 of rouge-score's
                          RougeScorer(['rouge1', 'rouge2', 'rougeL'], tokenizer=UnicodeTokenizer()):
                          rouge-score's own tokenizer and Porter stemmer on ASCII text, and
                          letter/digit runs (Han and kana: one character each) in any other
                          script, which rouge-score's tokenizer drops (it keeps [a-z0-9] only);
                          the results' rouge_signature names it
  rougeLsum               the same scorer's 'rougeLsum' (summary-level LCS) with each text split
                          into sentences by scripts/lead_k.py's splitter, one per line
  bleu                    sacreBLEU corpus BLEU (sacrebleu.corpus_bleu, default 13a tokenizer)
Also distinct_hypotheses, the share of distinct hypotheses (stripped); below 50% one warning line
goes to stderr (a model that writes the same summary for every document).
Writes OUT/results.json (one row: the metrics, counts, names, decoding, tool versions) and
OUT/results.md (the same as a one-line markdown table), and prints the table. Several
results.json files merge into one table with scripts/summarization_results.py.
Errors (one line, exit 2): missing or empty files, differing line counts, existing output
without --force.
"""

import argparse
import os
import sys
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from lead_k import split_sentences  # noqa: E402
from script_errors import ScriptError, run_main  # noqa: E402
from summarization_results import write_outputs  # noqa: E402

PROG = "score_summaries.py"
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
DISTINCT_WARNING = 0.5  # warn (one line) when fewer hypotheses than this share are distinct


def _is_cjk(ch: str) -> bool:
    """Han, Hiragana, Katakana, Bopomofo and CJK symbols: written without spaces, one token each."""
    o = ord(ch)
    return (0x3040 <= o <= 0x30FF or 0x3100 <= o <= 0x312F or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
            or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F or 0x31F0 <= o <= 0x31FF)


class UnicodeTokenizer:
    """rouge-score's tokenizer for every script (rouge-score's own keeps ``[a-z0-9]`` only, so an
    identical Cyrillic, Greek or Japanese hypothesis and reference scored 0).

    Lower-cased text; a token is a run of letters, digits and combining marks (Unicode categories
    L*, N*, M*), except that each Han / kana character is a token of its own; the Porter stemmer
    (rouge-score's, words of more than 3 characters) stems ASCII words only. On ASCII text this
    is exactly rouge-score's default tokenizer with ``use_stemmer=True``.
    """

    name = "unicode-v1 (letter/digit/mark runs, Han and kana one per token, Porter stemmer on ASCII words)"

    def __init__(self):
        from nltk.stem import porter  # rouge-score's own stemmer

        self._stemmer = porter.PorterStemmer()

    def tokenize(self, text: str) -> list:
        import unicodedata

        tokens, word = [], []
        for ch in text.lower():
            if _is_cjk(ch):
                tokens += ["".join(word), ch] if word else [ch]
                word = []
            elif unicodedata.category(ch)[0] in "LN" or (word and unicodedata.category(ch)[0] == "M"):
                word.append(ch)
            elif word:
                tokens.append("".join(word))
                word = []
        if word:
            tokens.append("".join(word))
        return [self._stemmer.stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]


ROUGE_TOKENIZER = UnicodeTokenizer()


def read_lines(path: str, what: str) -> list:
    """The lines of ``path`` (``\\n``-separated; a final newline ends the last line, ``\\r`` is
    dropped). Other Unicode line separators stay inside their line, as in the raw data files."""
    if not os.path.isfile(path):
        raise ScriptError(f"{what} {path} not found")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ScriptError(f"{what} {path} is empty")
    return [line.rstrip("\r") for line in lines]


def score(hyps: list, refs: list) -> dict:
    """ROUGE F1 (x100, mean over examples, stemmed) and sacreBLEU for aligned ``hyps``/``refs``.

    Raises:
        ScriptError: if the lists are empty or of different lengths, or every reference is blank.
    """
    from rouge_score import rouge_scorer
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ScriptError(f"{len(hyps)} hypotheses but {len(refs)} references: the files must be "
                          f"line-aligned (one summary per line)")
    if not hyps:
        raise ScriptError("nothing to score")
    if not any(r.strip() for r in refs):
        raise ScriptError("every reference is blank")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), tokenizer=ROUGE_TOKENIZER)
    totals = {t: 0.0 for t in ROUGE_TYPES}
    for hyp, ref in zip(hyps, refs):
        # rougeLsum reads sentences from newlines; the other types ignore them
        scores = scorer.score("\n".join(split_sentences(ref)), "\n".join(split_sentences(hyp)))
        for t in ROUGE_TYPES:
            totals[t] += scores[t].fmeasure
    bleu = BLEU()
    bleu_score = bleu.corpus_score(hyps, [refs])
    result = {t: 100.0 * totals[t] / len(hyps) for t in ROUGE_TYPES}
    result.update({
        "bleu": bleu_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "rouge_signature": f"rouge-score {_version('rouge-score')}, F1 x100 mean over examples, "
                           f"tokenizer {ROUGE_TOKENIZER.name}",
        "n": len(hyps),
        "empty_hypotheses": sum(1 for h in hyps if not h.strip()),
        "distinct_hypotheses": len(set(h.strip() for h in hyps)) / len(hyps),
        "hyp_words_mean": sum(len(h.split()) for h in hyps) / len(hyps),
        "ref_words_mean": sum(len(r.split()) for r in refs) / len(refs),
    })
    return result


def _version(pkg):
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("--hyp", required=True, help="system summaries, one per line")
    p.add_argument("--ref", required=True, help="reference summaries, one per line (e.g. OUT/raw/test.target)")
    p.add_argument("--model", required=True, help="name of the system (arm or baseline) for the table")
    p.add_argument("--checkpoint", default="", help="checkpoint file that produced --hyp ('' for baselines)")
    p.add_argument("--split", required=True, help="data split scored (e.g. test)")
    p.add_argument("--decoding", default="", help="decoding options, recorded verbatim")
    p.add_argument("--out", required=True, help="folder for results.md and results.json")
    p.add_argument("--force", action="store_true", help="overwrite existing results files")
    args = p.parse_args(argv)

    def run():
        hyps = read_lines(args.hyp, "--hyp")
        refs = read_lines(args.ref, "--ref")
        if len(hyps) != len(refs):
            raise ScriptError(f"--hyp {args.hyp} has {len(hyps)} lines but --ref {args.ref} has {len(refs)}: "
                              f"the files must be line-aligned (one summary per line)")
        row = {"model": args.model, "checkpoint": args.checkpoint, "split": args.split,
               "decoding": args.decoding}
        row.update(score(hyps, refs))
        if row["distinct_hypotheses"] < DISTINCT_WARNING:
            distinct = len(set(h.strip() for h in hyps))
            print(f"{PROG}: warning: only {distinct} of {len(hyps)} hypotheses ({100 * distinct / len(hyps):.0f}%) "
                  f"are distinct, i.e. much the same summary for different documents; check the model and the "
                  f"decoding lengths", file=sys.stderr)
        row.update({"hyp": os.path.abspath(args.hyp), "ref": os.path.abspath(args.ref),
                    "rouge_score_version": _version("rouge-score"), "sacrebleu_version": _version("sacrebleu")})
        print(write_outputs([row], args.out, "results", args.force, payload=row))

    sys.exit(run_main(run, PROG, 2))


if __name__ == "__main__":
    main()
