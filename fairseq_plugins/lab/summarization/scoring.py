"""ROUGE-1/2/L/Lsum F1 and sacreBLEU of line-aligned summaries (docs/summarization.md#metrics).

Metrics, all x100:

=============================  =================================================================
``rouge1``, ``rouge2``,        mean over examples of the F1 of rouge-score's ``RougeScorer`` with
``rougeL``                     the ROUGE tokenizer (:mod:`.tokenizers`; ``rouge_signature`` names it)
``rougeLsum``                  the same scorer's summary-level LCS, each text split into sentences
                               (:func:`.split_sentences`), one per line
``bleu``                       sacreBLEU corpus BLEU (``sacrebleu.metrics.BLEU``), its tokenizer
                               chosen from the references (:func:`.choose_bleu_tokenizer`) unless
                               forced; ``bleu_signature`` is sacreBLEU's signature
=============================  =================================================================

Also the counts, the share of distinct hypotheses (a model that writes the same summary for every
document) and the versions of the libraries that decide the numbers (rouge-score, nltk's Porter
stemmer, sacreBLEU).
"""

import os
from importlib import metadata
from typing import Dict, List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.summarization.lines import read_lines
from fairseq_plugins.lab.summarization.sentences import split_sentences
from fairseq_plugins.lab.summarization.tokenizers import choose_bleu_tokenizer, rouge_tokenizer

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
# sacreBLEU's tokenizers that find words at spaces only: wrong for Chinese, Japanese, Thai, ...
SPACE_TOKENIZERS = ("13a", "intl", "none")
DISTINCT_WARNING = 0.5  # warn (one line) when fewer hypotheses than this share are distinct


def version(package: str) -> Optional[str]:
    """The installed version of ``package`` (``None`` if it is not installed)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions() -> Dict[str, Optional[str]]:
    """The versions that decide the scores: rouge-score, nltk (its Porter stemmer), sacreBLEU."""
    return {"rouge_score_version": version("rouge-score"), "nltk_version": version("nltk"),
            "sacrebleu_version": version("sacrebleu")}


def score(hyps: List[str], refs: List[str], bleu_tokenize: str = "auto", rouge_tokenizer_name: str = "unicode") -> dict:
    """The metrics of the module docstring for aligned ``hyps`` / ``refs`` (one summary each).

    ``bleu_tokenize``: ``auto`` or one of sacreBLEU's tokenizers (:data:`.BLEU_TOKENIZERS`);
    ``rouge_tokenizer_name``: ``unicode`` or ``rouge-score`` (:data:`.ROUGE_TOKENIZERS`).
    Returns a dict of the metrics (floats x100), their signatures and counts.

    Raises:
        ConfigError: the lists are empty or of different lengths, or every reference is blank.
    """
    from rouge_score import rouge_scorer
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ConfigError(f"{len(hyps)} hypotheses but {len(refs)} references: the files must be "
                          f"line-aligned (one summary per line)")
    if not hyps:
        raise ConfigError("nothing to score")
    if not any(r.strip() for r in refs):
        raise ConfigError("every reference is blank")
    tokenizer = rouge_tokenizer(rouge_tokenizer_name)
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), tokenizer=tokenizer)
    totals = {t: 0.0 for t in ROUGE_TYPES}
    for hyp, ref in zip(hyps, refs):
        # rougeLsum reads sentences from newlines; the other types ignore them
        scores = scorer.score("\n".join(split_sentences(ref)), "\n".join(split_sentences(hyp)))
        for t in ROUGE_TYPES:
            totals[t] += scores[t].fmeasure
    recommended, reason = choose_bleu_tokenizer(refs)
    if bleu_tokenize == "auto":
        bleu_tokenize, why = recommended, reason
    else:
        why = f"--bleu-tokenize {bleu_tokenize}"
    bleu = BLEU(tokenize=bleu_tokenize)
    result = {t: 100.0 * totals[t] / len(hyps) for t in ROUGE_TYPES}
    result.update({
        "bleu": bleu.corpus_score(hyps, [refs]).score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_tokenize_choice": why,
        "rouge_signature": f"rouge-score {version('rouge-score')}, nltk {version('nltk')}, F1 x100 mean over "
                           f"examples, tokenizer {tokenizer.name}",
        "n": len(hyps),
        "empty_hypotheses": sum(1 for h in hyps if not h.strip()),
        "distinct_hypotheses": len(set(h.strip() for h in hyps)) / len(hyps),
        "hyp_words_mean": sum(len(h.split()) for h in hyps) / len(hyps),
        "ref_words_mean": sum(len(r.split()) for r in refs) / len(refs),
    })
    if recommended != "13a" and bleu_tokenize in SPACE_TOKENIZERS:
        result["bleu_tokenize_warning"] = (
            f"--bleu-tokenize {bleu_tokenize} splits words at spaces, but {reason.split(', ', 1)[1]}: "
            f"a whole sentence counts as one word and BLEU is near 0; use --bleu-tokenize {recommended} "
            f"(what auto chooses)")
    return result


def warnings(row: dict) -> List[str]:
    """The warnings (without prefix) of a :func:`score` result: a BLEU tokenizer that splits at
    spaces on references written without them, and :func:`distinct_warning`."""
    found = [row.get("bleu_tokenize_warning"), distinct_warning(row)]
    return [w for w in found if w]


def distinct_warning(row: dict) -> Optional[str]:
    """One warning (without prefix) when fewer than half the hypotheses of a :func:`score` result
    are distinct, else ``None``."""
    n = row["n"]
    distinct = round(row["distinct_hypotheses"] * n)
    if distinct / n >= DISTINCT_WARNING:
        return None
    return (f"only {distinct} of {n} hypotheses ({100 * distinct / n:.0f}%) are distinct, i.e. much the same "
            f"summary for different documents; check the model and the decoding lengths")


def score_files(hyp: str, ref: str, bleu_tokenize: str = "auto", rouge_tokenizer_name: str = "unicode") -> dict:
    """:func:`score` of the files ``hyp`` and ``ref`` (one summary per line), with their absolute
    paths and :func:`versions` added.

    Raises:
        ConfigError: a file is missing or empty, or their line counts differ.
    """
    hyps, refs = read_lines(hyp, "--hyp"), read_lines(ref, "--ref")
    if len(hyps) != len(refs):
        raise ConfigError(f"--hyp {hyp} has {len(hyps)} lines but --ref {ref} has {len(refs)}: "
                          f"the files must be line-aligned (one summary per line)")
    row = score(hyps, refs, bleu_tokenize, rouge_tokenizer_name)
    row.update({"hyp": os.path.abspath(hyp), "ref": os.path.abspath(ref), **versions()})
    return row
