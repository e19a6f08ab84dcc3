"""WikiText-103 raw (prepare-lm.sh --corpus wikitext103): wiki.train.raw, wiki.valid.raw and
wiki.test.raw are the splits; each article (a level-1 `` = Title = `` heading and the lines up
to the next one) is a document, every non-blank line one paragraph, in file order."""
import os

from prep_common import SPLITS, ScriptError

FILES = {"train": "wiki.train.raw", "valid": "wiki.valid.raw", "test": "wiki.test.raw"}


def title(line):
    """Return the article title if ``line`` is a level-1 WikiText heading (`` = Title = ``)."""
    s = line.strip()
    if len(s) < 5 or not (s.startswith("= ") and s.endswith(" =")):
        return None
    if s.startswith("= =") or s.endswith("= ="):
        return None  # sub-heading `` = = Section = = `` (or deeper)
    t = s[2:-2].strip()
    return t or None


def iter_articles(path):
    """Yield (title, lines) for each article of one wiki.*.raw file, in file order; the heading
    line is the article's first line, every non-blank line is one paragraph."""
    name, lines = None, []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for raw in f:
            raw = raw.rstrip("\r\n")
            t = title(raw)
            if t is not None:
                if name is not None or any(x.strip() for x in lines):
                    yield (name if name is not None else "(text before the first heading)"), lines
                name, lines = t, [raw]
            else:
                lines.append(raw)
    if name is not None or any(x.strip() for x in lines):
        yield (name if name is not None else "(text before the first heading)"), lines


def read(folder):
    missing = [f for f in FILES.values() if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise ScriptError(f"{folder} is not a WikiText raw folder: missing {', '.join(missing)}")

    def docs():
        for split in SPLITS:
            for name, lines in iter_articles(os.path.join(folder, FILES[split])):
                yield split, name, (lambda lines=lines: lines)
    return docs(), True, None
