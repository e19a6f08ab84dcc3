"""A folder of .txt documents (prepare-lm.sh --corpus txt): one file = one document, named by
its path relative to the folder, searched recursively. With train/, valid/ (or validation/) and
test/ subfolders (the PG-19 layout) those are the splits; otherwise the md5 rule decides.
Text: Project Gutenberg's convention, blank lines separate paragraphs and the lines of a
paragraph are joined."""
import os

from prep_common import SPLITS, ScriptError, paragraphs_from_blocks, read_text


def _txt_files(folder):
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in sorted(files):
            if fn.lower().endswith(".txt") and not fn.startswith("."):
                found.append(os.path.join(root, fn))
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


def _loader(path):
    return lambda: paragraphs_from_blocks(read_text(path))


def read(folder):
    subs = _split_subfolders(folder)
    if subs:
        missing = [s for s in SPLITS if s not in subs]
        if missing:
            have = ", ".join(sorted(os.path.basename(p) + "/" for p in subs.values()))
            raise ScriptError(f"{folder} has {have} but no {' or '.join(m + '/' for m in missing)} folder"
                              " (PG-19 layout: train/, valid/ or validation/, test/)")
        docs = []
        for split in SPLITS:
            files = _txt_files(subs[split])
            if not files:
                raise ScriptError(f"no .txt documents in {subs[split]} (the {split} split)")
            docs += [(split, os.path.relpath(p, folder), _loader(p)) for p in files]
        return docs, True
    files = _txt_files(folder)
    if not files:
        raise ScriptError(f"no .txt documents found in {folder}")
    return [(None, os.path.relpath(p, folder), _loader(p)) for p in files], False
