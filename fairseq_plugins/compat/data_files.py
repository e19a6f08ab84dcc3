"""A data folder that fairseq's own tasks cannot read, as one line.

fairseq's tasks (``language_modeling``, ``translation``, ...) read a folder that
``fairseq-preprocess`` wrote: a ``dict.txt`` (``dict.LANG.txt`` for a language pair) and a
``.bin``/``.idx`` pair per binarized split. When a file is not there they stop in a traceback:
``FileNotFoundError: Dataset not found: test (DATA/test)`` for a split (a ``--gen-subset`` or
``--valid-subset`` that was never binarized), ``FileNotFoundError: ... 'DATA/dict.txt'`` for a
folder that is no ``fairseq-preprocess`` output, ``Could not infer language pair`` for a
translation folder without a split named after its pair. :func:`missing_data_message` turns
each into one line naming the folder, what it does hold and the option that picks it. The
plugin's ``streaming_lm`` task refuses the same cases itself
(:mod:`fairseq_plugins.tasks.streaming_language_modeling`).
"""

import os
import re
from typing import List, Optional

from fairseq_plugins.compat.process import running_tool

SPLIT_NOT_FOUND = re.compile(r"^Dataset not found: (\S+) \((.+)\)$")  # fairseq's tasks' load_dataset
NO_LANGUAGE_PAIR = "Could not infer language pair"  # fairseq's translation task's setup_task


def held_splits(folder: str) -> List[str]:
    """The splits ``folder`` holds: the first dotted part of each ``.idx`` file's name
    (``valid.idx``: ``valid``; ``test.src-tgt.src.idx``: ``test``), sorted."""
    if not os.path.isdir(folder):
        return []
    return sorted({name.split(".")[0] for name in os.listdir(folder) if name.endswith(".idx")})


def _split_option() -> str:
    return "--train-subset/--valid-subset" if running_tool() == "train" else "--gen-subset"


def _preprocess_output_hint(folder: str) -> str:
    """data-prep's recipes write fairseq's files to OUT/bin: name it when ``folder`` is OUT."""
    inner = os.path.join(folder, "bin")
    return f"; the fairseq data folder is {inner} (data-prep's OUT/bin)" if held_splits(inner) else ""


def _missing_split(exc: FileNotFoundError) -> Optional[str]:
    match = SPLIT_NOT_FOUND.match(str(exc))
    if match is None:
        return None
    split, path = match.groups()
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if not os.path.isdir(folder):
        return f"data folder {folder} does not exist; pass the folder fairseq-preprocess wrote"
    held = held_splits(folder)
    if not held:
        return (f"split '{split}' not found in {folder}, which holds no binarized split (.bin/.idx); pass the folder "
                f"fairseq-preprocess wrote{_preprocess_output_hint(folder)}")
    return (f"split '{split}' not found in {folder} (fairseq-preprocess writes a .bin/.idx pair per split it "
            f"binarized; this folder holds {', '.join(held)}): pass one of them with {_split_option()}, or binarize "
            f"{split} with fairseq-preprocess")


def _missing_dictionary(exc: FileNotFoundError) -> Optional[str]:
    name = str(exc.filename or "")
    if not re.fullmatch(r"dict(\.[^./]+)?\.txt", os.path.basename(name)):
        return None
    folder = os.path.dirname(name) or "."
    if not os.path.isdir(folder):
        return f"data folder {folder} does not exist; pass the folder fairseq-preprocess wrote"
    return (f"{name} is missing: {folder} is not a fairseq-preprocess output folder (or not for this task and "
            f"languages){_preprocess_output_hint(folder)}")


def _no_language_pair(exc: Exception) -> Optional[str]:
    if not str(exc).startswith(NO_LANGUAGE_PAIR):
        return None
    return ("fairseq's translation task cannot tell the language pair: the data folder holds no split named after "
            "one (SPLIT.SRC-TGT.LANG.bin/.idx, as fairseq-preprocess writes them); pass --source-lang and "
            "--target-lang (the LANG of its dict.LANG.txt files), or the folder fairseq-preprocess wrote")


def missing_data_message(exc: BaseException) -> Optional[str]:
    """The one line for a fairseq task stopping on a data file that is not there (module
    docstring), or ``None``."""
    if isinstance(exc, FileNotFoundError):
        return _missing_split(exc) or _missing_dictionary(exc)
    if type(exc) is Exception:
        return _no_language_pair(exc)
    return None
