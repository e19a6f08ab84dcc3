"""What the data-prep helpers share (standard library only; sentencepiece is optional).

Used by ``lm_documents.py`` (prepare-lm.sh), ``summarization_documents.py``
(prepare-summarization.sh) and the corpus readers in ``readers/``:

- the error type: :class:`ScriptError` / :func:`run_main` from ``scripts/script_errors.py``
- reading files: :func:`read_text` (UTF-8, Latin-1 fallback), :func:`read_lines` (strict UTF-8)
- text cleaning: the control-character table (once), :func:`clean_line` and the paragraph
  rules of the LM text, :func:`normalize_text` (one line, nmt_nfkc) of the summarization text
- the split rule of corpora without splits: :func:`hash_split`, :func:`assign_splits`
- input identities: :func:`fingerprint` (names + sizes), :func:`sha256_files` (names + content)
- the manifest: :func:`check_prepared` (up to date / build / refuse), :func:`write_json`
- writing raw/: :class:`SplitWriter` (LM documents), :func:`write_examples` (summarization pairs)
"""
import hashlib
import json
import os
import re
import sys
import unicodedata

_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
if _SCRIPTS not in sys.path:
    sys.path.append(_SCRIPTS)  # appended: nothing in scripts/ shadows another module
from script_errors import ScriptError, run_main  # noqa: E402,F401  (the helpers' one error type)

SPLITS = ("train", "valid", "test")
TEST_PERCENT = 5
VALID_PERCENT = 5
# LM text: a paragraph longer than LONG_PARAGRAPH characters (the State of the Union speeches come
# as one line per speech) is cut at sentence ends into lines of at most about PACK_TARGET characters
LONG_PARAGRAPH = 2000
PACK_TARGET = 1000


def os_error_line(e):
    """The one-line text of an OSError, as ``run_main`` prints it (system message: file name)."""
    return f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")


# ----------------------------------------------------------------------------- reading files


def read_text(path):
    """Read a file as text: UTF-8 (BOM stripped), falling back to Latin-1 for legacy files."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_lines(path):
    """The lines of a strict UTF-8 file (BOM stripped, a \\r before \\n dropped); an invalid byte
    is an error naming the file and line."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ScriptError(f"{path}:{line}: not valid UTF-8")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline
    return [l[:-1] if l.endswith("\r") else l for l in lines]


def split_file(folder, split, suffix, alternatives=("val",)):
    """Path of folder/{split}{suffix}; valid may also be val (not both); None if absent."""
    names = [split] + (list(alternatives) if split == "valid" else [])
    found = [os.path.join(folder, n + suffix) for n in names if os.path.isfile(os.path.join(folder, n + suffix))]
    if len(found) > 1:
        raise ScriptError(f"both {found[0]} and {found[1]} exist; keep one of them")
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


# ----------------------------------------------------------------------------- splitting


def name_md5(name):
    return hashlib.md5(name.encode("utf-8")).hexdigest()


def hash_split(name):
    bucket = int(name_md5(name)[:8], 16) % 100
    if bucket < TEST_PERCENT:
        return "test"
    if bucket < TEST_PERCENT + VALID_PERCENT:
        return "valid"
    return "train"


def assign_splits(names, what="documents"):
    """Deterministic split by md5 of the name; every split gets >= 1 name (``what`` names them
    in the error)."""
    if len(names) < 3:
        raise ScriptError(f"need at least 3 non-empty {what} to make train/valid/test splits, found {len(names)}")
    groups = {s: [] for s in SPLITS}
    for n in names:
        groups[hash_split(n)].append(n)
    for target in ("test", "valid", "train"):
        if not groups[target]:
            donor = max(SPLITS, key=lambda s: (len(groups[s]), -SPLITS.index(s)))
            moved = min(groups[donor], key=lambda n: (name_md5(n), n))
            groups[donor].remove(moved)
            groups[target].append(moved)
    return {n: s for s, members in groups.items() for n in members}


# ----------------------------------------------------------------------------- input identity


def fingerprint(path):
    """sha256 over the sorted (relative path, size) of every file under ``path``."""
    h = hashlib.sha256()
    entries = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in files:
            if fn.startswith("."):
                continue
            p = os.path.join(root, fn)
            entries.append((os.path.relpath(p, path), os.path.getsize(p)))
    for rel, size in sorted(entries):
        h.update(f"{rel}\0{size}\n".encode("utf-8", "surrogateescape"))
    return f"{len(entries)} files, sha256:{h.hexdigest()[:16]}"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_files(paths, root=None):
    """sha256 over (relative name, content) of the given files, in the given order."""
    h = hashlib.sha256()
    for p in paths:
        name = os.path.relpath(p, root) if root else os.path.basename(p)
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return f"{len(paths)} files, sha256:{h.hexdigest()[:16]}"


# ----------------------------------------------------------------------------- manifest

# written into OUT when a build starts and removed once its manifest is there (data-prep/stages.sh,
# prepare_out_dir): a folder without prepare.json that holds it is this pipeline's unfinished run
UNFINISHED = ".unfinished"
# things in OUT that are not "output": the download cache, the scratch folder of a running convert, the marker
NOT_OUTPUT = {"download", ".raw.tmp", UNFINISHED}


def _short(v):
    s = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
    return s if len(s) <= 80 else s[:77] + "..."


def check_prepared(out, force, want, keys, expected, description):
    """Whether OUT must be built, shared by the data-prep pipelines (LM and summarization).

    Returns 0 (build: ``force``, no OUT, an empty one, or this pipeline's unfinished run: no
    manifest but the :data:`UNFINISHED` marker; says so in one line) or 3 (up to date: every
    option in ``keys`` equals the manifest's and every ``expected`` file exists; prints one line
    naming ``description``). Raises ScriptError (the caller's exit status) when OUT holds other
    output: a complete one (its manifest) made otherwise, or files without manifest nor marker.
    """
    manifest_path = os.path.join(out, "prepare.json")
    hint = "pass --force to rebuild it or choose another --out"
    if force or not os.path.isdir(out):
        return 0
    if not os.path.isfile(manifest_path):
        leftovers = sorted(set(os.listdir(out)) - NOT_OUTPUT)
        if leftovers and not os.path.isfile(os.path.join(out, UNFINISHED)):
            raise ScriptError(f"{out} holds files ({', '.join(leftovers[:4])}{' ...' if len(leftovers) > 4 else ''})"
                              f" but no prepare.json (another folder, or a run older than its {UNFINISHED} marker); "
                              f"{hint}")
        if leftovers:
            print(f"{out}: the previous run did not finish (no prepare.json); preparing it again")
        return 0
    try:
        with open(manifest_path, encoding="utf-8") as f:
            have = json.load(f)["options"]
    except (ValueError, KeyError, TypeError, OSError):
        raise ScriptError(f"{manifest_path} is unreadable; {hint}")
    for key in keys:
        if have.get(key) != want.get(key):  # an option absent from both (its default) is equal
            if key == "sources":
                what = "the input data differ (" + _short(have.get(key)) + " vs now " + _short(want.get(key)) + ")"
            else:
                what = f"{key}={_short(have.get(key))} (requested {_short(want.get(key))})"
            raise ScriptError(f"{out} was prepared with different options: {what}; {hint}")
    missing = [p for p in expected if not os.path.isfile(os.path.join(out, p))]
    if missing:
        raise ScriptError(f"{out} is incomplete (missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); {hint}")
    print(f"{out} is up to date ({description}); nothing to do")
    return 3


def parse_timings(items):
    """``--timing STAGE=SECONDS`` arguments -> {stage: seconds}."""
    timings = {}
    for t in items:
        k, _, v = t.partition("=")
        timings[k] = float(v)
    return timings


def write_json(path, obj):
    """Write ``obj`` (indented, sorted keys) atomically: into PATH.tmp, then renamed."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- writing raw/


def _clean_name(name):
    return name.replace("\t", " ").replace("\n", " ")


class SplitWriter:
    """LM text: writes documents to OUT/{split}.txt (one paragraph per line, one empty line
    between documents) and, grouped by split in the same order, one row per document to
    OUT/documents.tsv. A document without text is listed in ``empty`` instead."""

    def __init__(self, out):
        os.makedirs(out, exist_ok=True)
        self.files = {s: open(os.path.join(out, f"{s}.txt"), "w", encoding="utf-8", newline="\n") for s in SPLITS}
        self.tsv_path = os.path.join(out, "documents.tsv")
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
            with open(os.path.join(out, f"{split}.{ext}"), "w", encoding="utf-8", newline="\n") as f:
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
                raise ScriptError(f"sentencepiece piece {piece!r} cannot be written to a fairseq dictionary")
            f.write(f"{piece} {counts.get(piece, 0)}\n")
