"""fairseq-longmem's dispatcher (fairseq_plugins/cli/__init__.py): every subcommand listed in
--help resolves to a function, and bad input to any subcommand is one line naming the problem
and pointing to its --help, exit status 2, never the usage block."""

import pytest

from fairseq_plugins import cli


def _error_lines(capsys, argv):
    try:
        status = cli.main(argv)
    except SystemExit as stop:  # argparse's own exit
        status = stop.code
    err = capsys.readouterr().err
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
])
def test_argument_errors_are_one_line_with_the_help_to_read(capsys, argv, needle):
    lines = _error_lines(capsys, argv)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"fairseq-longmem {argv[0]}") and ": error: " in lines[0], lines[0]
    assert needle in lines[0], lines[0]
    assert lines[0].endswith("--help)") or "choose from" in lines[0], lines[0]


def test_unknown_command_is_one_line_listing_the_commands(capsys):
    assert cli.main(["sumarize"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "unknown command 'sumarize'" in line and "summarize" in line
