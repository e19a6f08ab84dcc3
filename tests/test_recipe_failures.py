"""scripts/failed.sh, the recipes' report of a failed step: one header line, then the log's last
20 lines as they are, the error line last; the exit status the recipe asks for."""
import subprocess

import pytest

from helpers import ROOT

USAGE = [f"usage: fairseq-train [-h] [--option{i} X]" for i in range(25)]


@pytest.mark.parametrize("last, status", [
    ("fairseq-train: error: unrecognized arguments: --no-such-option 3", 2),
    ("RuntimeError: something deep", 1),
])
def test_a_failed_step_shows_its_error_line_last(tmp_path, last, status):
    log = tmp_path / "train.log"
    log.write_text("\n".join([*USAGE, last]) + "\n")
    args = "" if status == 1 else " 2"
    proc = subprocess.run(["bash", "-c", f". scripts/failed.sh; failed prog.sh 'training arm' {log}{args}; echo after"],
                          cwd=ROOT, capture_output=True, text=True)
    lines = proc.stderr.splitlines()
    assert proc.returncode == status and proc.stdout == ""  # it exits: nothing after it runs
    assert lines[0] == f"prog.sh: training arm failed; the end of its log {log}:"
    assert lines[1:] == [*USAGE, last][-20:]
