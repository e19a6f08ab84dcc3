"""Every documented command that reads the quick start's outputs runs as written after the quick start.

The quick start's outputs are made small, once for the run (conftest's ``quick_start``): ``data/books`` is prepared
from the books fixture (``tests/fixtures/books_txt``, vocabulary 300) and
``runs/quickstart/ARM`` are tiny ``scripts/train.sh`` runs of the quick start's three arms. Each
page then runs in a sandbox folder of its own that links the repository's code and environment,
that data and those runs (``runs/quickstart`` itself is the page's, so what a page writes there
stays its own): every ``bash`` block of the "The data path" section of :data:`DATA_PATH` (the page
the README points to for the steps by hand), and every ``bash`` block of another page under docs/
that names the quick start's outputs (``runs/quickstart``, ``data/books/``), in order, in one
shell. A sketch that cannot run as written belongs in a fence without ``bash``. The only changes
to what the pages say are :data:`SUBSTITUTIONS` (each must occur): the training budget shrinks
(``--max-update 600`` to 2) and the data path's prepare command gets the fixture's options (so
that it finds its data up to date, as after the real quick start).
"""

import glob
import json
import os
import re
import subprocess
import textwrap

import pytest

import helpers

ROOT = helpers.ROOT
FIXTURE_OPTIONS = helpers.QUICK_START_PREPARE_OPTIONS
PREPARE = helpers.QUICK_START_PREPARE
QUICK_START_OUTPUTS = ("runs/quickstart", "data/books/")
QUICK_START_ARMS = helpers.QUICK_START_ARMS
SHORT = ("--max-update 600", "--max-update 2")
DATA_PATH = "docs/quickstart.md"  # its "The data path" section: the quick start's steps by hand
SUBSTITUTIONS = {
    DATA_PATH: [(PREPARE, f"{PREPARE} {FIXTURE_OPTIONS}"), SHORT],
    "docs/fastformer.md": [SHORT],
    "docs/training-at-scale.md": [SHORT],
}


def _bash_blocks(text):
    return [textwrap.dedent(block) for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def page_blocks(page):
    """The blocks of ``page`` (a path in the repository) that run after the quick start: in
    docs/, those naming its outputs, except recipes that prepare corpora of their own (hours)."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    if page == DATA_PATH:
        return _bash_blocks(text.split("## The data path", 1)[1].split("\n## ", 1)[0])
    return [b for b in _bash_blocks(text) if any(path in b for path in QUICK_START_OUTPUTS)
            and "data-prep/prepare-" not in b]


PAGES = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
               if page_blocks(os.path.relpath(p, ROOT)))


def run_page(quick_start, tmp_path, page):
    """Run the page's blocks in a sandbox of its own; returns (sandbox, stdout, stdout + stderr)."""
    base, env = quick_start
    sandbox = tmp_path / "checkout"
    sandbox.mkdir()
    helpers.link(sandbox, ("fairseq_plugins", "scripts", "data-prep", "tests", ".venv", "data"), base)
    (sandbox / "runs" / "quickstart").mkdir(parents=True)
    helpers.link(sandbox / "runs" / "quickstart", QUICK_START_ARMS, base / "runs" / "quickstart")
    script = "\n".join(page_blocks(page))
    for old, new in SUBSTITUTIONS.get(page, []):
        assert old in script, f"{page} no longer holds {old!r}: update SUBSTITUTIONS"
        script = script.replace(old, new)
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=sandbox, env={**env, "PYTHONPATH": str(sandbox)},
                          capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    return sandbox, proc.stdout, out


def _data_path(sandbox, stdout, out):
    assert "up to date" in out
    assert (sandbox / "checkpoints" / "inf" / "checkpoint_last.pt").is_file()
    assert re.search(r"Perplexity: [0-9.]+", out), out[-3000:]
    assert re.search(r"^D-0\t", stdout, re.M), stdout[-2000:]  # plain-text hypothesis


def _generation(sandbox, stdout, out):
    assert re.search(r"^H-7\t", stdout, re.M), stdout[-2000:]  # the eighth prompt


def _perplexity(sandbox, stdout, out):
    assert re.search(r"Loss \(base 2\): [0-9.]+, Perplexity: [0-9.]+", out), out[-3000:]


def _position(folder, arms):
    result = json.loads((folder / "position.json").read_text())
    assert [m["label"] for m in result["models"]] == list(arms)
    assert (folder / "position.md").is_file() and (folder / "position.png").is_file()


def _analysis(sandbox, stdout, out):
    _position(sandbox / "runs" / "quickstart" / "position-memory",
              [*QUICK_START_ARMS[:2], f"{QUICK_START_ARMS[0]} wiped"])  # the page's command has --memory-wiped
    memory_map = json.loads((sandbox / "runs" / "quickstart" / "memory_map" / "memory_map.json").read_text())
    assert len(memory_map["tokens"]) == 1024
    assert (sandbox / "runs" / "quickstart" / "memory_map" / "query_token.png").is_file()


def _distributed(sandbox, stdout, out):
    assert "training on 2 devices" in out and (sandbox / "checkpoints" / "checkpoint_last.pt").is_file()


CHECKS = {
    DATA_PATH: _data_path,
    "docs/generation.md": _generation,
    "docs/troubleshooting.md": _perplexity,
    "docs/fastformer.md": _perplexity,
    "docs/analysis.md": _analysis,
    "docs/training-at-scale.md": _distributed,
}


def test_every_page_with_quick_start_commands_is_checked():
    assert PAGES == sorted(CHECKS), PAGES
    assert len(page_blocks(DATA_PATH)) >= 6


@pytest.mark.full
@pytest.mark.parametrize("page", PAGES)
def test_page_runs_after_the_quick_start(quick_start, tmp_path, page):
    CHECKS[page](*run_page(quick_start, tmp_path, page))
