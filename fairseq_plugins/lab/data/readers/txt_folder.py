"""A folder of .txt documents (prepare-lm.sh --corpus txt): one file = one document, named by
its path relative to the folder, searched recursively. With train/, valid/ (or validation/) and
test/ subfolders (the PG-19 layout) those are the splits. Files at the top named after the
splits (SPLIT_FILE: train / valid, val or validation / test, optionally after a prefix such as
``wiki.``, ending .txt, .raw or .tokens) are the splits, one document each; an incomplete or
mixed set of them is refused. Otherwise the md5 rule decides.
Text (``paragraphs``, prepare-lm.sh --paragraphs): "blank-line" (the default, Project
Gutenberg's hard-wrapped convention) - blank lines separate paragraphs and the lines of a
paragraph are joined; "line" - every non-blank line is one paragraph. Only regular files are
documents; a file is decoded strictly (:func:`fairseq_plugins.lab.data.text.read_text`)."""
import os
import re

from fairseq_plugins.lab.data.manifest import folder_identity
from fairseq_plugins.lab.data.readers import Reader, ReaderOption
from fairseq_plugins.lab.data.text import DEFAULT_PARAGRAPHS, PARAGRAPH_RULES, SPLITS, read_text
from fairseq_plugins.errors import ConfigError

SPLIT_FILE = re.compile(r"^(?:.+\.)?(train|valid|validation|val|test)\.(txt|raw|tokens)$", re.IGNORECASE)
_SPLIT_OF = {"train": "train", "valid": "valid", "validation": "valid", "val": "valid", "test": "test"}


def _txt_files(folder):
    """The documents under ``folder``: regular files (or links to one) named ``*.txt``, not hidden;
    a FIFO, socket or device of that name is no document (reading one would wait forever)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in sorted(files):
            path = os.path.join(root, fn)
            if fn.lower().endswith(".txt") and not fn.startswith(".") and os.path.isfile(path):
                found.append(path)
    return found


def _split_subfolders(folder):
    """PG-19 layout: train/, valid/ or validation/, test/ subfolders. Returns {split: path}."""
    found = {}
    for split, names in (("train", ["train"]), ("valid", ["valid", "validation"]), ("test", ["test"])):
        for n in names:
            p = os.path.join(folder, n)
            if os.path.isdir(p):
                found[split] = p
                break
    return found


def _named_split_files(folder):
    """{split: [file names]} of the files at the top of folder named after a split."""
    found = {s: [] for s in SPLITS}
    for fn in sorted(os.listdir(folder)):
        m = SPLIT_FILE.match(fn)
        if m and not fn.startswith(".") and os.path.isfile(os.path.join(folder, fn)):
            found[_SPLIT_OF[m.group(1).lower()]].append(fn)
    return found


def _read_split_files(folder, named, loader):
    """The split files as the splits (one document each), or a refusal naming the fix."""
    for split in SPLITS:
        if len(named[split]) > 1:
            raise ConfigError(f"{folder} has {' and '.join(named[split])} for the {split} split; keep one of them")
    names = [n for s in SPLITS for n in named[s]]
    missing = [s for s in SPLITS if not named[s]]
    rename = "or rename the split files to have each one taken as an ordinary document"
    if missing:
        add = " and ".join("valid.txt (or val.txt)" if m == "valid" else f"{m}.txt" for m in missing)
        raise ConfigError(f"{folder} has {', '.join(names)} named after splits but no {' or '.join(missing)} file; "
                          f"add {add}, {rename}")
    split_paths = {os.path.join(folder, n) for n in names}
    others = [os.path.relpath(p, folder) for p in _txt_files(folder) if p not in split_paths]
    if others:
        shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
        raise ConfigError(f"{folder} has split files ({', '.join(names)}) and other documents ({shown}); "
                          f"move the documents into train/, valid/, test/ subfolders, {rename}")
    docs = [(s, named[s][0], loader(os.path.join(folder, named[s][0]))) for s in SPLITS]
    note = (f"{', '.join(names)} are named after the splits: used as the train, valid and test split "
            f"(one document each)")
    if all(n.lower().startswith("wiki.") for n in names):
        note += "; for WikiText's articles as documents use --corpus wikitext103"
    return docs, True, note


def read(folder, paragraphs=None):
    rule = PARAGRAPH_RULES[paragraphs or DEFAULT_PARAGRAPHS]

    def loader(path):
        return lambda: rule(read_text(path))

    subs = _split_subfolders(folder)
    if subs:
        missing = [s for s in SPLITS if s not in subs]
        if missing:
            have = ", ".join(sorted(os.path.basename(p) + "/" for p in subs.values()))
            raise ConfigError(f"{folder} has {have} but no {' or '.join(m + '/' for m in missing)} folder"
                              " (PG-19 layout: train/, valid/ or validation/, test/)")
        docs = []
        for split in SPLITS:
            files = _txt_files(subs[split])
            if not files:
                raise ConfigError(f"no .txt documents in {subs[split]} (the {split} split)")
            docs += [(split, os.path.relpath(p, folder), loader(p)) for p in files]
        return docs, True, None
    named = _named_split_files(folder)
    if any(named.values()):
        return _read_split_files(folder, named, loader)
    files = _txt_files(folder)
    if not files:
        raise ConfigError(f"no .txt documents found in {folder}")
    return [(None, os.path.relpath(p, folder), loader(p)) for p in files], False, None


def identity(folder, paragraphs=None):
    return folder_identity(folder)


READER = Reader(
    name="txt", pipeline="lm", read=read, identity=identity,
    summary="a folder of .txt documents, one file = one document (PG-19 layout too)",
    options=(ReaderOption("paragraphs", "how lines become paragraphs: blank-line (joined lines, the default) "
                          "or line (one paragraph per line)", choices=tuple(sorted(PARAGRAPH_RULES))),),
)
