"""The one results-table writer of the tools: rows of dicts -> a Markdown table (+ JSON).

    from fairseq_plugins.lab.common.table import Column, markdown, write_files
    table = markdown(rows, [Column("arm", "arm"), Column("ppl", "test ppl", ".2f", align="---:")])
    write_files("OUT/results.md", table, "OUT/results.json", rows, force=True)

A cell is ``column.missing`` when the row lacks the key or holds ``None``, empty when it holds
``""`` (rendered ``| |``, or ``|  |`` with ``pad_empty``), a number formatted with ``column.fmt`` (a format spec such as
``".2f"``, or a function of the value), any other value as ``str``. ``escape=True`` writes ``|``
as ``\\|`` and line breaks as spaces, so free text (model names, decoding options) cannot break
the table.
"""

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Union

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import text_writer, write_atomically


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    fmt: Union[str, Callable[[Any], str], None] = None  # numbers only when a format spec
    align: str = "---"  # "---:" right-aligns
    missing: str = "-"


def _text(column: Column, row: Mapping, escape: bool) -> str:
    value = row.get(column.key)
    if value is None:
        return column.missing
    if callable(column.fmt):
        text = column.fmt(value)
    elif column.fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        text = format(value, column.fmt)
    else:
        text = str(value)
    if escape:
        text = text.replace("|", "\\|").replace("\n", " ")
    return text


def _line(cells: Iterable[str], pad_empty: bool = False) -> str:
    return "|" + "|".join(f" {c} " if c or pad_empty else " " for c in cells) + "|"


def markdown(rows: Iterable[Mapping], columns: Sequence[Column], escape: bool = False,
             pad_empty: bool = False) -> str:
    """A Markdown table: header, alignment line, one line per row (no final newline)."""
    lines = [_line(c.title for c in columns), "|" + "|".join(c.align for c in columns) + "|"]
    lines += [_line((_text(c, row, escape) for c in columns), pad_empty) for row in rows]
    return "\n".join(lines)


def order_key(order: Sequence[str], name: str):
    """Sort key putting names in ``order`` first, in that order, any other name after them by name
    (e.g. a job's arms in the registry's order)."""
    return (order.index(name) if name in order else len(order), name)


def to_json(payload: Any, sort_keys: bool = False, ensure_ascii: bool = True) -> str:
    return json.dumps(payload, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n"


def write_files(md_path: str, table: str, json_path: Optional[str] = None, payload: Any = None,
                force: bool = True, sort_keys: bool = False, ensure_ascii: bool = True) -> List[str]:
    """Write ``table`` (one final newline) to ``md_path`` and ``payload`` as JSON to ``json_path``.

    Both are written whole or not at all (:func:`~fairseq_plugins.lab.common.files.write_atomically`).
    Returns the paths written. Raises:
        ConfigError: one of them exists and ``force`` is false (nothing is written then).
    """
    paths = [md_path] + ([json_path] if json_path else [])
    if not force:
        for path in paths:
            if os.path.exists(path):
                raise ConfigError(f"{path} exists (use --force to overwrite)")
    writers = {md_path: text_writer(table)}
    if json_path:
        writers[json_path] = text_writer(to_json(payload, sort_keys, ensure_ascii))
    return write_atomically(writers)
