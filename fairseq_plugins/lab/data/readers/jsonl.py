"""JSON lines (prepare-summarization.sh --corpus jsonl): a folder with
``{train,valid,test}.jsonl`` (valid may be val.jsonl), or ONE .jsonl file whose examples are
split by the md5 rule on the normalised document. Each non-blank line is a JSON object;
the document and summary fields are dotted paths (a.b.0 indexes a list); a list of strings is
joined with spaces; null counts as empty. An "id" field (string or integer) names the example,
else file:line."""
import json
import os
import re

from fairseq_plugins.lab.data.manifest import files_identity
from fairseq_plugins.lab.data.readers import Reader, ReaderOption
from fairseq_plugins.lab.data.text import SPLITS, read_lines, split_file
from fairseq_plugins.errors import ConfigError


def files(path):
    """{split: path} for a folder of split files, or {None: path} for one file to split by hash."""
    if os.path.isfile(path):
        return {None: path}
    found, missing = {}, []
    for split in SPLITS:
        p = split_file(path, split, ".jsonl")
        if p is None:
            missing.append(f"{split}.jsonl" + (" (or val.jsonl)" if split == "valid" else ""))
        found[split] = p
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)} (give a folder with train/valid/test .jsonl or one .jsonl file)")
    return found


def identity_files(path):
    return list(files(path).values())


def get_field(obj, path):
    """Value at a dotted path (a.b.0 indexes a list); KeyError if absent. A key that contains
    dots is found when it is the whole path."""
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and re.fullmatch(r"\d+", part) and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise KeyError(path)
    return cur


def field_text(value, field, where):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    kind = ("boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float))
            else "object" if isinstance(value, dict) else "list of non-strings")
    raise ConfigError(f"{where}: field '{field}' is a {kind}, not text or a list of strings")


def read(path, document_field=None, summary_field=None):
    doc_field, sum_field = document_field or "document", summary_field or "summary"
    for split, fpath in files(path).items():
        name = os.path.basename(fpath)
        for i, line in enumerate(read_lines(fpath), 1):
            if not line.strip():
                continue
            where = f"{fpath}:{i}"
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ConfigError(f"{where}: invalid JSON ({str(e).split(':')[0]})")
            if not isinstance(obj, dict):
                raise ConfigError(f"{where}: a JSON object is expected, found {type(obj).__name__}")
            texts = []
            for field in (doc_field, sum_field):
                try:
                    texts.append(field_text(get_field(obj, field), field, where))
                except KeyError:
                    raise ConfigError(f"{where}: no field '{field}' (set --document-field / --summary-field)")
            ex_id = obj.get("id")
            ex_id = str(ex_id) if isinstance(ex_id, (str, int)) and str(ex_id).strip() else f"{name}:{i}"
            yield split, ex_id, texts[0], texts[1], (f"{where} ('{doc_field}')", f"{where} ('{sum_field}')")


READER = Reader(
    name="jsonl", pipeline="summarization", read=read, input_is_dir=False,
    identity=lambda path, document_field=None, summary_field=None: files_identity(path, identity_files(path)),
    summary="{train,valid,test}.jsonl, or one .jsonl file split by hash of the document",
    options=(ReaderOption("document-field", "dotted path of the document [document]"),
             ReaderOption("summary-field", "dotted path of the summary [summary]")),
)
