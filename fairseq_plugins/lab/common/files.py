"""Outputs written whole or not at all.

Every command of ``fairseq-longmem`` that writes files writes them through
:func:`write_atomically`: each output is first written under a hidden temporary name in
its own folder, and only when every writer has succeeded are they renamed into place. A
refusal or a crash half-way leaves the earlier files (and no temporary one) as they were.
"""

import json
import os
from typing import Callable, List, Mapping, Optional, Sequence

from fairseq_plugins.errors import ConfigError

Writer = Callable[[str], None]  # writes one output to the path it is given
# every output renamed into place in this process, in order, and every output written in place
# (:func:`written_in_place`): what a command interrupted by Ctrl-C has kept whole or left
# incomplete (fairseq_plugins.lab.common.cli.run_command names them)
WRITTEN: List[str] = []
IN_PLACE: List[str] = []


def written_in_place(path: str) -> str:
    """Record that ``path`` is about to be written in place, not through :func:`write_atomically`
    (the data-prep stages' text files, in an output folder their pipeline marks unfinished until
    it is done), so that an interruption names it; returns ``path``."""
    IN_PLACE.append(path)
    return path


def text_writer(text: str) -> Writer:
    """A writer of ``text`` (UTF-8; one final newline added if missing)."""
    def write(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    return write


def write_atomically(writers: Mapping[str, Writer]) -> List[str]:
    """Call ``writers[path](tmp)`` for every output ``path`` (``tmp``: a hidden name of its own
    beside it, ``.NAME.XXXXXXXX.tmp``; folders created), then rename every ``tmp`` to its ``path``.

    Returns the paths written. On any exception — of a writer, or of a rename — every temporary
    file left is removed and it is re-raised: a writer's failure changes no output, and an output
    that cannot be renamed into place (a folder of that name) is refused before any is renamed. Two
    processes writing the same outputs at once do not disturb each other (each has its own
    temporary names); the later rename wins.

    Raises:
        ConfigError: an output path that is a folder (nothing written).
    """
    import uuid

    done = []
    try:
        for path, write in writers.items():
            if os.path.isdir(path):
                raise ConfigError(f"{path} is a folder; remove it or choose another output")
            folder, name = os.path.split(os.path.abspath(path))
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:8]}.tmp")  # created by the writer (umask)
            done.append((tmp, path))
            write(tmp)
        for tmp, path in done:
            os.replace(tmp, path)
            WRITTEN.append(path)
    except BaseException:
        for tmp, _ in done:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    return [path for _, path in done]


def check_out_folder(path: str, option: str = "--out") -> None:
    """Refuse, before any work, an output folder that cannot be one: ``path`` or one of its
    parents is a file.

    Raises:
        ConfigError: naming the file and the fix.
    """
    head = os.path.abspath(path)
    while head and not os.path.exists(head):
        head = os.path.dirname(head)
    if head and not os.path.isdir(head):
        raise ConfigError(f"{option} {path}: {head} is a file, not a folder; give a folder (it is created if missing)")


def refuse_existing(paths: List[str], force: bool, option: str = "--force", where: str = "--out") -> None:
    """Refuse, before any work, to replace results that exist unless ``force`` (``option`` the
    command's flag for it, ``where`` its option naming the output).

    Raises:
        ConfigError: naming the files there and the flag.
    """
    there = [p for p in paths if os.path.exists(p)]
    if there and not force:
        one = len(there) == 1
        raise ConfigError(f"{', '.join(there)} already exist{'s' if one else ''}; pass {option} to replace "
                          f"{'it' if one else 'them'}, or choose another {where}")


def training_seed(checkpoint: str) -> Optional[int]:
    """The training seed a fairseq checkpoint's config records (``common.seed``), or ``None``
    where it records none or cannot be read."""
    from fairseq_plugins.compat.checkpoints import load_with_fairseq_globals

    try:
        state = load_with_fairseq_globals(checkpoint)
    except Exception:  # noqa: BLE001 - provenance is best effort; the command reads the file itself
        return None
    common = (state.get("cfg") or {}).get("common") or {}
    return int(common["seed"]) if common.get("seed") is not None else None


def provenance(prog: str, argv: List[str], checkpoints: Sequence[str] = ()) -> dict:
    """What a JSON result records of the run that wrote it: the command line (shell-quoted), the
    installed versions of this package, fairseq and torch (None where one is not installed) and,
    with ``checkpoints``, the training seed of each (``seeds``, :func:`training_seed`)."""
    import shlex
    from importlib import metadata

    def version(package: str):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    record = {"command": " ".join(shlex.quote(a) for a in [*prog.split(), *argv]),
              "fairseq_longmem": version("fairseq-longmem"), "fairseq": version("ve-fairseq") or version("fairseq"),
              "torch": version("torch")}
    if checkpoints:
        record["seeds"] = {path: training_seed(path) for path in checkpoints}
    return record


def write_json(path, obj):
    """Write ``obj`` (indented, sorted keys) atomically: into PATH.tmp, then renamed."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
