"""WikiText-103 (prepare-lm.sh --corpus wikitext103): wiki.train.raw, wiki.valid.raw and
wiki.test.raw (the raw release), or wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens
(the tokenized release, same layout), are the splits; each article (a level-1 `` = Title = `` heading and the lines up
to the next one) is a document, every non-blank line one paragraph, in file order."""
import os

from fairseq_plugins.lab.data.manifest import folder_identity
from fairseq_plugins.lab.data.readers import Reader
from fairseq_plugins.lab.data.text import SPLITS, utf8_lines
from fairseq_plugins.errors import ConfigError

VARIANTS = ("raw", "tokens")  # the file endings accepted, in order of preference


def files(folder):
    """{split: path}: the first complete set of wiki.{train,valid,test}.<variant>, else an error
    naming the missing files of the most complete set and the names accepted."""
    best = None
    for variant in VARIANTS:
        paths = {s: os.path.join(folder, f"wiki.{s}.{variant}") for s in SPLITS}
        missing = [os.path.basename(p) for p in paths.values() if not os.path.isfile(p)]
        if not missing:
            return paths
        if best is None or len(missing) < len(best):
            best = missing
    raise ConfigError(f"{folder} is not a WikiText raw folder: missing {', '.join(best)} (--corpus wikitext103 reads "
                      f"wiki.train.raw, wiki.valid.raw, wiki.test.raw, or the same names ending .tokens)")


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
    line is the article's first line, every non-blank line is one paragraph.

    Raises:
        ConfigError: a byte that is not UTF-8, naming the file and its offset.
    """
    name, lines = None, []
    for raw in utf8_lines(path):  # strict: no byte is replaced
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
    paths = files(folder)

    def docs():
        for split in SPLITS:
            for name, lines in iter_articles(paths[split]):
                yield split, name, (lambda lines=lines: lines)
    return docs(), True, None


READER = Reader(name="wikitext103", pipeline="lm", read=read, identity=lambda folder: folder_identity(folder),
                summary="WikiText-103 raw or tokenized release: articles are the documents")
