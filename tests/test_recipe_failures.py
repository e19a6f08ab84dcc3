"""scripts/failed.sh, the recipes' report of a failed step: one header line, then the log's last
20 lines as they are, the error line last; the exit status the recipe asks for."""
import os
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


@pytest.mark.full
@pytest.mark.parametrize("recipe", ["scripts/quickstart.sh", "fairseq_plugins/lab/sorting/sorting.sh",
                                    "fairseq_plugins/lab/recall/recall.sh"])
def test_a_seed_list_starting_with_a_minus_is_the_recipes_one_line(tmp_path, recipe):
    """--seeds "-1,2" is answered by the recipe's own line naming the seed, before anything is
    created (not by the internal command's argparse line, ``fairseq-longmem arms seeds: error: the
    following arguments are required: LIST``)."""
    from helpers import env

    proc = subprocess.run(["bash", recipe, "--seeds", "-1,2", "--out", str(tmp_path / "out")], cwd=ROOT,
                          env=env(), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (f"{os.path.basename(recipe)}: error: --seeds takes integers from 0 to 4294967295 "
                                                    "separated by commas (e.g. 1,2,3), got '-1'"), proc.stderr[-2000:]
    assert "arms seeds" not in proc.stderr and not (tmp_path / "out").exists()
