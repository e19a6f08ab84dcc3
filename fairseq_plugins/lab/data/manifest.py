"""Input identities and the manifest of a data-prep output folder (docs/data-preparation.md).

An output folder's manifest (``prepare.json``) records the options and the input's identity;
:func:`check_prepared` compares a rerun with it (up to date, build, or refuse with one line
naming ``--force``); it is written atomically (:func:`fairseq_plugins.lab.common.files.write_json`).
Input identities: :func:`fingerprint` (names + sizes), :func:`sha256_files` (names + content).
Standard library only.
"""
import hashlib
import json
import os

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import write_json


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


def check_prepared(out, force, want, keys, expected, description, defaults=None):
    """Whether OUT must be built, shared by the data-prep pipelines (LM and summarization).

    Returns 0 (build: ``force``, no OUT, an empty one, or this pipeline's unfinished run: no
    manifest but the :data:`UNFINISHED` marker; says so in one line) or 3 (up to date: every
    option in ``keys`` equals the manifest's and every ``expected`` file exists; prints one line
    naming ``description``). ``defaults``: the value of an option a manifest written before the
    option existed does not record. Raises ConfigError (the caller's exit status) when OUT holds other
    output: a complete one (its manifest) made otherwise, or files without manifest nor marker.
    """
    manifest_path = os.path.join(out, "prepare.json")
    hint = "pass --force to rebuild it or choose another --out"
    if force or not os.path.isdir(out):
        return 0
    if not os.path.isfile(manifest_path):
        leftovers = sorted(set(os.listdir(out)) - NOT_OUTPUT)
        if leftovers and not os.path.isfile(os.path.join(out, UNFINISHED)):
            raise ConfigError(f"{out} holds files ({', '.join(leftovers[:4])}{' ...' if len(leftovers) > 4 else ''})"
                              f" but no prepare.json (another folder, or a run older than its {UNFINISHED} marker); "
                              f"{hint}")
        if leftovers:
            print(f"{out}: the previous run did not finish (no prepare.json); preparing it again")
        return 0
    have = {**(defaults or {}), **recorded_options(manifest_path, hint)}
    for key in keys:
        if have.get(key) != want.get(key):  # an option absent from both (its default) is equal
            if key == "sources":
                what = "the input data differ (" + _short(have.get(key)) + " vs now " + _short(want.get(key)) + ")"
            else:
                what = f"{key}={_short(have.get(key))} (requested {_short(want.get(key))})"
            raise ConfigError(f"{out} was prepared with different options: {what}; {hint}")
    missing = [p for p in expected if not os.path.isfile(os.path.join(out, p))]
    if missing:
        raise ConfigError(f"{out} is incomplete (missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); {hint}")
    print(f"{out} is up to date ({description}); nothing to do")
    return 3


def check_generated(out, force, manifest_name, want, expected, description):
    """Whether OUT must be built, shared by the generated tasks (make-sorting.sh, make-recall.sh),
    whose manifest ``manifest_name`` is the last file a build writes.

    Returns 0 (build: ``force``, no OUT, or one holding nothing but the scratch folder ``.raw.tmp``)
    or 3 (up to date: every option of ``want`` equals the manifest's and every ``expected`` file
    exists; prints one line naming ``description``). Raises ConfigError (the caller's exit status)
    when OUT holds files but no manifest, was made with other options, or is incomplete.
    """
    hint = "pass --force to rebuild it or choose another --out"
    if force or not os.path.isdir(out):
        return 0
    manifest = os.path.join(out, manifest_name)
    if not os.path.isfile(manifest):
        leftovers = sorted(set(os.listdir(out)) - {".raw.tmp"})
        if leftovers:
            raise ConfigError(f"{out} holds files ({', '.join(leftovers[:4])}) but no {manifest_name} "
                              f"(an unfinished run or another folder); {hint}")
        return 0
    have = recorded_options(manifest, hint)
    for key, value in want.items():
        if have.get(key) != value:
            raise ConfigError(f"{out} was made with different options: {key}={_short(have.get(key))} "
                              f"(requested {_short(value)}); {hint}")
    missing = [p for p in expected if not os.path.isfile(os.path.join(out, p))]
    if missing:
        raise ConfigError(f"{out} is incomplete (missing {', '.join(missing[:3])}); {hint}")
    print(f"{out} is up to date ({description}); nothing to do")
    return 3


def parse_timings(items):
    """``--timing STAGE=SECONDS`` arguments -> {stage: seconds}."""
    timings = {}
    for t in items:
        k, _, v = t.partition("=")
        timings[k] = float(v)
    return timings


def write_manifest(out, options, args, **content):
    """Write OUT/prepare.json, the last file of a build, and return it as a dict.

    ``options``: what a rerun must match (:func:`check_prepared`); ``args``: the ``finish``
    command's ``workers``, ``tools`` (JSON text) and ``timing`` (``STAGE=SECONDS`` items);
    ``content``: the pipeline's counts. ``fairseq_data`` is OUT/bin as an absolute path.
    """
    manifest = {"options": options, "workers": args.workers, "tools": json.loads(args.tools) if args.tools else {},
                "stage_seconds": parse_timings(args.timing), "fairseq_data": os.path.join(os.path.realpath(out), "bin"),
                **content}
    write_json(os.path.join(out, "prepare.json"), manifest)
    return manifest


def recorded_options(path, hint):
    """The ``options`` a manifest at ``path`` recorded; ConfigError (ending in ``hint``) when it
    cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["options"]
    except (ValueError, KeyError, TypeError, OSError):
        raise ConfigError(f"{path} is unreadable; {hint}")


def folder_identity(path):
    """The manifest's input of a corpus folder: its real path and :func:`fingerprint`."""
    return {"input": os.path.realpath(path), "sources": {"files": fingerprint(path)}}


def files_identity(path, paths):
    """The manifest's input of a corpus given as files: ``path`` and :func:`sha256_files` of ``paths``."""
    return {"input": os.path.realpath(path), "sources": {"files": sha256_files(paths)}}
