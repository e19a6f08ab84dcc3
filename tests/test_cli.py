"""fairseq-longmem's dispatcher (fairseq_plugins/cli/__init__.py): every subcommand listed in
--help resolves to a function, and bad input to any subcommand is one line naming the problem
and pointing to its --help, exit status 2, never the usage block."""

import json
import subprocess
import sys

import pytest

from fairseq_plugins import cli
from helpers import ROOT, env, longmem_in_process


def _error_lines(argv):
    status, _, err = longmem_in_process(*argv)
    assert status == 2, err
    return err.splitlines()


def test_every_command_resolves():
    for name in cli.COMMANDS:
        assert callable(cli.resolve(name)), name


@pytest.mark.parametrize("argv, needle", [
    (["analyze", "position", "--bogus"], "the following arguments are required: --checkpoint"),
    (["analyze", "nowhere"], "unknown analysis 'nowhere'"),
    (["sorting", "table"], "the following arguments are required: runs"),
    (["summarize", "score"], "the following arguments are required: --hyp"),
    (["prep", "lm", "nope"], "invalid choice: 'nope'"),
    (["bench", "train", "--bogus"], "unrecognized arguments: --bogus"),
    (["continue", "--max-len", "x"], "--max-len"),
    (["options", "--bogus"], "unrecognized arguments: --bogus"),
    (["arms", "get", "lm", "infinite_former", "nosuchfield"], "choose from label, task, arch"),
])
def test_argument_errors_are_one_line_with_the_help_to_read(argv, needle):
    lines = _error_lines(argv)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"fairseq-longmem {argv[0]}") and ": error: " in lines[0], lines[0]
    assert needle in lines[0], lines[0]
    assert lines[0].endswith("--help)") or "choose from" in lines[0], lines[0]


def test_unknown_command_is_one_line_listing_the_commands(capsys):
    assert cli.main(["sumarize"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "unknown command 'sumarize'" in line and "summarize" in line


def test_a_reader_that_closes_stdout_gets_no_error_message():
    """``fairseq-longmem arms budget lm | head -1``: the reader is gone before the command
    writes; the command ends quietly with a shell's SIGPIPE status, not an error line."""
    proc = subprocess.Popen([sys.executable, "-m", "fairseq_plugins.cli", "arms", "budget", "lm"], cwd=ROOT,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the interpreter has started: its first write fails
    err = proc.stderr.read()
    assert proc.wait() == 141 and err == "", err


@pytest.mark.parametrize("argv", [
    ["analyze", "position", "--checkpoint", "missing.pt", "--data", "missing"],
    ["analyze", "memory-map", "--checkpoint", "missing.pt", "--data", "missing", "--text", "missing.txt"],
    ["summarize", "score", "--hyp", "missing.txt", "--ref", "missing.txt", "--model", "m", "--split", "test"],
])
def test_an_out_folder_that_is_a_file_is_refused_before_the_work(argv, tmp_path):
    """``--out`` naming a file (or a path under one) is one line before anything is read,
    not an OSError after the work."""
    (tmp_path / "taken").write_text("a file\n")
    for out in (tmp_path / "taken", tmp_path / "taken" / "below"):
        (line,) = _error_lines([*argv, "--out", out])
        assert f"{tmp_path / 'taken'} is a file, not a folder" in line, line


def test_an_analysis_names_itself_and_its_own_option_for_an_unreadable_checkpoint(tmp_path):
    (tmp_path / "bad.pt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "bin").mkdir()
    import torch
    from fairseq.data import indexed_dataset

    (tmp_path / "bin" / "dict.txt").write_text("a 1\n")
    split = indexed_dataset.MMapIndexedDatasetBuilder(str(tmp_path / "bin" / "test.bin"))
    split.add_item(torch.tensor([4, 4, 2], dtype=torch.int32))
    split.finalize(str(tmp_path / "bin" / "test.idx"))
    (line,) = _error_lines(["analyze", "position", "--checkpoint", tmp_path / "bad.pt", "--data", tmp_path / "bin",
                            "--out", tmp_path / "out"])
    assert line.startswith("fairseq-longmem analyze position: error: cannot read checkpoint"), line
    assert line.endswith("pass a complete checkpoint with --checkpoint") and "fairseq-train" not in line, line


# the fairseq tools' --help is fairseq's own parser: it imports fairseq
FAIRSEQ_TOOLS = {"train", "eval-lm", "generate", "interactive"}
HELP_IMPORTS = r"""
import contextlib, io, json, re, sys
sys.argv[0] = "fairseq-longmem"  # the package imported as that command imports it
from fairseq_plugins import cli
heavy = ("torch", "fairseq")
seen, marked, verbs = {}, [], re.compile(r"^ {2,4}([a-z][a-z0-9-]+)(?: {2,}|$)")
def help_of(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.main(argv + ["--help"])
        except SystemExit:
            pass
    seen[" ".join(argv)] = [m for m in heavy if m in sys.modules]
    if "``" in out.getvalue() or re.search(r":[a-z]+:`", out.getvalue()):
        marked.append(" ".join(argv))
    return out.getvalue()
for name in [c for c in cli.COMMANDS if c not in %r]:
    for line in help_of([name]).splitlines():
        match = verbs.match(line)
        if match and not line.strip().startswith("fairseq-longmem"):
            help_of([name, match.group(1)])
print(json.dumps({"seen": seen, "marked": marked}))
"""


def test_help_of_every_command_imports_neither_torch_nor_fairseq():
    """... and shows its text without reST markup (``literals``, :mod:`roles`)."""
    proc = subprocess.run([sys.executable, "-c", HELP_IMPORTS % (FAIRSEQ_TOOLS,)], cwd=ROOT, env=env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    seen = found["seen"]
    assert found["marked"] == []
    assert "analyze position" in seen and "gpt2 convert" in seen and "summarize score" in seen, sorted(seen)
    assert {k: v for k, v in seen.items() if v} == {}
