"""Importing the package from Python changes nothing global; inside a fairseq
command-line process it installs the one-line error printer (tested through the
CLIs in test_cli_errors.py and test_precision_and_faults.py)."""

import pytest
import json
import os
import subprocess
import sys

from helpers import ROOT

SNAPSHOT = r"""
import json, logging, sys, warnings
import torch
import fairseq, fairseq.models, fairseq.tasks, fairseq.criterions, fairseq.checkpoint_utils  # what the plugin imports
def snapshot():
    root = logging.getLogger()
    return {"excepthook": repr(sys.excepthook), "displayhook": repr(sys.displayhook),
            "root_level": root.level, "root_handlers": len(root.handlers),
            "warning_filters": len(warnings.filters), "default_dtype": str(torch.get_default_dtype()),
            "threads": torch.get_num_threads(), "grad": torch.is_grad_enabled(),
            "argv": list(sys.argv), "path": list(sys.path)}
before = snapshot()
import fairseq_plugins
import fairseq_plugins.__main__
print(json.dumps([before, snapshot()]))
"""


@pytest.mark.full
def test_importing_the_package_changes_nothing_global():
    proc = subprocess.run([sys.executable, "-c", SNAPSHOT], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert after == before


def test_the_error_printer_is_installed_only_in_a_fairseq_cli(monkeypatch):
    from fairseq_plugins import compat
    from fairseq_plugins.compat import hook

    monkeypatch.setattr(sys, "argv", ["/usr/bin/python", "-m", "pytest"])
    assert not compat.running_fairseq_cli()
    monkeypatch.setattr(sys, "argv", [os.path.join("venv", "bin", "fairseq-eval-lm"), "data"])
    assert compat.running_fairseq_cli()
    assert sys.excepthook is not hook.excepthook  # the test process itself was left alone
