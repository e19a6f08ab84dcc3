"""Shared test helpers: paths, the environment of subprocesses, the runners of the fairseq
CLIs, ``fairseq-longmem`` and the project's scripts, the check of a one-line refusal, and small
builders the model tests share (imported by the test modules as ``helpers``; docs/testing.md)."""

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
USER_DIR = os.path.join(ROOT, "fairseq_plugins")
BOOKS_TXT = os.path.join(ROOT, "tests", "fixtures", "books_txt")
# the quick start in miniature (conftest's ``quick_start``): the README's prepare command with the
# fixture's options, and the arms it trains at tiny sizes
QUICK_START_PREPARE = "bash data-prep/prepare-lm.sh --out data/books"
QUICK_START_PREPARE_OPTIONS = f"--corpus txt --input {BOOKS_TXT} --vocab-size 300 --workers 1"
QUICK_START_ARMS = ("infinite_former", "memory_off", "transformer_lm")
QUICK_START_TINY = {"LAYERS": "1", "WIDTH": "32", "HEADS": "2", "FFN": "64", "STREAMS": "4", "MAX_UPDATE": "5",
                    "NUM_BASIS": "16"}


def env(**extra):
    """The test's environment with the interpreter's bin first on PATH, the checkout first on
    PYTHONPATH (so that subprocesses import this checkout's ``fairseq_plugins``) and one thread;
    ``extra`` overrides, and a value ``None`` removes that variable."""
    path = os.environ.get("PYTHONPATH", "")
    full = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"],
            "PYTHONPATH": ROOT + (os.pathsep + path if path else ""),
            "THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}
    return {name: value for name, value in full.items() if value is not None}


def run(args, check=True, cwd=ROOT, extra_env=None, merged=False, **kw):
    """Run ``args`` (strings or paths) in the checkout under ``env(**extra_env)``; with ``check`` a
    non-zero exit fails the test showing the end of the output; with ``merged`` stderr goes into
    stdout (as a terminal or ``2>&1 | tee`` shows it). ``kw`` goes to ``subprocess.run`` (e.g.
    ``input=`` text for standard input). Returns the ``CompletedProcess`` (text, captured)."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if merged else {"capture_output": True}
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env(**(extra_env or {})), text=True, **streams,
                          **kw)
    if check:
        assert proc.returncode == 0, (proc.stdout + (proc.stderr or ""))[-4000:]
    return proc


def fairseq(tool, *args, check=True, user_dir=True, **kw):
    """``fairseq-TOOL ARGS --user-dir fairseq_plugins --cpu`` in a subprocess (without
    ``--user-dir`` when ``user_dir`` is false: fairseq's tool alone); ``kw`` as for ``run``."""
    plugin = ["--user-dir", USER_DIR] if user_dir else []
    return run([os.path.join(BIN, tool), *args, *plugin, "--cpu"], check=check, **kw)


def longmem(*args, check=True, **kw):
    """``fairseq-longmem ARGS`` (``python -m fairseq_plugins.cli``) in a subprocess."""
    return run([sys.executable, "-m", "fairseq_plugins.cli", *args], check=check, **kw)


def longmem_in_process(*args):
    """``fairseq-longmem ARGS`` in this process (no new interpreter: importing fairseq takes
    seconds), argparse's own exits included. Returns ``(exit status, stdout, stderr)``."""
    from fairseq_plugins.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([str(a) for a in args])
        except SystemExit as stop:
            status = stop.code
    return status, out.getvalue(), err.getvalue()


def longmem_here(*args, check=True):
    """:func:`longmem_in_process` as a ``subprocess.CompletedProcess`` (what :func:`longmem`
    returns), for the commands that need no process of their own; with ``check`` a non-zero
    status fails the test."""
    status, out, err = longmem_in_process(*args)
    if check:
        assert status == 0, (out + err)[-4000:]
    return subprocess.CompletedProcess([str(a) for a in args], status, out, err)


def one_line_error(proc, *needles, prefix="fairseq_plugins: error:", status=None, alone=False):
    """Assert a refusal: non-zero exit (exactly ``status`` when given), no traceback, exactly one
    stderr line starting with ``prefix`` that holds every needle; with ``alone`` that line is all
    of stderr (surrounding white space aside) and stdout holds no traceback either. Returns the line."""
    if status is None:
        assert proc.returncode != 0, (proc.stdout + proc.stderr)[-3000:]
    else:
        assert proc.returncode == status, f"rc={proc.returncode}\n" + (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in (proc.stdout + proc.stderr if alone else proc.stderr), proc.stderr[-3000:]
    lines = (proc.stderr.strip() if alone else proc.stderr).splitlines()
    assert not alone or len(lines) == 1, proc.stderr[-3000:]
    errors = [line for line in lines if line.startswith(prefix)]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def data_prep(script, *args, **extra_env):
    """``bash SCRIPT ARGS`` (a data-prep script: a name in data-prep/, or a path from the repository's
    root such as an experiment's own ``fairseq_plugins/lab/EXP/make-EXP.sh``) with this interpreter as
    ``PYTHON`` and ``extra_env`` (``run``, unchecked: the data-prep tests read refusals too)."""
    path = os.path.join(ROOT, script) if "/" in script else os.path.join(ROOT, "data-prep", script)
    return run(["bash", path, *args], check=False,
               extra_env={"PYTHON": sys.executable, **extra_env})


# the data-prep tests need fairseq-preprocess (installed with fairseq in this interpreter's bin)
needs_fairseq_preprocess = pytest.mark.skipif(
    shutil.which("fairseq-preprocess", path=BIN + os.pathsep + os.environ.get("PATH", "")) is None,
    reason="fairseq-preprocess is not installed")


def snapshot(folder, sha256=False):
    """``{path relative to folder: (mtime_ns, size)}`` for every file under ``folder``, with the
    sha256 of its bytes as a third item when ``sha256``: what a rerun must leave untouched."""
    out = {}
    for p in Path(folder).rglob("*"):
        if p.is_file():
            st = p.stat()
            digest = (hashlib.sha256(p.read_bytes()).hexdigest(),) if sha256 else ()
            out[str(p.relative_to(folder))] = (st.st_mtime_ns, st.st_size, *digest)
    return out


def link(folder, names, source):
    """Symlink each of ``names`` in ``source`` into ``folder``."""
    for name in names:
        os.symlink(os.path.join(source, name), os.path.join(folder, name))


def prepare_books(out, vocab=300):
    """The books fixture through ``data-prep/prepare-lm.sh`` (sentencepiece ``vocab`` pieces);
    returns the binarized folder ``out/bin``."""
    run(["bash", "data-prep/prepare-lm.sh", "--corpus", "txt", "--input", BOOKS_TXT,
         "--out", out, "--vocab-size", str(vocab), "--workers", "1"])
    return out / "bin"


def write_checkpoint(path, data, *options, seed=0):
    """A checkpoint of a randomly initialised model, as fairseq-train would save it before its
    first update: ``options`` are fairseq-train's (``--task``, ``--arch``, sizes) for the data
    folder ``data``. Returns ``path``."""
    import torch
    from fairseq import options as fairseq_options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    import fairseq_plugins  # noqa: F401  (registers the plugin's models and tasks)

    parsed = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(),
                                                 input_args=[str(data), *map(str, options)])
    cfg = convert_namespace_to_omegaconf(parsed)
    torch.manual_seed(seed)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
                "model": model.state_dict(), "criterion": None, "last_optimizer_state": None, "task_state": {},
                "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                                       "lr_scheduler_state": {"best": None}, "num_updates": 0}],
                "extra_state": {"train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0,
                                                   "shuffle": False}}}, path)
    return path


def dictionary(n=20, prefix="w"):
    """A fairseq ``Dictionary`` of the 4 specials and ``n`` symbols ``PREFIX0`` … ``PREFIX{n-1}``."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"{prefix}{i}")
    return d


def record_reorders(monkeypatch, attention):
    """Patch ``attention.reorder_incremental_state`` (a class) to record every ``new_order``
    tensor it is given, then do its work; returns the list the orders are appended to."""
    orders = []
    original = attention.reorder_incremental_state

    def record(self, incremental_state, new_order):
        orders.append(new_order.clone())
        return original(self, incremental_state, new_order)

    monkeypatch.setattr(attention, "reorder_incremental_state", record)
    return orders


def greedy_full_forward(model, context, max_len):
    """fairseq's greedy search (``SequenceGenerator``, beam 1, min_len 1) after ``context``
    ``(P,)``, written with the full forward over the whole prefix at every step (no incremental
    state): ``pad`` never, ``</s>`` not first, ``</s>`` forced after ``max_len`` tokens. Returns
    ``(generated ids ending with </s>, the log-probability of each)``."""
    import torch

    d = model.decoder.dictionary
    tokens, out, scores = [int(t) for t in context], [], []
    with torch.no_grad():
        while True:
            lprobs = torch.log_softmax(model(torch.tensor([tokens]))[0][0, -1].float(), -1)
            masked = lprobs.clone()
            masked[d.pad()] = float("-inf")
            if not out:
                masked[d.eos()] = float("-inf")
            nxt = d.eos() if len(out) == max_len else int(masked.argmax())
            out.append(nxt)
            scores.append(float(lprobs[nxt]))
            if nxt == d.eos():
                return out, scores
            tokens.append(nxt)


def resume_through_flat_state(dec, fresh, tokens, split, key="k"):
    """Run ``tokens[:, :split]`` through decoder ``dec`` under memory key ``key``, carry its memory
    to ``fresh`` through the memory bank's flat form (what a checkpoint saves), run the rest there.
    Returns ``(flat state, the two calls' logits joined, dec's logits of one call over all tokens)``."""
    import torch

    with torch.no_grad():
        whole, _ = dec(tokens)
        first, _ = dec(tokens[:, :split], memory_key=key)
        flat = dec.memory_bank.state_dict(key)
        fresh.memory_bank.load_state_dict(key, flat, torch.device("cpu"))
        rest, _ = fresh(tokens[:, split:], memory_key=key)
    return flat, torch.cat([first, rest], 1), whole
