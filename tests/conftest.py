"""Test tiers and shared fixtures.

Two tiers (docs/testing.md): ``pytest -q -n 2 tests`` runs the fast tier — unit and value
tests; ``--full`` adds the tests marked ``full`` (fairseq CLIs and scripts in subprocesses,
end to end), which CI and the README's test command run.
"""

import subprocess

import pytest
import torch
from filelock import FileLock

import helpers


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="also run the full tier: subprocess CLIs and end-to-end tests (marked 'full')")


def pytest_configure(config):
    config.addinivalue_line("markers", "full: a subprocess or end-to-end test (run with --full)")
    # one intra-op thread in every test process: the tests' tensors are tiny, and two workers
    # with torch's default of one thread per core oversubscribe a 2-core machine (OpenMP's
    # waiting threads then slow every worker, worst when another job holds a core); the
    # subprocesses get the same through helpers.env
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full"):
        return
    keep = [item for item in items if item.get_closest_marker("full") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("full")])
        items[:] = keep


@pytest.fixture(scope="session")
def books_bin(tmp_path_factory):
    """The books fixture prepared once for the whole run (``helpers.prepare_books``, 300
    pieces), shared by the pytest-xdist workers through a lock on their common temporary
    folder. Read-only: a test that changes data copies it first."""
    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / "books.lock")):
        out = shared / "books"
        if not (out / "bin" / "dict.txt").exists():
            helpers.prepare_books(out)
    return out / "bin"


@pytest.fixture(scope="session")
def quick_start(tmp_path_factory):
    """A checkout after a miniature quick start (the README's prepare command on the books
    fixture, then ``scripts/train.sh`` for each of ``helpers.QUICK_START_ARMS`` at tiny sizes),
    built once for the run and shared by the workers like ``books_bin``: (its folder, the
    environment of the pages). Read-only."""
    shared = tmp_path_factory.getbasetemp().parent
    base = shared / "quickstart"
    env = helpers.env(PYTHONPATH=str(base), **helpers.QUICK_START_TINY)
    with FileLock(str(shared / "quickstart.lock")):
        done = base / "runs" / "quickstart" / ".built"
        if not done.exists():
            base.mkdir(exist_ok=True)
            helpers.link(base, ("fairseq_plugins", "scripts", "data-prep", "tests", ".venv"), helpers.ROOT)
            commands = [f"{helpers.QUICK_START_PREPARE} {helpers.QUICK_START_PREPARE_OPTIONS}"] + [
                f"bash scripts/train.sh {arm} data/books/bin runs/quickstart/{arm}" for arm in helpers.QUICK_START_ARMS]
            subprocess.run(["bash", "-e", "-c", " && ".join(commands)], cwd=base, env=env, check=True,
                           capture_output=True)
            done.touch()
    return base, env
