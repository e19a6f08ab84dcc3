"""Shared test helpers: paths, the environment of subprocesses, and the runners of the
fairseq CLIs and the project's scripts (imported by the test modules as ``helpers``)."""

import os
import subprocess
import sys

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
    PYTHONPATH (so that subprocesses import this checkout's ``fairseq_plugins``) and one thread."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"],
            "PYTHONPATH": ROOT + (os.pathsep + path if path else ""),
            "THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}


def run(args, check=True, cwd=ROOT, extra_env=None, **kw):
    """Run ``args`` (strings or paths) in the checkout; with ``check`` a non-zero exit fails the
    test showing the end of the output. Returns the ``CompletedProcess`` (text, captured)."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env(**(extra_env or {})),
                          capture_output=True, text=True, **kw)
    if check:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


def fairseq(tool, *args, check=True, **kw):
    """``fairseq-TOOL ARGS --user-dir fairseq_plugins --cpu`` in a subprocess."""
    return run([os.path.join(BIN, tool), *args, "--user-dir", USER_DIR, "--cpu"], check=check, **kw)


def longmem(*args, check=True, **kw):
    """``fairseq-longmem ARGS`` (``python -m fairseq_plugins.cli``) in a subprocess."""
    return run([sys.executable, "-m", "fairseq_plugins.cli", *args], check=check, **kw)


def one_line_error(proc, *needles, prefix="fairseq_plugins: error:"):
    """Assert a refusal: non-zero exit, no traceback, exactly one stderr line starting with
    ``prefix`` that holds every needle; returns that line."""
    assert proc.returncode != 0, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(prefix)]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


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
