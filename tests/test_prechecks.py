"""The command-line checks made before a fairseq tool starts (fairseq_plugins/compat/prechecks.py):
each refusal is a ConfigError naming the option and the fix, and a command line that passes
them is left to fairseq."""

import pytest

from fairseq_plugins.compat import checkpoint_files, prechecks
from fairseq_plugins.errors import ConfigError


def test_train_without_arch_names_the_option_and_the_choices(monkeypatch):
    monkeypatch.setattr(checkpoint_files, "check", lambda tool, argv: None)
    with pytest.raises(ConfigError, match=r"needs --arch .*infinite_former_lm"):
        prechecks.check("train", ["data/bin", "--task", "streaming_lm"])
    for arch in (["--arch", "infinite_former_lm"], ["-a", "transformer_lm"]):
        prechecks.check("train", ["data/bin", "--task", "streaming_lm", *arch])
    prechecks.check("train", ["--help"])  # fairseq prints its help
    prechecks.check("train", ["-h"])
    prechecks.check("eval_lm", ["data/bin", "--path", "ck.pt"])  # eval-lm reads the arch from the checkpoint


def test_bf16_without_cuda_is_refused_and_with_cuda_passes():
    args = prechecks.command_line(["data/bin", "--bf16"])
    with pytest.raises(ConfigError, match="--bf16"):
        prechecks.check_bf16(args, cuda_available=False)
    prechecks.check_bf16(args, cuda_available=True)
    prechecks.check_bf16(prechecks.command_line(["data/bin"]), cuda_available=False)
