"""The conventions every ``fairseq-longmem`` command shares (fairseq_plugins/lab/common/cli.py):
counts checked where their options are declared, in argparse's one line, before any work; Ctrl-C
as one line saying what was kept, never a traceback."""

import argparse
import os
import sys

import pytest

from fairseq_plugins.lab.common import cli, files
from helpers import longmem_here, one_line_error


def test_number_types_refuse_what_a_count_cannot_be():
    assert cli.positive_int("3") == 3 and cli.non_negative_int("0") == 0 and cli.positive_float("0.5") == 0.5
    for kind, text in ((cli.positive_int, "0"), (cli.positive_int, "-1"), (cli.positive_int, "1.5"),
                       (cli.positive_int, "x"), (cli.non_negative_int, "-1"), (cli.positive_float, "0"),
                       (cli.positive_float, "-2"), (cli.positive_float, "nan"), (cli.positive_float, "inf")):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"^must be .*, got '{text}'$"):
            kind(text)


# (command line, the option named); every file path is one that does not exist: the count is refused first
COUNTS = [
    (("recall", "score", "--checkpoint", "ck.pt", "--data", "bin", "--batch-size", "-1", "--json", "r.json"),
     "--batch-size"),
    (("recall", "score", "--checkpoint", "ck.pt", "--data", "bin", "--batch-size", "0"), "--batch-size"),
    (("recall", "score", "--checkpoint", "ck.pt", "--data", "bin", "--max-examples", "0"), "--max-examples"),
    (("recall", "score", "--checkpoint", "ck.pt", "--data", "bin", "--max-examples", "-1"), "--max-examples"),
    (("sorting", "score", "--checkpoint", "ck.pt", "--data", "bin", "--batch-size", "-2"), "--batch-size"),
    (("sorting", "score", "--checkpoint", "ck.pt", "--data", "bin", "--batch-size", "0"), "--batch-size"),
    (("sorting", "score", "--checkpoint", "ck.pt", "--data", "bin", "--max-examples", "0"), "--max-examples"),
    (("sorting", "score", "--checkpoint", "ck.pt", "--data", "bin", "--max-examples", "-1"), "--max-examples"),
    (("sorting", "signal", "--checkpoint", "ck.pt", "--data", "bin", "--updates", "0"), "--updates"),
    (("continue", "--checkpoint", "ck.pt", "--data", "bin", "--prompt-file", "p.txt", "--temperature", "0"),
     "--temperature"),
    (("continue", "--checkpoint", "ck.pt", "--data", "bin", "--prompt-file", "p.txt", "--seed", "-1"), "--seed"),
    (("analyze", "position", "--checkpoint", "ck.pt", "--data", "bin", "--out", "o", "--streams", "0"), "--streams"),
    (("analyze", "position", "--checkpoint", "ck.pt", "--data", "bin", "--out", "o", "--replicates", "-5"),
     "--replicates"),
    (("analyze", "memory-map", "--checkpoint", "ck.pt", "--data", "bin", "--text", "t", "--out", "o", "--top-k",
      "0"), "--top-k"),
    (("summarize", "lead", "--source", "s", "--out", "o", "--k", "0"), "--k"),
    (("summarize", "check-lengths", "bin", "--max-source", "-1", "--max-target", "8"), "--max-source"),
    (("summarize", "facts", "--manifest", "m", "--hyp", "h", "--replicates", "0"), "--replicates"),
    (("gpt2", "tiny", "--out", "o", "--heads", "0"), "--heads"),
    (("gpt2", "updates", "--data", "d", "--tokens-per-sample", "8", "--batch-size", "0", "--max-epoch", "1"),
     "--batch-size"),
    (("precision-check", "--updates", "0"), "--updates"),
]


@pytest.mark.parametrize("argv, option", COUNTS, ids=[" ".join(a[:2]) + " " + o for a, o in COUNTS])
def test_every_count_is_checked_where_it_is_declared(tmp_path, monkeypatch, argv, option):
    """A count no run can honour is argparse's one line naming the option, exit status 2, before
    anything is read or written (negative batch sizes used to score nothing and write accuracy 0,
    --max-examples 0 to score everything and -1 one example)."""
    monkeypatch.chdir(tmp_path)
    proc = longmem_here(*argv, check=False)
    line = one_line_error(proc, f"argument {option}: must be", prefix=f"fairseq-longmem {argv[0]}", status=2,
                          alone=True)
    assert "got '" in line and line.endswith("--help)"), line
    assert os.listdir(tmp_path) == []


def test_ctrl_c_is_one_line_saying_what_was_kept(tmp_path, capsys):
    """run_command: Ctrl-C is one line and exit status 130: nothing written; or the outputs renamed
    into place before it (each whole); or the files being written in place (incomplete)."""
    def interrupted(written=(), in_place=()):
        def command(argv, prog):
            if written:
                files.write_atomically({path: files.text_writer("done\n") for path in written})
            for path in in_place:
                files.written_in_place(path)
            raise KeyboardInterrupt
        return command

    assert cli.run_command(interrupted(), [], "fairseq-longmem x") == 130
    assert capsys.readouterr().err == "fairseq-longmem x: interrupted; nothing written\n"
    done = str(tmp_path / "a.json")
    assert cli.run_command(interrupted([done]), [], "fairseq-longmem x") == 130
    assert capsys.readouterr().err == f"fairseq-longmem x: interrupted; written whole before it: {done}\n"
    half = str(tmp_path / "raw" / "train.txt")
    assert cli.run_command(interrupted(in_place=[half]), [], "fairseq-longmem prep lm") == 130
    err = capsys.readouterr().err
    assert err == (f"fairseq-longmem prep lm: interrupted; left incomplete: {half} (run the command again to "
                   "rebuild them)\n")
    assert sorted(os.listdir(tmp_path)) == ["a.json"]  # no temporary file left


def _sigint_default():
    """In the child: SIGINT as a terminal delivers it, whatever the test runner inherited (a shell
    starts background jobs with SIGINT ignored, and Python then never raises KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.full
def test_ctrl_c_in_a_command_is_one_line_not_a_traceback(tmp_path):
    """SIGINT to a running ``fairseq-longmem`` command (here ``bench memory``, which measures in
    workers): one line, status 130, no traceback, no file."""
    import signal
    import subprocess
    import time

    from helpers import ROOT, env

    proc = subprocess.Popen([sys.executable, "-m", "fairseq_plugins.cli", "bench", "memory", "--quick", "--repeats",
                             "50", "--out", str(tmp_path / "out")], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_sigint_default)
    children = f"/proc/{proc.pid}/task/{proc.pid}/children"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not open(children).read().strip():
        time.sleep(0.2)  # until the first worker measures (the command's imports are done)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    out, err = proc.communicate()
    assert proc.returncode == 130, err[-3000:]
    assert err.strip() == "fairseq-longmem bench: interrupted; nothing written", err[-3000:]
    assert "Traceback" not in out + err and not (tmp_path / "out").exists()


@pytest.mark.full
def test_ctrl_c_in_fairseq_longmem_train_names_the_checkpoints_kept(books_bin, tmp_path):
    """fairseq-train through ``fairseq-longmem train`` (fairseq_tools.run_tool), interrupted once it has
    saved: one line naming the checkpoints kept and how to resume, exit status 130, not fairseq's
    80-line KeyboardInterrupt traceback."""
    import signal
    import subprocess
    import time

    from helpers import ROOT, env

    save = tmp_path / "ck"
    proc = subprocess.Popen([sys.executable, "-m", "fairseq_plugins.cli", "train", str(books_bin), "--task",
                             "streaming_lm", "--arch", "infinite_former_lm", "--decoder-layers", "1",
                             "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads",
                             "2", "--tokens-per-sample", "16", "--num-basis-functions", "8", "--num-samples", "8",
                             "--batch-size", "2", "--optimizer", "adam", "--lr", "0.001", "--max-update", "100000",
                             "--save-interval-updates", "2", "--no-epoch-checkpoints", "--save-dir", str(save),
                             "--cpu"], cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_sigint_default)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (save / "checkpoint_last.pt").exists():
        time.sleep(0.5)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate()
    assert proc.returncode == 130, (out + err)[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-longmem train: interrupted; kept in {save}: ") and "checkpoint_last.pt" in last
    assert last.endswith("(each saved whole); the same command again resumes from checkpoint_last.pt"), last
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
