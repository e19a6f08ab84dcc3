"""How the metrics cut text into tokens, for every writing system (docs/summarization.md#metrics).

* ROUGE: rouge-score's own tokenizer keeps ``[a-z0-9]`` only, so an identical Cyrillic, Greek,
  Chinese or Thai hypothesis and reference score 0. :class:`UnicodeTokenizer` (the default,
  ``unicode``) is rouge-score's tokenizer for every script; ``rouge-score`` is rouge-score's
  own (``DefaultTokenizer(use_stemmer=True)``), the scorer of the ACLSum table in
  docs/results/aclsum.md. Both stem ASCII words with rouge-score's Porter stemmer (nltk's).
* BLEU: sacreBLEU's default ``13a`` tokenizer splits at spaces and punctuation, so a sentence
  of Chinese, Japanese or Thai (written without spaces between words) is one token and an
  identical hypothesis scores BLEU 0. :func:`choose_bleu_tokenizer` picks ``zh`` (each Han
  character a token, the rest as ``13a``) or ``char`` (every character a token) from the
  references' letters; sacreBLEU's signature names the tokenizer used.
"""

import unicodedata
from typing import Iterable, List, Tuple

# sacreBLEU tokenizers that need no extra package or download, and "auto" (choose_bleu_tokenizer)
BLEU_TOKENIZERS = ("auto", "13a", "zh", "char", "intl", "none")
ROUGE_TOKENIZERS = ("unicode", "rouge-score")


def is_cjk(ch: str) -> bool:
    """Han, Hiragana, Katakana, Bopomofo: written without spaces, one ROUGE token each."""
    o = ord(ch)
    return (0x3040 <= o <= 0x30FF or 0x3100 <= o <= 0x312F or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
            or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F or 0x31F0 <= o <= 0x31FF)


def is_kana(ch: str) -> bool:
    """Hiragana and Katakana (full- and half-width): Japanese."""
    o = ord(ch)
    return 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF or 0xFF66 <= o <= 0xFF9F


def is_unspaced_alphabet(ch: str) -> bool:
    """Thai, Lao, Myanmar and Khmer: alphabets written without spaces between words (a
    character is its letter plus the combining marks after it)."""
    o = ord(ch)
    return 0x0E00 <= o <= 0x0EFF or 0x1000 <= o <= 0x109F or 0x1780 <= o <= 0x17FF or 0x19E0 <= o <= 0x19FF


class UnicodeTokenizer:
    """rouge-score's tokenizer for every script (``tokenize(text) -> list of str``).

    Lower-cased text; a token is a run of letters, digits and combining marks (Unicode categories
    L*, N*, M*), except in scripts written without spaces between words: each Han / kana
    character is a token of its own, and so is each Thai, Lao, Myanmar or Khmer letter with the
    combining marks that follow it (no word segmenter for them is available offline; a character
    is their smallest unit, as for Chinese). The Porter stemmer (rouge-score's, words of more
    than 3 characters) stems ASCII words only. On ASCII text this is exactly rouge-score's
    default tokenizer with ``use_stemmer=True``.
    """

    name = ("unicode-v2 (letter/digit/mark runs; Han, kana and Thai/Lao/Myanmar/Khmer letters one per token; "
            "Porter stemmer on ASCII words)")

    def __init__(self):
        from nltk.stem import porter  # rouge-score's own stemmer

        self._stemmer = porter.PorterStemmer()

    def tokenize(self, text: str) -> List[str]:
        tokens: List[str] = []
        word: List[str] = []
        closed = False  # the current word is one letter of an unspaced alphabet: only marks join it

        def flush():
            nonlocal closed
            if word:
                tokens.append("".join(word))
                word.clear()
            closed = False

        for ch in text.lower():
            category = unicodedata.category(ch)[0]
            if is_cjk(ch):
                flush()
                tokens.append(ch)
            elif category in "LN" and is_unspaced_alphabet(ch):
                flush()
                word.append(ch)
                closed = True
            elif category == "M" and word:
                word.append(ch)
            elif category in "LN":
                if closed:
                    flush()
                word.append(ch)
            else:
                flush()
        flush()
        return [self._stemmer.stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]


class RougeScoreTokenizer:
    """rouge-score's own tokenizer (``[a-z0-9]`` runs, Porter stemmer), under a signature name."""

    def __init__(self):
        from rouge_score import tokenizers

        self.name = "rouge-score default ([a-z0-9] runs only, Porter stemmer)"
        self._tokenizer = tokenizers.DefaultTokenizer(use_stemmer=True)

    def tokenize(self, text: str) -> List[str]:
        return self._tokenizer.tokenize(text)


def rouge_tokenizer(name: str):
    """The ROUGE tokenizer called ``name`` (one of :data:`ROUGE_TOKENIZERS`)."""
    return UnicodeTokenizer() if name == "unicode" else RougeScoreTokenizer()


def choose_bleu_tokenizer(references: Iterable[str]) -> Tuple[str, str]:
    """sacreBLEU's tokenizer for ``references``, and why, in words.

    Counts the references' letters (Unicode category L*): unless at least half of them are in a
    script written without spaces (Han, kana, Thai, Lao, Myanmar, Khmer), ``13a`` (sacreBLEU's
    default: words are delimited by spaces; a Chinese quotation in English text changes nothing);
    else ``zh`` when all of those are Han (Chinese), and ``char`` when kana (Japanese) or one of
    the alphabets is among them (sacreBLEU's Japanese tokenizer needs MeCab, and it has none for
    Thai and its neighbours).
    """
    letters = han = kana = alphabet = 0
    for text in references:
        for ch in text:
            if not unicodedata.category(ch).startswith("L"):
                continue
            letters += 1
            if is_kana(ch):
                kana += 1
            elif is_unspaced_alphabet(ch):
                alphabet += 1
            elif is_cjk(ch):
                han += 1
    unspaced = han + kana + alphabet
    if unspaced * 2 < letters or letters == 0:
        share = 100.0 * unspaced / letters if letters else 0.0
        return "13a", f"auto: 13a, {share:.0f}% of the references' letters are in scripts written without spaces"
    share = 100.0 * unspaced / letters
    if kana + alphabet == 0:
        return "zh", f"auto: zh, {share:.0f}% of the references' letters are Han"
    return "char", (f"auto: char, {share:.0f}% of the references' letters are in scripts written without spaces "
                    f"({kana} kana, {alphabet} Thai/Lao/Myanmar/Khmer)")
