"""The README's data path and docs/generation.md's examples run as written after the quick start.

The quick start's outputs are made small here: ``data/books`` is prepared from the
books fixture (``tests/fixtures/books_txt``, vocabulary 300) and
``runs/quickstart/infinite_former`` is a tiny ``scripts/train.sh`` run, in a sandbox
folder that links the repository's code and environment. Then every ``bash`` block of
the README's "The data path" section runs, in order, in one shell, with two
substitutions only: the prepare command gets the fixture's options (so that it finds
its data up to date, as after the real quick start) and the training command stops
after 2 updates instead of 600. Every ``bash`` block of docs/generation.md runs the same way,
unchanged, after that miniature quick start.
"""

import pytest
import os
import re
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
FIXTURE_OPTIONS = "--corpus txt --input {root}/tests/fixtures/books_txt --vocab-size 300 --workers 1"


def readme_data_path_blocks():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("## The data path", 1)[1].split("\n## ", 1)[0]
    return [textwrap.dedent(block) for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def quick_start(tmp_path):
    """A sandbox checkout after a miniature quick start: (its folder, its environment)."""
    sandbox = tmp_path / "checkout"
    sandbox.mkdir()
    for name in ("fairseq_plugins", "scripts", "data-prep", "tests", ".venv"):
        os.symlink(os.path.join(ROOT, name), sandbox / name)
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(sandbox),
           "LAYERS": "1", "WIDTH": "32", "HEADS": "2", "FFN": "64", "STREAMS": "4", "MAX_UPDATE": "5",
           "NUM_BASIS": "16"}
    options = FIXTURE_OPTIONS.format(root=ROOT).split()
    quick = (f"bash data-prep/prepare-lm.sh --out data/books {' '.join(options)} && "
             "bash scripts/train.sh infinite_former data/books/bin runs/quickstart/infinite_former")
    subprocess.run(["bash", "-c", quick], cwd=sandbox, env=env, check=True, capture_output=True)
    return sandbox, env


@pytest.mark.full
def test_readme_data_path_runs_after_the_quick_start(tmp_path):
    sandbox, env = quick_start(tmp_path)
    options = FIXTURE_OPTIONS.format(root=ROOT).split()
    blocks = readme_data_path_blocks()
    assert len(blocks) >= 6, blocks
    script = "\n".join(blocks)
    prepare = "bash data-prep/prepare-lm.sh --out data/books"
    assert prepare in script and "--max-update 600" in script
    script = script.replace(prepare, f"{prepare} {' '.join(options)}", 1).replace("--max-update 600", "--max-update 2")
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=sandbox, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "up to date" in out
    assert (sandbox / "checkpoints" / "inf" / "checkpoint_last.pt").is_file()
    assert re.search(r"Perplexity: [0-9.]+", out), out[-3000:]
    assert re.search(r"^D-0\t", proc.stdout, re.M), proc.stdout[-2000:]  # plain-text hypothesis
    assert "Traceback" not in out


@pytest.mark.full
def test_generation_page_examples_run_after_the_quick_start(tmp_path):
    sandbox, env = quick_start(tmp_path)
    text = open(os.path.join(ROOT, "docs", "generation.md"), encoding="utf-8").read()
    blocks = [textwrap.dedent(block) for block in re.findall(r"```bash\n(.*?)```", text, re.S)]
    assert len(blocks) >= 2, blocks
    proc = subprocess.run(["bash", "-e", "-c", "\n".join(blocks)], cwd=sandbox, env=env, capture_output=True,
                          text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out
    assert re.search(r"^H-7\t", proc.stdout, re.M), proc.stdout[-2000:]  # the eighth prompt
