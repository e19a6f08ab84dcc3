"""The scripts show what the user needs (issue 13, item 16): fairseq-train's stderr through
scripts/train.sh / evaluate.sh / train-summarizer.sh loses the pages of library deprecation
warnings (hydra, torch, fairseq) and "Please install tensorboardX", and keeps everything else."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SP = "/venv/lib/python3.11/site-packages"
NOISE = f"""INFO:fairseq.tasks.text_to_speech:Please install tensorboardX: pip install tensorboardX
{SP}/hydra/experimental/initialize.py:43: UserWarning: hydra.experimental.initialize() is no longer experimental.
  deprecation_warning(message=message)
{SP}/hydra/experimental/initialize.py:45: Hydra14MigrationWarning: 
The version_base parameter is not specified.
See https://hydra.cc/docs/upgrades/1.3_to_1.4/prepare_for_1_4/ for preparation instructions.
  self.delegate = real_initialize(
sys:1: UserWarning: 
'config' is validated against ConfigStore schema with the same name.
This behavior is deprecated in Hydra 1.1 and will be removed in Hydra 1.2.
{SP}/hydra/compose.py:56: UserWarning: 
The strict flag in the compose API is deprecated.

  deprecation_warning(
{SP}/torch/utils/data/dataloader.py:1102: UserWarning: 'pin_memory' argument is set as true but no accelerator is found
  warnings.warn(warn_msg)
{SP}/fairseq/tasks/fairseq_task.py:531: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.
  with torch.autograd.profiler.record_function("forward"):
"""
KEPT = """/repo/fairseq_plugins/models/x.py:12: UserWarning: the plugin's own warning stays
  warnings.warn("the plugin's own warning stays")
fairseq_plugins: error: the dictionary of DATA differs from the checkpoint's
Traceback (most recent call last):
  File "x.py", line 1, in <module>
"""
STUB = "#!/bin/sh\ncat \"$NOISE_FILE\" >&2\necho 'stdout line'\nexit 3\n"


def test_filter_drops_library_warnings_and_keeps_the_rest():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "log_filter.py")], input=NOISE + KEPT,
                          capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "QUIET"})
    assert proc.returncode == 0
    hidden = len(NOISE.splitlines())
    assert proc.stdout == KEPT + f"({hidden} lines of library warnings hidden; QUIET=0 shows them)\n"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "log_filter.py")], input=NOISE + KEPT,
                          capture_output=True, text=True, env={**os.environ, "QUIET": "0"})
    assert proc.stdout == NOISE + KEPT


def test_train_sh_shows_fairseq_errors_without_the_noise(tmp_path):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "fairseq-train").write_text(STUB)
    (stubs / "fairseq-train").chmod(0o755)
    (tmp_path / "noise.txt").write_text(NOISE + KEPT)
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "dict.txt").write_text("a 1\n")
    env = {**{k: v for k, v in os.environ.items() if k != "QUIET"}, "NOISE_FILE": str(tmp_path / "noise.txt"),
           "PATH": f"{stubs}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "scripts/train.sh", "infinite_former", str(tmp_path / "lm"), str(tmp_path / "s")],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3 and "stdout line" in proc.stdout
    for noise in ("hydra", "Hydra", "tensorboardX", "pin_memory", "FutureWarning", "deprecation_warning"):
        assert noise not in proc.stderr, proc.stderr
    assert "fairseq_plugins: error: the dictionary" in proc.stderr and "the plugin's own warning" in proc.stderr
