"""A data folder that fairseq's own tasks cannot read, as one line.

fairseq's tasks (``language_modeling``, ``translation``, ...) read a folder that
``fairseq-preprocess`` wrote: a ``dict.txt`` (``dict.LANG.txt`` for each language of a pair)
and a ``.bin``/``.idx`` pair per binarized split (``SPLIT.idx``; ``SPLIT.SRC-TGT.LANG.idx`` for a
pair). When something is not there they stop in a traceback: ``FileNotFoundError: Dataset not
found: test (DATA/test)`` for a split (a ``--gen-subset`` or ``--valid-subset`` never
binarized, or a split name written as a path: ``test/``), ``FileNotFoundError``/``NotADirectoryError``
on ``DATA/dict.txt`` for a folder that is no ``fairseq-preprocess`` output (or a file), on
``DATA/dict.LANG.txt`` for ``-s/-t`` languages it has no dictionary for, on the folder itself
where the translation task lists it (``infer_language_pair``: a folder that does not exist, or a
file), and ``Could not infer language pair`` for a translation folder without a split named
after a pair. :func:`missing_data_message` turns each into one line naming the folder, what it
holds and the option that picks it. The plugin's ``streaming_lm`` task refuses the same
cases itself (:mod:`fairseq_plugins.tasks.streaming_language_modeling`).
"""

import os
import re
from collections import defaultdict
from typing import Dict, List, Optional

from fairseq_plugins.compat.frames import passed_through
from fairseq_plugins.compat.process import fairseq_command_line, running_tool

SPLIT_NOT_FOUND = re.compile(r"^Dataset not found: (\S+) \((.+)\)$")  # fairseq's tasks' load_dataset
NO_LANGUAGE_PAIR = "Could not infer language pair"  # fairseq's translation task's setup_task
DICTIONARY = re.compile(r"dict(?:\.([^/]+))?\.txt")  # dict.txt, dict.LANG.txt
PREFIX_OPTIONS = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}  # fairseq-preprocess's


def held_splits(folder: str) -> Dict[Optional[str], List[str]]:
    """The binarized splits ``folder`` holds, by language pair (``None``: a language model's
    ``SPLIT.idx``; ``"src-tgt"``: ``SPLIT.src-tgt.LANG.idx``), each list sorted."""
    held = defaultdict(set)
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name.endswith(".idx"):
                parts = name.split(".")
                held[parts[1] if len(parts) >= 4 and "-" in parts[1] else None].add(parts[0])
    return {pair: sorted(splits) for pair, splits in sorted(held.items(), key=lambda kv: kv[0] or "")}


def held_text(held: Dict[Optional[str], List[str]]) -> str:
    """``train, valid`` (one language model's splits) or ``train, valid for src-tgt; test for de-en``."""
    return "; ".join(", ".join(splits) + (f" for {pair}" if pair else "") for pair, splits in held.items())


def dictionaries(folder: str) -> List[str]:
    """The dictionaries in ``folder``: ``dict.txt`` as ``""``, each ``dict.LANG.txt`` as ``LANG``; sorted."""
    if not os.path.isdir(folder):
        return []
    return sorted(m.group(1) or "" for m in map(DICTIONARY.fullmatch, os.listdir(folder)) if m)


def _no_folder(folder: str) -> str:
    """The line for a data path that is no folder: ``folder`` (or a folder above it) is a file,
    or it does not exist."""
    above = folder
    while above and not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if above and os.path.isfile(above):
        beside = os.path.dirname(above) or "."
        hint = f"; {beside}, the folder it is in, is one" if dictionaries(beside) or held_splits(beside) else ""
        return (f"{above} is a file, not a data folder: pass the folder fairseq-preprocess wrote "
                f"(its --destdir){hint}")
    return f"data folder {folder} does not exist; pass the folder fairseq-preprocess wrote"


def _preprocess_output_hint(folder: str) -> str:
    """data-prep's recipes write fairseq's files to OUT/bin: name it when ``folder`` is OUT."""
    inner = os.path.join(folder, "bin")
    return f"; the fairseq data folder is {inner} (data-prep's OUT/bin)" if held_splits(inner) else ""


def _split_option(split: Optional[str] = None) -> str:
    """The option that picks a split: ``--gen-subset``, or fairseq-train's option that names
    ``split`` on its command line (``--train-subset/--valid-subset`` where none does or no
    ``split`` is given)."""
    if running_tool() != "train":
        return "--gen-subset"
    parsed = fairseq_command_line("train") if split is not None else None
    for option in ("--train-subset", "--valid-subset"):
        if split in str(getattr(parsed, option[2:].replace("-", "_"), None) or "").split(","):
            return option
    return "--train-subset/--valid-subset"


def _path_like_split(split: str, folder: str, held: Dict[Optional[str], List[str]]) -> str:
    """``split`` holds a slash: fairseq joins it to the data folder as the start of its files'
    names, so no split of that name can exist; name the folder that holds it where one does."""
    bare = os.path.basename(split.rstrip("/"))
    cause = "ends in a slash" if "/" not in split.rstrip("/") else "is a path"
    what = f"split '{split}' {cause}: a split is the name fairseq-preprocess gave its files in the data folder"
    option = _split_option(split)
    inner = os.path.normpath(os.path.join(folder, os.path.dirname(split.rstrip("/"))))
    if bare and inner != os.path.normpath(folder) and any(bare in s for s in held_splits(inner).values()):
        return f"{what}, not a path; {inner} holds {bare}: pass {inner} as the data folder and {option} {bare}"
    holds = held_text(held) if held else "no binarized split"
    fix = f"{option} {bare}" if bare else f"one of its splits with {option}"
    return f"{what} ({folder} holds {holds}), not a path; pass {fix}"


def _missing_split(exc: FileNotFoundError) -> Optional[str]:
    match = SPLIT_NOT_FOUND.match(str(exc))
    if match is None:
        return None
    split, path = match.groups()
    # language_modeling names FOLDER/SPLIT, translation FOLDER (a split may hold a slash)
    folder = path if os.path.isdir(path) or not path.endswith(split) else path[:len(path) - len(split)]
    folder = folder.rstrip("/") or "."
    if not os.path.isdir(folder):
        return _no_folder(folder)
    held = held_splits(folder)
    if "/" in split:
        return _path_like_split(split, folder, held)
    if not held:
        prefix = PREFIX_OPTIONS.get(split, "--trainpref/--validpref/--testpref")
        return (f"split '{split}' not found in {folder}, which holds no binarized split (.bin/.idx): binarize it "
                f"into that folder with fairseq-preprocess ({prefix} FILE, its dictionary through --srcdict), or "
                f"pass the folder that holds it{_preprocess_output_hint(folder)}")
    return (f"split '{split}' not found in {folder} (fairseq-preprocess writes a .bin/.idx pair per split it "
            f"binarized; this folder holds {held_text(held)}): pass one of them with {_split_option()}, or binarize "
            f"{split} with fairseq-preprocess")


def _languages_text(languages: List[str]) -> str:
    return ", ".join(languages) + " (" + ", ".join(f"dict.{lang}.txt" for lang in languages) + ")"


def _languages_without_dictionary(wanted: str, held: List[str]) -> List[str]:
    """``wanted`` (the dictionary fairseq stopped on) and the other ``-s/-t`` languages of the
    command line that ``held`` has no dictionary for, in the order given."""
    parsed = fairseq_command_line(running_tool())
    given = [getattr(parsed, "source_lang", None), getattr(parsed, "target_lang", None)] if parsed else []
    given = given if wanted in given else [wanted]
    return list(dict.fromkeys(lang for lang in given if lang and lang not in held))


def _missing_dictionary(exc: OSError) -> Optional[str]:
    name = str(exc.filename or "")
    match = DICTIONARY.fullmatch(os.path.basename(name))
    if match is None:
        return None
    folder = os.path.dirname(name) or "."
    if not os.path.isdir(folder):
        return _no_folder(folder)
    wanted, held = match.group(1), dictionaries(folder)
    languages = [lang for lang in held if lang]
    if wanted and languages:
        missing = " or ".join(_languages_without_dictionary(wanted, held))
        return (f"{folder} holds the dictionaries of {_languages_text(languages)}, not {missing}: pass "
                f"-s/--source-lang and -t/--target-lang among them")
    if wanted and "" in held:
        return (f"{folder} holds one dictionary (dict.txt, as fairseq-preprocess --only-source writes for a language "
                f"model), not a pair's dict.{wanted}.txt: pass --task language_modeling (or streaming_lm) for a "
                f"language model, or the folder fairseq-preprocess wrote for the pair")
    if not wanted and languages:
        return (f"{folder} holds the dictionaries of a language pair, {_languages_text(languages)}, not a language "
                f"model's dict.txt: pass the task that reads a pair (--task translation), or the folder "
                f"fairseq-preprocess --only-source wrote")
    return f"{name} is missing: {folder} is not a fairseq-preprocess output folder{_preprocess_output_hint(folder)}"


def _listed_folder_unreadable(exc: OSError) -> Optional[str]:
    """The translation task lists the data folder to infer the language pair: a folder that
    does not exist (``FileNotFoundError``) or a file (``NotADirectoryError``)."""
    if exc.filename is None or not passed_through(exc, "fairseq/data/data_utils.py", "infer_language_pair"):
        return None
    return _no_folder(str(exc.filename))


def _no_language_pair(exc: Exception) -> Optional[str]:
    if not str(exc).startswith(NO_LANGUAGE_PAIR):
        return None
    parsed = fairseq_command_line(running_tool())
    folder = (str(getattr(parsed, "data", "") or "").split(os.pathsep) or [""])[0] or None
    what = "the data folder"
    if folder is not None and os.path.isdir(folder):
        held = dictionaries(folder)
        languages = [lang for lang in held if lang]
        if held == [""]:
            return (f"{folder} holds a language model's dictionary (dict.txt) and the task is translation (fairseq's "
                    f"default): pass --task language_modeling (or streaming_lm), or the folder fairseq-preprocess "
                    f"wrote for a pair")
        hint = _preprocess_output_hint(folder)
        if hint:
            return f"fairseq's translation task finds no language pair in {folder}{hint}"
        what = folder + (f", which holds the dictionaries of {_languages_text(languages)}," if languages else "")
    return (f"fairseq's translation task cannot tell the language pair: {what} holds no split named after one "
            f"(SPLIT.SRC-TGT.LANG.bin/.idx, as fairseq-preprocess writes them); pass -s/--source-lang and "
            f"-t/--target-lang, or the folder fairseq-preprocess wrote")


def missing_data_message(exc: BaseException) -> Optional[str]:
    """The one line for a fairseq task stopping on a data file that is not there (module
    docstring), or ``None``."""
    if isinstance(exc, FileNotFoundError):
        return _listed_folder_unreadable(exc) or _missing_split(exc) or _missing_dictionary(exc)
    if isinstance(exc, NotADirectoryError):
        return _listed_folder_unreadable(exc) or _missing_dictionary(exc)
    if type(exc) is Exception:
        return _no_language_pair(exc)
    return None
