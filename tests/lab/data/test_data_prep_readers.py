"""The reader registry of the data-prep pipelines and their one option parser
(fairseq_plugins/lab/data/readers/__init__.py, data-prep/options.sh; docs/data-preparation.md)."""
import subprocess
from pathlib import Path

import pytest

from fairseq_plugins.lab.data import readers
from fairseq_plugins.errors import ConfigError
from prep_command import prep

REPO = Path(__file__).resolve().parents[3]
READERS_DIR = REPO / "fairseq_plugins" / "lab" / "data" / "readers"


def test_every_reader_module_is_registered_once():
    modules = sorted([f"fairseq_plugins.lab.data.readers.{p.stem}" for p in READERS_DIR.glob("*.py")
                      if p.stem != "__init__"] + list(readers.EXPERIMENT_READERS))
    found = {p: readers.readers(p) for p in readers.PIPELINES}
    # one reader per module, each under its pipeline, named as the pipelines document them
    assert sorted(r.read.__module__ for rs in found.values() for r in rs.values()) == modules
    assert list(found["lm"]) == ["books", "txt", "wikitext103"]
    assert list(found["summarization"]) == ["aclsum", "facts", "jsonl", "source-target"]
    assert [r.name for r in found["lm"].values() if not r.needs_input] == ["books"]
    assert [r.name for r in found["summarization"].values() if not r.input_is_dir] == ["jsonl"]


def test_corpus_choices_and_reader_options_come_from_the_registry():
    with pytest.raises(ConfigError, match=r"^--corpus must be books, txt or wikitext103, not 'pg19'$"):
        readers.get("lm", "pg19")
    txt, wiki = readers.get("lm", "txt"), readers.get("lm", "wikitext103")
    readers.check_options(txt, {"paragraphs": "line"}, ("paragraphs",))
    with pytest.raises(ConfigError, match=r"^--paragraphs applies to --corpus txt only$"):
        readers.check_options(wiki, {"paragraphs": "line"}, ("paragraphs",))
    with pytest.raises(ConfigError, match=r"^--paragraphs must be blank-line or line, not 'words'$"):
        readers.check_options(txt, {"paragraphs": "words"}, ("paragraphs",))
    jsonl = readers.get("summarization", "jsonl")
    assert jsonl.option_values({"document_field": "a.b", "other": 1}) == {"document_field": "a.b", "summary_field": None}
    # the helper command's --corpus refuses a name outside the registry in one line
    proc = prep("summarization", "convert", "--corpus", "cnn", "--input", ".", "--out", "x")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr == ("fairseq-longmem prep summarization: error: "
                           "--corpus must be aclsum, facts, jsonl or source-target, not 'cnn'\n")


def _run_parser(tmp_path, *args, status=""):
    script = tmp_path / "t.sh"  # a pipeline: its usage is the comment block above `set -euo pipefail`
    script.write_text("#!/usr/bin/env bash\n# USAGE\n#   t.sh [--alpha A]\nset -euo pipefail\n"
                      f'PROG=t {status}\nsource {REPO / "data-prep" / "options.sh"}\n'
                      'A=default B="" F=0; OPTIONS=(--alpha=A --beta=B --flag!F); parse_options "$@"\n'
                      'echo "A=$A B=$B F=$F given=${A_GIVEN:-}${B_GIVEN:-}"\n')
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True)


@pytest.mark.full
def test_the_pipelines_option_parser(tmp_path):
    def _parse(*args, **kw):
        return _run_parser(tmp_path, *args, **kw)

    assert _parse().stdout == "A=default B= F=0 given=\n"
    assert _parse("--alpha", "x y", "--beta=--z", "--flag").stdout == "A=x y B=--z F=1 given=11\n"
    assert _parse("--beta", "").stdout == "A=default B= F=0 given=1\n"
    assert _parse("--alpha=").stdout == "A= B= F=0 given=1\n"
    assert _parse("--help").stdout == "USAGE\n  t.sh [--alpha A]\n"
    bad = _parse("--gamma", "1")
    assert (bad.returncode, bad.stderr) == (2, "t: error: unknown argument '--gamma' (see --help)\n")
    missing = _parse("--flag", "--alpha")
    assert (missing.returncode, missing.stderr) == (2, "t: error: --alpha needs a value (see --help)\n")
    assert _parse("--flag=1").stderr == "t: error: unknown argument '--flag=1' (see --help)\n"
    assert _parse("--gamma", status="DIE_STATUS=1").returncode == 1  # prepare-lm.sh's status
