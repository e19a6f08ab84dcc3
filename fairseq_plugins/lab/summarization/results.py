"""Summarization result rows and their tables (docs/summarization.md#result-tables).

A row is one system (a model or a baseline) scored on one split: the dict that
``fairseq-longmem summarize score`` writes to ``results.json`` (:func:`.score_files` plus the
model, checkpoint, its parameter count, split and decoding). Columns: model, checkpoint, parameters, split, examples,
ROUGE-1/2/L/Lsum F1 (x100), sacreBLEU (corpus BLEU; the row's ``bleu_signature`` names its
tokenizer), mean hypothesis and reference length in words, decoding options.
"""

import json
import os
from typing import Iterable, List, Mapping, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown, write_files

FLOAT_KEYS = {"rouge1", "rouge2", "rougeL", "rougeLsum", "bleu", "hyp_words_mean", "ref_words_mean"}
TEXT_KEYS = ("model", "checkpoint", "split", "decoding")
COLUMNS = [
    Column(key, title, (lambda v: f"{float(v):.2f}") if key in FLOAT_KEYS
           else (lambda v: f"{int(v):,}") if key == "parameters" else None,
           align="---" if key in TEXT_KEYS else "---:")
    for key, title in [
        ("model", "model"), ("checkpoint", "checkpoint"), ("parameters", "params"), ("split", "split"),
        ("n", "examples"),
        ("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"), ("rougeLsum", "ROUGE-Lsum"),
        ("bleu", "BLEU"), ("hyp_words_mean", "hyp words"), ("ref_words_mean", "ref words"),
        ("decoding", "decoding")]
]
REQUIRED = ("model", "split", "n", "rouge1", "rouge2", "rougeL", "bleu")


def checkpoint_parameters(path: str) -> Optional[int]:
    """The parameter count of a fairseq checkpoint's model (tensors shared by several names, e.g.
    tied embeddings, counted once); None where ``path`` is not a file (``--checkpoint`` is then
    only the name the row records).

    Raises:
        ConfigError: the file cannot be read as a fairseq checkpoint.
    """
    if not os.path.isfile(path):
        return None
    from fairseq_plugins.lab.common.checkpoints import read_state

    state = read_state(path)  # fairseq's own transformer stores its config as an argparse.Namespace: allowed
    seen, total = set(), 0
    for tensor in state["model"].values():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            total += tensor.numel()
    return total


def render_markdown(rows: Iterable[Mapping]) -> str:
    """A markdown table with one line per result row; a missing or empty value reads ``-``."""
    return markdown([{k: (None if v == "" else v) for k, v in row.items()} for row in rows], COLUMNS, escape=True)


def load_row(path: str) -> dict:
    """The result row of ``path`` (a ``results.json``; a list of one row is accepted).

    Raises:
        ConfigError: missing, not JSON, not one row, or lacking a metric of :data:`REQUIRED`.
    """
    try:
        with open(path, encoding="utf-8") as f:
            row = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path} not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not JSON ({e})") from None
    if isinstance(row, list) and len(row) == 1:
        row = row[0]
    if not isinstance(row, dict):
        raise ConfigError(f"{path} does not hold one result row (a JSON object)")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)} (not written by fairseq-longmem summarize score?)")
    return row


def write_outputs(rows: List[Mapping], out_dir: str, stem: str, force: bool, payload=None) -> str:
    """Write ``OUT_DIR/STEM.md`` (the table of ``rows``) and ``OUT_DIR/STEM.json`` (``payload``,
    default the list of rows), both or neither. Returns the table.

    Raises:
        ConfigError: either file exists and not ``force`` (nothing written).
    """
    table = render_markdown(rows)
    write_files(os.path.join(out_dir, f"{stem}.md"), table, os.path.join(out_dir, f"{stem}.json"),
                rows if payload is None else payload, force=force, ensure_ascii=False)
    return table


def merge(paths: List[str], out_dir: str, force: bool = False, stem: str = "comparison") -> str:
    """One table of the rows of ``paths`` (results.json files, in the order given), written to
    ``OUT_DIR/comparison.{md,json}``. Returns the table.

    Raises:
        ConfigError: a file given twice (its row would be two rows), a file that is not a result
            row (:func:`load_row`), or an output exists and not ``force``.
    """
    seen = {}
    for path in paths:
        key = os.path.realpath(path)
        if key in seen:
            same = path if seen[key] == path else f"{seen[key]} and {path}"
            raise ConfigError(f"{same} given twice (the same file{'' if seen[key] == path else ', by two names'}), "
                              "which would make two rows of one result; give each results.json once")
        seen[key] = path
    rows = [load_row(path) for path in paths]
    return write_outputs(rows, out_dir, stem, force)
