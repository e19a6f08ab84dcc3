"""Text rules of the data-prep pipelines (docs/data-preparation.md).

Reading files: :func:`read_text` (UTF-8; a legacy single-byte file as Latin-1), :func:`read_lines`
and :func:`utf8_lines` (strict UTF-8), :func:`split_file` (a split's file, ``valid`` also as
``val``). Text is decoded strictly: a byte that is not UTF-8 in a UTF-8 file is one error line
naming the file, the byte's offset and the fix (:func:`not_utf8`), never a silent guess. Cleaning: the control-character
table (once), :func:`clean_line` and the paragraph rules of the language-modelling text
(:data:`PARAGRAPH_RULES`, :func:`finish_paragraphs`), :func:`normalize_text` (one line,
sentencepiece's nmt_nfkc) of the summarization text. Standard library only (sentencepiece is
optional). Errors: :class:`~fairseq_plugins.errors.ConfigError` naming file and line.
"""
import os
import re
import unicodedata

from fairseq_plugins.errors import ConfigError

SPLITS = ("train", "valid", "test")
# LM text: a paragraph longer than LONG_PARAGRAPH characters (the State of the Union speeches come
# as one line per speech) is cut at sentence ends into lines of at most about PACK_TARGET characters
LONG_PARAGRAPH = 2000
PACK_TARGET = 1000


# ----------------------------------------------------------------------------- reading files


# bytes no text file holds (C0 controls but tab, newline, form feed and carriage return; DEL)
_BINARY_BYTES = bytes([*range(0, 9), 11, *range(14, 32), 127])


def looks_binary(data: bytes) -> bool:
    """Whether ``data`` is not text: it holds a NUL byte, or more than 1 in 10 of its first 64 KiB
    are control bytes no text holds (an executable, an image, an archive renamed ``.txt``)."""
    head = data[:65536]
    return b"\0" in head or len(head.translate(None, _BINARY_BYTES)) < 0.9 * len(head)


# a character beyond ASCII that was decoded from UTF-8 (not a byte that surrogateescape kept)
_UTF8_CHARACTER = re.compile("[^\x00-\x7f\udc80-\udcff]")


def not_utf8(path, data: bytes, error: UnicodeDecodeError, offset: int = 0, line: int = 1) -> ConfigError:
    """The one-line error for ``data`` of file ``path`` that is not UTF-8 at ``error.start``
    (``offset``, ``line``: where ``data`` starts in the file): the file, the byte, its offset
    and line, and the fix."""
    at = offset + error.start
    line += data[:error.start].count(b"\n")
    byte = data[error.start:error.start + 1].hex()
    return ConfigError(f"{path}: byte 0x{byte} at offset {at} (line {line}) is not UTF-8; fix or remove it (e.g. "
                       f"iconv -f utf-8 -t utf-8 -c drops every such byte), or convert a file of another encoding "
                       f"to UTF-8 (iconv -f ENCODING -t utf-8)")


def decode_text(path, data: bytes) -> str:
    """``data`` of file ``path`` as text: UTF-8 (BOM stripped), or Latin-1 for a legacy
    single-byte file, one none of whose bytes beyond ASCII forms a UTF-8 character (Project
    Gutenberg's older books): there the decoding is not a guess. A file that holds UTF-8 text and
    a byte that is not UTF-8 is refused, so that its accented letters are never read as Latin-1.

    Raises:
        ConfigError: a UTF-8 file with a byte that is not UTF-8 (:func:`not_utf8`).
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        escaped = data.decode("utf-8", errors="surrogateescape")
        if _UTF8_CHARACTER.search(escaped):
            raise not_utf8(path, data, e) from None
        return data.decode("latin-1")


def read_text(path):
    """Read a file as text (:func:`decode_text`); line ends become ``\\n``.

    Raises:
        ConfigError: the file is not text (:func:`looks_binary`), or a UTF-8 file holds a byte
            that is not UTF-8 (:func:`not_utf8`), naming it.
    """
    with open(path, "rb") as f:
        data = f.read()
    if looks_binary(data):
        raise ConfigError(f"{path} is not a text file (NUL or control bytes: a binary file renamed?); remove it "
                          "from the input, or convert it to UTF-8 text")
    text = decode_text(path, data)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def utf8_lines(path):
    """The lines of the strict UTF-8 file ``path`` as they are (line ends kept, no BOM stripped),
    read one at a time: for files too large to hold whole.

    Raises:
        ConfigError: a byte that is not UTF-8 (:func:`not_utf8`).
    """
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise not_utf8(path, raw, e, offset, number) from None
            offset += len(raw)


def read_lines(path):
    """The lines of a strict UTF-8 file (BOM stripped, a \\r before \\n dropped).

    Raises:
        ConfigError: a byte that is not UTF-8 (:func:`not_utf8`: the file, the offset, the line).
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_utf8(path, data, e) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline
    return [l[:-1] if l.endswith("\r") else l for l in lines]


def split_file(folder, split, suffix, alternatives=("val",)):
    """Path of folder/{split}{suffix}; valid may also be val (not both); None if absent."""
    names = [split] + (list(alternatives) if split == "valid" else [])
    found = [os.path.join(folder, n + suffix) for n in names if os.path.isfile(os.path.join(folder, n + suffix))]
    if len(found) > 1:
        raise ConfigError(f"both {found[0]} and {found[1]} exist; keep one of them")
    return found[0] if found else None


# ----------------------------------------------------------------------------- text

# control characters (Unicode category Cc is exactly U+0000-U+001F and U+007F-U+009F) are dropped
CONTROLS = {c: None for c in [*range(0x20), *range(0x7F, 0xA0)]}
# LM text: tab / vertical tab / form feed / NEL / line+paragraph separators / NBSP become spaces,
# the other control characters and a stray BOM are dropped
_LM_CLEAN = dict(CONTROLS)
_LM_CLEAN.update({ord(c): " " for c in "\t\x0b\x0c\x85\u2028\u2029\u00a0"})
_LM_CLEAN[0xFEFF] = None


def clean_line(line):
    """LM text: drop control characters, turn odd spaces into spaces, collapse whitespace, strip."""
    return " ".join(line.translate(_LM_CLEAN).split())


_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+(?=[A-Z0-9\"'\u201c\u2018(\[])")


def pack_long_paragraph(par):
    """Cut an over-long paragraph at sentence ends into lines of about PACK_TARGET chars."""
    if len(par) <= LONG_PARAGRAPH:
        return [par]
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(par):
        sentences.append(par[start:m.end()].strip())
        start = m.end()
    sentences.append(par[start:].strip())
    lines, cur = [], ""
    for s in sentences:
        if not s:
            continue
        if cur and len(cur) + 1 + len(s) > PACK_TARGET:
            lines.append(cur)
            cur = s
        else:
            cur = f"{cur} {s}" if cur else s
    if cur:
        lines.append(cur)
    return lines


def paragraphs_from_blocks(text):
    """Gutenberg / PG-19 style text: blank lines separate paragraphs, lines inside are joined."""
    paragraphs, block = [], []
    for raw in text.split("\n"):
        line = clean_line(raw)
        if line:
            block.append(line)
        elif block:
            paragraphs.append(" ".join(block))
            block = []
    if block:
        paragraphs.append(" ".join(block))
    return paragraphs


def paragraphs_from_lines(text):
    """One-paragraph-per-line text (Wikipedia dumps, most modern corpora): every line is one
    paragraph (blank lines are dropped later)."""
    return text.split("\n")


# --paragraphs of prepare-lm.sh: how a .txt document's lines become paragraphs
PARAGRAPH_RULES = {"blank-line": paragraphs_from_blocks, "line": paragraphs_from_lines}
DEFAULT_PARAGRAPHS = "blank-line"


def finish_paragraphs(paragraphs):
    """The lines written for a document's raw paragraphs: cleaned, empty ones dropped, long ones cut."""
    out = []
    for p in paragraphs:
        p = clean_line(p)
        if p:
            out.extend(pack_long_paragraph(p))
    return out


def has_text(paragraphs):
    return any(clean_line(p) for p in paragraphs)


_nfkc = None


def _nmt_nfkc(text):
    """sentencepiece's nmt_nfkc normaliser (plain NFKC with sentencepiece < 0.2 or without it)."""
    global _nfkc
    if _nfkc is None:
        try:
            import sentencepiece as spm

            _nfkc = spm.SentencePieceNormalizer(rule_name="nmt_nfkc", add_dummy_prefix=False,
                                                escape_whitespaces=False, remove_extra_whitespaces=True).normalize
        except (ImportError, AttributeError, TypeError):
            _nfkc = lambda t: unicodedata.normalize("NFKC", t)  # noqa: E731
    return _nfkc(text)


def normalize_text(text):
    """Summarization text, one line: whitespace runs -> one space, control characters dropped, nmt_nfkc."""
    text = " ".join(text.split()).translate(CONTROLS)
    return " ".join(_nmt_nfkc(text).split())


