"""The corpus readers of the data-prep pipelines: one module per corpus format, one registry.

Each module of this package declares ``READER = Reader(...)``: the ``--corpus`` name, the
pipeline it feeds (``"lm"``: data-prep/prepare-lm.sh, ``"summarization"``:
data-prep/prepare-summarization.sh), the options it takes and its functions. :func:`readers`
finds them all (a new corpus format is one new module here and its test, or a module in its
experiment's folder named in :data:`EXPERIMENT_READERS`); the pipelines' ``--corpus`` choices and
the per-corpus option checks come from it.

One signature for every reader: ``read(input, **options)`` with ``input`` the ``--input`` path
(``None`` when the corpus has a default download) and ``options`` the reader's declared
:class:`ReaderOption` values (keyword = option name with ``_`` for ``-``). What it returns is
the pipeline's:

- ``"lm"``: ``(docs, given, note)``: ``docs`` yields ``(split or None, name, load)`` where
  ``load()`` gives the document's raw paragraphs, ``given`` says whether the corpus comes with
  its own splits (else every split is None and :func:`fairseq_plugins.lab.data.splits.
  assign_splits` decides), ``note`` is None or one line saying how the layout was read.
- ``"summarization"``: yields ``(split or None, id, document, summary, (document place,
  summary place))``, the text not yet normalised; the places name file and line for errors.
  A reader with a ``side_file`` NAME yields a sixth item per example, a JSON-able dict that the
  pipeline writes, line-aligned, to ``raw/{split}.NAME.jsonl`` (its offsets refer to the
  document as yielded, which must then be normalised already); ``complete_side_file(out)``
  completes those files once ``OUT/tok/`` exists (``prep summarization finish``).

``identity(input, **options)`` returns the manifest's description of the input,
``{"input": ..., "sources": {...}}`` (docs/data-preparation.md, "Idempotence").
"""
import importlib
import os
import pkgutil
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from fairseq_plugins.errors import ConfigError

PIPELINES = ("lm", "summarization")


@dataclass(frozen=True)
class ReaderOption:
    """An option of one or more readers: ``--NAME VALUE`` of the helper commands."""

    name: str
    help: str
    default: Optional[str] = None
    choices: Tuple[str, ...] = ()
    repeated: bool = False  # given several times: a list


@dataclass(frozen=True)
class Reader:
    """A corpus format: its ``--corpus`` name, pipeline, options and functions (module doc)."""

    name: str
    pipeline: str
    summary: str
    read: Callable
    identity: Callable
    options: Tuple[ReaderOption, ...] = ()
    needs_input: bool = True  # False: without --input the pipeline downloads the pinned release
    input_is_dir: bool = True  # False: --input may also be one file
    side_file: Optional[str] = None  # summarization: raw/{split}.NAME.jsonl per example (module doc)
    complete_side_file: Optional[Callable] = None  # complete_side_file(out), after tokenization
    # the value of an option that a manifest written before the option existed stands for
    prepared_defaults: Optional[Dict[str, object]] = None

    def option_values(self, values: Dict[str, object]) -> Dict[str, object]:
        """The keyword arguments of ``read``/``identity``: this reader's options from ``values``."""
        return {o.name.replace("-", "_"): values.get(o.name.replace("-", "_")) for o in self.options}


# the readers that belong to an experiment's folder (its data builder), beside this package's own
EXPERIMENT_READERS = ("fairseq_plugins.lab.facts.reader",)

_REGISTRY: Dict[str, Dict[str, Reader]] = {}


def readers(pipeline: str) -> Dict[str, Reader]:
    """``{--corpus name: Reader}`` of one pipeline, in name order (imports every reader module)."""
    if not _REGISTRY:
        found = {p: {} for p in PIPELINES}
        modules = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)] + list(EXPERIMENT_READERS)
        for module in modules:
            reader = importlib.import_module(module).READER
            found[reader.pipeline][reader.name] = reader
        _REGISTRY.update({p: dict(sorted(r.items())) for p, r in found.items()})
    return _REGISTRY[pipeline]


def corpus_list(names) -> str:
    """``a, b or c``: names as an error line lists them."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def get(pipeline: str, name: str) -> Reader:
    """The reader of ``--corpus name``.

    Raises:
        ConfigError: no reader of that name in the pipeline (the line lists the choices).
    """
    known = readers(pipeline)
    if name not in known:
        raise ConfigError(f"--corpus must be {corpus_list(known)}, not '{name}'")
    return known[name]


def all_options(pipeline: str) -> Dict[str, ReaderOption]:
    """Every option a reader of ``pipeline`` declares, by name (the helper commands add them)."""
    options: Dict[str, ReaderOption] = {}
    for reader in readers(pipeline).values():
        for option in reader.options:
            options.setdefault(option.name, option)
    return options


def add_options(parser, pipeline: str) -> None:
    """Add ``--corpus`` (choices from the registry) and the readers' options to ``parser``."""
    parser.add_argument("--corpus", required=True, metavar="|".join(readers(pipeline)),
                        help="the corpus format (one reader each)")
    for option in all_options(pipeline).values():
        parser.add_argument(f"--{option.name}", help=option.help, default=[] if option.repeated else None,
                            action="append" if option.repeated else "store")


def check_options(reader: Reader, values: Dict[str, object], user_options=()) -> None:
    """Refuse a reader option given for a corpus that does not declare it, or a bad choice.

    ``user_options``: the options the user sets on the pipeline (the others are the pipeline's
    own plumbing and are not checked for applicability).

    Raises:
        ConfigError: one line naming the option and the corpora it applies to.
    """
    own = {o.name for o in reader.options}
    for name in user_options:
        if values.get(name.replace("-", "_")) is not None and name not in own:
            takers = [r.name for r in readers(reader.pipeline).values() if name in {o.name for o in r.options}]
            raise ConfigError(f"--{name} applies to --corpus {corpus_list(takers)} only")
    for option in reader.options:
        value = values.get(option.name.replace("-", "_"))
        if option.choices and value is not None and value not in option.choices:
            raise ConfigError(f"--{option.name} must be {corpus_list(option.choices)}, not '{value}'")


def check_input(pipeline: str, values: Dict[str, object], user_options=(), input_word: str = "DIR") -> Reader:
    """The reader of ``values["corpus"]`` after the checks that depend on the corpus.

    ``values``: the helper command's options (``vars(args)``: ``corpus``, ``input`` and the
    readers' options); ``user_options`` as for :func:`check_options`; ``input_word`` names
    ``--input``'s value in the error line.

    Raises:
        ConfigError: an unknown corpus, an option the corpus does not take, a missing
            ``--input`` where the corpus has no default download, a missing input, or a file
            where the reader needs a folder.
    """
    corpus, path = values["corpus"], values.get("input")
    reader = get(pipeline, corpus)
    check_options(reader, values, user_options)
    if reader.needs_input and not path:
        raise ConfigError(f"--corpus {corpus} needs --input {input_word} (see --help)")
    if path:
        if not os.path.exists(path):
            raise ConfigError(f"--input {path} does not exist")
        if reader.input_is_dir and not os.path.isdir(path):
            raise ConfigError(f"--input {path} is not a directory")
    return reader
