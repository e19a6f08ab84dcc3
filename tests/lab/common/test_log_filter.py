"""What the project's recipes show of a fairseq tool: the filter that ``fairseq-longmem`` installs in
the tool's own process (fairseq_plugins/lab/common/quiet.py) on real captured output replayed through
Python's logging and warnings, and scripts/train.sh / evaluate.sh / quickstart.sh with the real tools.
The user sees every progress, validation, checkpoint and result line and the errors, the one-line
error last; not "Please install tensorboardX", the libraries' warning pages, fairseq's config dump,
the model's module tree or its bookkeeping lines; QUIET=0 shows everything."""
import logging
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

import helpers
from fairseq_plugins.lab.common import quiet

ROOT = helpers.ROOT
SP = "/venv/lib/python3.11/site-packages"
NOTE = "(fairseq's setup messages and the libraries' warnings are hidden; QUIET=0 shows them)"
TINY = {"LAYERS": "2", "WIDTH": "32", "HEADS": "2", "FFN": "64", "SEGMENT": "32", "STREAMS": "4", "NUM_BASIS": "16",
        "WARMUP": "10", "LR": "0.003", "MAX_UPDATE": "4"}
ERROR = "--tau must be between 0 and 1, got 1.5"

TRAIN_CAPTURE = """\
xo 2026-12-01 11:51:01 | INFO | fairseq.tasks.text_to_speech | Please install tensorboardX: pip install tensorboardX
xe {SP}/hydra/experimental/initialize.py:43: UserWarning: hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()
xe   deprecation_warning(message=message)
xe {SP}/hydra/experimental/initialize.py:45: Hydra14MigrationWarning: 
xe The version_base parameter is not specified.
xe Hydra will assume defaults for version 1.1.
xe Hydra 1.4 will remove this compatibility behavior.
xe Before upgrading to Hydra 1.4, set version_base="1.3" and test your application.
xe See https://hydra.cc/docs/upgrades/1.3_to_1.4/prepare_for_1_4/ for preparation instructions.
xe   self.delegate = real_initialize(
xe {SP}/hydra/experimental/compose.py:25: UserWarning: hydra.experimental.compose() is no longer experimental. Use hydra.compose()
xe   deprecation_warning(message=message)
xe {SP}/hydra/core/default_element.py:124: UserWarning: In 'config': Usage of deprecated keyword in package header '# @package _group_'.
xe See https://hydra.cc/docs/1.2/upgrades/1.0_to_1.1/changes_to_package_header for more information
xe   deprecation_warning(
xe sys:1: UserWarning: 
xe 'config' is validated against ConfigStore schema with the same name.
xe This behavior is deprecated in Hydra 1.1 and will be removed in Hydra 1.2.
xe See https://hydra.cc/docs/1.2/upgrades/1.0_to_1.1/automatic_schema_matching for migration instructions.
xe {SP}/hydra/compose.py:56: UserWarning: 
xe The strict flag in the compose API is deprecated.
xe See https://hydra.cc/docs/1.2/upgrades/0.11_to_1.0/strict_mode_flag_deprecated for more info.
xe 
xe   deprecation_warning(
xo 2026-12-01 11:51:03 | INFO | fairseq_cli.train | {'_name': None, 'common': {'_name': None, 'no_progress_bar': False, 'log_interval': 2}}
|o 2026-12-01 11:51:03 | INFO | fairseq_plugins.tasks.streaming_language_modeling | dictionary: 301 types
xo 2026-12-01 11:51:03 | INFO | fairseq_cli.train | InfiniteFormerLanguageModel(
xo   (decoder): InfiniteFormerDecoder(
xo     (embed_tokens): Embedding(301, 32, padding_idx=1)
xo     (dropout_module): FairseqDropout()
xo     (layers): ModuleList(
xo       (0-1): 2 x PreNormBlock(
xo         (self_attn_layer_norm): LayerNorm((32,), eps=1e-05, elementwise_affine=True, bias=True)
xo         (self_attn): ShortTermMemoryAttention(
xo           (q_proj): Linear(in_features=32, out_features=32, bias=True)
xo           (k_proj): Linear(in_features=32, out_features=32, bias=True)
xo           (v_proj): Linear(in_features=32, out_features=32, bias=True)
xo           (out_proj): Linear(in_features=32, out_features=32, bias=True)
xo           (rotary): RotaryPositionalEmbedding()
xo         )
xo         (long_term_memory): LongTermMemory(
xo           N=16, M=16, tau=0.5, ridge_penalty=0.5, sticky=True
xo           (gate): SmoothingGate(32, 32, kernel_size=(3,), stride=(1,), padding=(1,))
xo           (k_proj): Linear(in_features=32, out_features=32, bias=False)
xo           (v_proj): Linear(in_features=32, out_features=32, bias=False)
xo           (out_proj): Linear(in_features=32, out_features=32, bias=False)
xo         )
xo         (final_layer_norm): LayerNorm((32,), eps=1e-05, elementwise_affine=True, bias=True)
xo         (ffn): FeedForward(
xo           (fc1): Linear(in_features=32, out_features=64, bias=True)
xo           (fc2): Linear(in_features=64, out_features=32, bias=True)
xo           (activation_dropout_module): FairseqDropout()
xo         )
xo         (dropout_module): FairseqDropout()
xo       )
xo     )
xo     (layer_norm): LayerNorm((32,), eps=1e-05, elementwise_affine=True, bias=True)
xo     (output_projection): Linear(in_features=32, out_features=301, bias=False)
xo   )
xo )
|o 2026-12-01 11:51:03 | INFO | fairseq_cli.train | task: StreamingLanguageModelingTask
|o 2026-12-01 11:51:03 | INFO | fairseq_cli.train | model: InfiniteFormerLanguageModel
|o 2026-12-01 11:51:03 | INFO | fairseq_cli.train | criterion: InfiniteFormerKLCriterion
|o 2026-12-01 11:51:03 | INFO | fairseq_cli.train | num. shared model params: 39,200 (num. trained: 39,200)
xo 2026-12-01 11:51:03 | INFO | fairseq_cli.train | num. expert model params: 0 (num. trained: 0)
|o 2026-12-01 11:51:03 | INFO | fairseq.data.data_utils | loaded 45 examples from: /runs/data/bin/valid
|o 2026-12-01 11:51:03 | INFO | fairseq_plugins.tasks.streaming_language_modeling | valid: 3806 tokens in 4 streams per rank × 1 ranks, 30 batches of 32 tokens per stream
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.embed_tokens.weight <- decoder.output_projection.weight
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.layers.0.long_term_memory.k_proj.bias <- decoder.layers.0.long_term_memory.v_proj.bias
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.layers.0.long_term_memory.k_proj.bias <- decoder.layers.0.long_term_memory.out_proj.bias
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.layers.0.long_term_memory.k_proj.bias <- decoder.layers.1.long_term_memory.k_proj.bias
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.layers.0.long_term_memory.k_proj.bias <- decoder.layers.1.long_term_memory.v_proj.bias
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.layers.0.long_term_memory.k_proj.bias <- decoder.layers.1.long_term_memory.out_proj.bias
xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: decoder.layers.0.long_term_memory.k_proj.bias <- decoder.output_projection.bias
|o 2026-12-01 11:51:03 | INFO | fairseq_cli.train | training on 1 devices (GPUs/TPUs)
|o 2026-12-01 11:51:03 | INFO | fairseq_cli.train | max tokens per device = None and max sentences per device = 4
|o 2026-12-01 11:51:03 | INFO | fairseq.trainer | Preparing to load checkpoint /runs/ts2/checkpoint_last.pt
|o 2026-12-01 11:51:03 | INFO | fairseq.trainer | No existing checkpoint found /runs/ts2/checkpoint_last.pt
|o 2026-12-01 11:51:03 | INFO | fairseq.trainer | loading train data for epoch 1
|o 2026-12-01 11:51:03 | INFO | fairseq.data.data_utils | loaded 156 examples from: /runs/data/bin/train
|o 2026-12-01 11:51:03 | INFO | fairseq_plugins.tasks.streaming_language_modeling | train: 17672 tokens in 4 streams per rank × 1 ranks, 139 batches of 32 tokens per stream
|o 2026-12-01 11:51:05 | INFO | fairseq_cli.train | begin dry-run validation on "valid" subset
xe {SP}/torch/utils/data/dataloader.py:759: UserWarning: 'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.
xe   super().__init__(loader)
xo 2026-12-01 11:51:05 | INFO | fairseq.data.iterators | grouped total_num_itrs = 139
|o 2026-12-01 11:51:05 | INFO | fairseq.trainer | begin training epoch 1
xo 2026-12-01 11:51:05 | INFO | fairseq_cli.train | Start iterating over samples
xe {SP}/fairseq/tasks/fairseq_task.py:531: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead.
xe   with torch.cuda.amp.autocast(enabled=(isinstance(optimizer, AMPOptimizer))):
|o 2026-12-01 11:51:05 | INFO | train_inner | epoch 001:      2 / 139 loss=9.497, nll_loss=9.496, kl=134.901, ppl=722.26, wps=2916.5, ups=22.62, wpb=128, bsz=4, num_updates=2, lr=0.0006, gnorm=1.203, clip=100, train_wall=0, wall=2
|o 2026-12-01 11:51:05 | INFO | train_inner | epoch 001:      4 / 139 loss=8.952, nll_loss=8.952, kl=339.464, ppl=495.22, wps=4053.7, ups=31.67, wpb=128, bsz=4, num_updates=4, lr=0.0012, gnorm=1.087, clip=100, train_wall=0, wall=2
|o 2026-12-01 11:51:05 | INFO | fairseq_cli.train | Stopping training due to num_updates: 4 >= max_update: 4
|o 2026-12-01 11:51:05 | INFO | fairseq_cli.train | begin validation on "valid" subset
|o 2026-12-01 11:51:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.278 | nll_loss 9.278 | kl 263.793 | ppl 620.83 | wps 19625.2 | wpb 126.9 | bsz 4 | num_updates 4
|o 2026-12-01 11:51:05 | INFO | fairseq.checkpoint_utils | Preparing to save checkpoint for epoch 1 @ 4 updates
xo 2026-12-01 11:51:05 | INFO | fairseq.checkpoint_utils | State of StreamingLanguageModelingTask is ready to be persisted with the checkpoint
|o 2026-12-01 11:51:05 | INFO | fairseq.trainer | Saving checkpoint to /runs/ts2/checkpoint_best.pt
|o 2026-12-01 11:51:05 | INFO | fairseq.trainer | Finished saving checkpoint to /runs/ts2/checkpoint_best.pt
|o 2026-12-01 11:51:05 | INFO | fairseq.checkpoint_utils | Saved checkpoint /runs/ts2/checkpoint_best.pt (epoch 1 @ 4 updates, score 9.278) (writing took 0.028193453999847407 seconds)
|o 2026-12-01 11:51:05 | INFO | fairseq_cli.train | end of epoch 1 (average epoch stats below)
|o 2026-12-01 11:51:05 | INFO | train | epoch 001 | loss 9.224 | nll_loss 9.224 | kl 237.182 | ppl 598.06 | wps 1116.5 | ups 8.71 | wpb 128 | bsz 4 | num_updates 4 | lr 0.0012 | gnorm 1.145 | clip 100 | train_wall 0 | wall 2
|o 2026-12-01 11:51:05 | INFO | fairseq_cli.train | done training in 0.4 seconds
"""
EVAL_CAPTURE = """\
xe INFO:fairseq.tasks.text_to_speech:Please install tensorboardX: pip install tensorboardX
xe {SP}/hydra/experimental/initialize.py:43: UserWarning: hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()
xe   deprecation_warning(message=message)
xe {SP}/hydra/experimental/initialize.py:45: Hydra14MigrationWarning: 
xe The version_base parameter is not specified.
xe Hydra will assume defaults for version 1.1.
xe Hydra 1.4 will remove this compatibility behavior.
xe Before upgrading to Hydra 1.4, set version_base="1.3" and test your application.
xe See https://hydra.cc/docs/upgrades/1.3_to_1.4/prepare_for_1_4/ for preparation instructions.
xe   self.delegate = real_initialize(
xe DEBUG:hydra.core.utils:Setting JobRuntime:name=UNKNOWN_NAME
xe DEBUG:hydra.core.utils:Setting JobRuntime:name=utils
xe {SP}/hydra/experimental/compose.py:25: UserWarning: hydra.experimental.compose() is no longer experimental. Use hydra.compose()
xe   deprecation_warning(message=message)
xe {SP}/hydra/core/default_element.py:124: UserWarning: In 'config': Usage of deprecated keyword in package header '# @package _group_'.
xe See https://hydra.cc/docs/1.2/upgrades/1.0_to_1.1/changes_to_package_header for more information
xe   deprecation_warning(
xe sys:1: UserWarning: 
xe 'config' is validated against ConfigStore schema with the same name.
xe This behavior is deprecated in Hydra 1.1 and will be removed in Hydra 1.2.
xe See https://hydra.cc/docs/1.2/upgrades/1.0_to_1.1/automatic_schema_matching for migration instructions.
xe {SP}/hydra/compose.py:56: UserWarning: 
xe The strict flag in the compose API is deprecated.
xe See https://hydra.cc/docs/1.2/upgrades/0.11_to_1.0/strict_mode_flag_deprecated for more info.
xe 
xe   deprecation_warning(
xe INFO:fairseq_cli.eval_lm:{'_name': None, 'common': {'_name': None, 'no_progress_bar': False, 'log_interval': 1000}}
|e INFO:fairseq_plugins.tasks.streaming_language_modeling:dictionary: 301 types
|e INFO:fairseq_cli.eval_lm:loading model(s) from /runs/ts2/checkpoint_last.pt
|e INFO:fairseq_plugins.compat.inference:--required-batch-size-multiple 8 set to 1 for inference: fairseq would drop a last batch of another size (every example is generated)
|e INFO:fairseq_cli.eval_lm:num. model params: 39,200
|e INFO:fairseq.data.data_utils:loaded 16 examples from: /runs/data/bin/test
|e INFO:fairseq_plugins.tasks.streaming_language_modeling:test: 3773 tokens in 4 streams per rank × 1 ranks, 30 batches of 32 tokens per stream
|e INFO:fairseq_cli.eval_lm:/runs/data/bin test 30 examples
xe {SP}/torch/utils/data/dataloader.py:759: UserWarning: 'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used.
xe   super().__init__(loader)
|e INFO:fairseq_cli.eval_lm:Evaluated 3,773 tokens in 0.1s (32728.69 tokens/s)
|e INFO:fairseq_cli.eval_lm:Loss (base 2): 9.3608, Perplexity: 657.50
"""


def parse(capture):
    """[(keep, stream, line with newline)] of a capture."""
    assert "Hydra14MigrationWarning: \n" in capture, "the capture lost its trailing spaces"
    return [(line[0] == "|", line[1], line[3:].replace("{SP}", SP) + "\n") for line in capture.splitlines()]


# A stand-in for fairseq's tool module (fairseq_cli.train / eval_lm, found first on PYTHONPATH), run by
# fairseq-longmem in its own process like the real one: cli_main replays a capture through the machinery
# the real tool uses (a log record per record line, the module tree as one record, a Python warning per
# warning block with its source line, anything else written as it is), then ends as asked
# (STUB_ERROR: a ConfigError, which the plugin prints as its one-line error; STUB_SLEEP: it sleeps).
REPLAY = r"""
import builtins, linecache, logging, os, re, sys, time, warnings

RECORD = re.compile(r"^(?:(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| (?P<level>[A-Z]+) \| (?P<name>[\w.]+) \| "
                    r"|(?P<plain_level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<plain_name>[\w.]+):)(?P<message>.*)$", re.S)
HEADER = re.compile(r"^(?P<path>\S[^:]*):(?P<line>\d+): (?P<category>\w*Warning): (?P<message>.*)$", re.S)


class Replay(logging.Handler):
    def emit(self, record):
        stream = sys.stdout if record.stream == "o" else sys.stderr
        stream.write(record.prefix + record.getMessage() + "\n")
        stream.flush()


def events(lines):
    out = []
    for stream, line in lines:
        text = line[:-1]
        last = out[-1] if out else None
        if last and last[0] == "warning" and not last[3] and not RECORD.match(text) and not HEADER.match(text):
            if text.startswith("  "):
                last[3] = text  # the source line ends the block
            else:
                last[2].append(text)
        elif last and last[0] == "record" and (text.startswith(" ") or text == ")") and not HEADER.match(text):
            last[2] += "\n" + text  # the model's module tree: one record of many lines
        elif RECORD.match(text):
            out.append(["record", stream, text])
        elif HEADER.match(text):
            out.append(["warning", stream, [text], ""])
        else:
            out.append(["raw", stream, line])
    return out


def cli_main():
    logging.basicConfig(force=True, handlers=[Replay()], level=logging.DEBUG)
    with open(os.environ["CAPTURE"], encoding="utf-8") as f:
        lines = [(line[0], line[1:]) for line in f]
    for kind, stream, *rest in events(lines):
        if kind == "record":
            m = RECORD.match(rest[0])
            prefix = rest[0][:m.start("message")]
            level = logging.getLevelName(m.group("level") or m.group("plain_level"))
            logging.getLogger(m.group("name") or m.group("plain_name")).log(
                level, m.group("message"), extra={"stream": stream, "prefix": prefix})
        elif kind == "warning":
            block, source = rest
            m = HEADER.match(block[0])
            lineno = int(m.group("line"))
            if source:
                linecache.cache[m.group("path")] = (1, None, [source + "\n"] * lineno, m.group("path"))
            builtin = getattr(__builtins__, m.group("category"), None) if not isinstance(__builtins__, dict) \
                else __builtins__.get(m.group("category"))
            category = builtin or type(m.group("category"), (UserWarning,), {})
            warnings.warn_explicit("\n".join([m.group("message")] + block[1:]), category, m.group("path"), lineno)
        else:
            (sys.stdout if stream == "o" else sys.stderr).write(rest[0])
            (sys.stdout if stream == "o" else sys.stderr).flush()
    if os.environ.get("STUB_SLEEP"):
        print("started", flush=True)
        time.sleep(float(os.environ["STUB_SLEEP"]))
    if os.environ.get("STUB_ERROR"):
        from fairseq_plugins.errors import ConfigError
        raise ConfigError(os.environ["STUB_ERROR"])
"""


@pytest.fixture
def stub_env(tmp_path):
    """The environment in which fairseq-longmem runs the stand-in tool: {**env, CAPTURE: path}."""
    package = tmp_path / "stubs" / "fairseq_cli"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_replay.py").write_text(REPLAY)
    for tool in ("train", "eval_lm"):
        (package / f"{tool}.py").write_text("from fairseq_cli._replay import cli_main  # noqa: F401\n")
    env = {k: v for k, v in helpers.env().items() if k != "QUIET"}
    env["PYTHONPATH"] = f"{package.parent}{os.pathsep}{env['PYTHONPATH']}"
    env["CAPTURE"] = str(tmp_path / "capture")
    return env


# what the checks made before a fairseq tool starts require of its command line (the stand-in
# tool itself reads no argument)
STUB_ARGS = {"train": ["--task", "streaming_lm", "--arch", "infinite_former_lm", "--optimizer", "adam"], "eval-lm": []}


def replay(env, capture, *command, merged=True, **extra):
    with open(env["CAPTURE"], "w", encoding="utf-8") as f:
        f.write("".join(s + line for _, s, line in parse(capture)))
    return subprocess.run([str(a) for a in command], cwd=ROOT, env={**env, **extra}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE)


@pytest.mark.full
@pytest.mark.parametrize("capture,tool", [(TRAIN_CAPTURE, "train"), (EVAL_CAPTURE, "eval-lm")],
                         ids=["fairseq-train", "fairseq-eval-lm"])
def test_filter_keeps_what_the_user_needs_of_real_output(stub_env, capture, tool):
    lines = parse(capture)
    raw = "".join(line for _, _, line in lines)
    kept = [line for keep, _, line in lines if keep]
    command = [os.path.join(helpers.BIN, "fairseq-longmem"), tool, *STUB_ARGS[tool]]
    proc = replay(stub_env, capture, *command)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout == NOTE + "\n" + "".join(kept)  # the note comes before the first line it stands for
    everything = replay(stub_env, capture, *command, QUIET="0").stdout
    assert everything.endswith(raw) and NOTE not in everything  # (after the real imports' own messages)


@pytest.mark.full
def test_filter_passes_the_projects_warnings_errors_and_tracebacks(stub_env):
    capture = (
        "xe {SP}/hydra/compose.py:56: UserWarning: \nxe The strict flag in the compose API is deprecated.\n"
        "xe   deprecation_warning(\n"
        "|e /repo/fairseq_plugins/models/x.py:12: UserWarning: the plugin's own warning stays\n"
        "|e   warnings.warn(\"the plugin's own warning stays\")\n"
        "|o 2026-12-01 11:51:03 | WARNING | fairseq_plugins.tasks.streaming_language_modeling | the checkpoint's "
        "model runs segments of 16 tokens\n"
        "xe {SP}/hydra/experimental/initialize.py:45: Hydra14MigrationWarning: \nxe   self.delegate = real_initialize(\n"
        "|e Traceback (most recent call last):\n|e   File \"x.py\", line 1, in <module>\n|e ValueError: boom\n"
        "xo 2026-12-01 11:51:03 | INFO | fairseq.trainer | detected shared parameter: a <- b\n"
        "|o 2026-12-01 11:51:03 | INFO | fairseq.trainer | begin training epoch 1\n")
    kept = [line for keep, _, line in parse(capture) if keep]
    proc = replay(stub_env, capture, os.path.join(helpers.BIN, "fairseq-longmem"), "train", *STUB_ARGS["train"],
                  STUB_ERROR=ERROR)
    assert proc.returncode == 1
    assert proc.stdout == NOTE + "\n" + "".join(kept) + f"fairseq_plugins: error: {ERROR}\n"


def test_a_filter_that_fails_keeps_the_record():
    dropped = []
    rule = quiet.NoiseFilter([(None, re.compile(r"\{'_name': "))], lambda: dropped.append(1))
    assert not rule.filter(logging.LogRecord("fairseq_cli.train", logging.INFO, "", 1, "{'_name': None}", None, None))
    unformattable = logging.LogRecord("fairseq_cli.train", logging.INFO, "", 1, "%d", ("x",), None)
    assert rule.filter(unformattable) and dropped == [1]  # getMessage() raises: kept, nothing raised


def _train_sh(env, capture, merged, **extra):
    data = os.path.join(os.path.dirname(env["CAPTURE"]), "lm")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "dict.txt"), "w") as f:
        f.write("a 1\n")
    save = os.path.join(os.path.dirname(env["CAPTURE"]), "s")
    return replay(env, capture, "bash", "scripts/train.sh", "infinite_former", data, save, merged=merged,
                  STUB_ERROR=ERROR, **extra)


@pytest.mark.full
def test_train_sh_filters_both_streams_and_ends_with_the_error(stub_env):
    lines = parse(TRAIN_CAPTURE)
    proc = _train_sh(stub_env, TRAIN_CAPTURE, merged=True)
    assert proc.returncode == 1
    threads, *shown = proc.stdout.splitlines(keepends=True)
    assert threads.startswith("train.sh: THREADS=")
    assert shown == [NOTE + "\n"] + [line for keep, _, line in lines if keep] + [f"fairseq_plugins: error: {ERROR}\n"]


@pytest.mark.full
def test_train_sh_keeps_each_line_on_its_stream(stub_env):
    lines = parse(TRAIN_CAPTURE)
    proc = _train_sh(stub_env, TRAIN_CAPTURE, merged=False)
    assert proc.stdout.splitlines(keepends=True)[1:] == [line for keep, s, line in lines if keep and s == "o"]
    assert proc.stderr == NOTE + "\n" + f"fairseq_plugins: error: {ERROR}\n"


@pytest.mark.full
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process's command line from /proc")
def test_train_sh_is_the_tools_process(stub_env, tmp_path):
    """train.sh execs fairseq-longmem, which runs the tool in its own process: the script's pid is the
    tool's (a kill stops the training), and nothing else holds the output open."""
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "dict.txt").write_text("a 1\n")
    (tmp_path / "capture").write_text("")
    proc = subprocess.Popen(["bash", "scripts/train.sh", "infinite_former", str(tmp_path / "lm"), str(tmp_path / "s")],
                            cwd=ROOT, env={**stub_env, "STUB_SLEEP": "60"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().startswith("train.sh: THREADS=")
        line = proc.stdout.readline()
        if line == quiet.NOTE + "\n":  # the plugin's start-up line of fairseq changes was hidden
            line = proc.stdout.readline()
        assert line == "started\n"
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:  # the script's process runs the tool
            assert f.read().split(b"\0")[1:4] == [os.path.join(helpers.BIN, "fairseq-longmem").encode(), b"arms",
                                                   b"train"]
        proc.send_signal(signal.SIGKILL)
        assert proc.stdout.read() == ""  # EOF: no other process (the stub sleeps 60 s)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


# ---- the real tools through the scripts ----------------------------------------------------------

NOISE = ("tensorboardX", "{'_name'", "PreNormBlock(", "detected shared parameter", "Warning: ", "hydra",
         "grouped total_num_itrs")
TIMING = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| |\b(wps|ups|wall|train_wall)([ =])[0-9.]+|took [0-9.e-]+|"
                    r"in [0-9.]+s? |\([0-9.]+ tokens/s\)")
PROGRESS = re.compile(r"\| (train_inner|valid|train) \||Saved checkpoint|done training|Loss \(base 2\)|Evaluated ")


def _env(**extra):
    return {**{k: v for k, v in helpers.env().items() if k != "QUIET"}, **TINY, **extra}


def script(*args, **env):
    return subprocess.run(["bash", *map(str, args)], cwd=ROOT, env=_env(**env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _normal(text):
    return [TIMING.sub("#", line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def data(tmp_path_factory, books_bin):
    out = tmp_path_factory.mktemp("logs") / "data"
    shutil.copytree(books_bin.parent, str(out))  # data-prep's output, prepared once
    return out / "bin"


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    shown = script("scripts/train.sh", "infinite_former", data, tmp / "run", "--log-interval", "2")
    (tmp / "run").rename(tmp / "kept")  # the same folder name for both runs: the same lines
    everything = script("scripts/train.sh", "infinite_former", data, tmp / "run", "--log-interval", "2", QUIET="0")
    assert shown.returncode == 0 and everything.returncode == 0, everything.stdout[-3000:]
    return shown.stdout, everything.stdout, tmp / "kept" / "checkpoint_last.pt"


@pytest.mark.full
def test_train_sh_shows_every_progress_line_and_none_of_the_noise(runs):
    shown, everything, _ = runs
    for noise in NOISE:
        assert noise in everything, noise  # the real tool prints it ...
        assert noise not in shown, noise  # ... and the user does not see it
    progress = [line for line in _normal(everything) if PROGRESS.search(line)]
    assert len(progress) >= 6 and any("num_updates=4" in line for line in progress)
    assert [line for line in _normal(shown) if PROGRESS.search(line)] == progress
    assert set(_normal(shown)) - {NOTE} <= set(_normal(everything))  # nothing that the tool did not print


@pytest.mark.full
def test_evaluate_sh_ends_with_the_perplexity(data, runs):
    checkpoint = runs[2]
    shown = script("scripts/evaluate.sh", "infinite_former", data, checkpoint)
    everything = script("scripts/evaluate.sh", "infinite_former", data, checkpoint, QUIET="0")
    assert "DEBUG:hydra" in everything.stdout and "{'_name'" in everything.stdout
    assert not any(noise in shown.stdout for noise in NOISE), shown.stdout
    assert "Loss (base 2)" in shown.stdout.splitlines()[-1]
    assert [line for line in _normal(shown.stdout) if PROGRESS.search(line)] == \
        [line for line in _normal(everything.stdout) if PROGRESS.search(line)]


@pytest.mark.full
def test_a_refused_run_ends_with_its_error_line(data, tmp_path):
    proc = script("scripts/train.sh", "infinite_former", data, tmp_path / "c", "--tau", "1.5")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode != 0
    assert lines[-1].startswith("fairseq_plugins: error: ") and "--tau" in lines[-1], proc.stdout[-2000:]
    assert not any(noise in proc.stdout for noise in NOISE), proc.stdout


@pytest.mark.full
def test_quickstart_logs_what_the_user_needs_and_shows_its_end_with_the_error_last(data, tmp_path):
    runs = tmp_path / "runs"
    proc = script("scripts/quickstart.sh", "--corpus", "txt", "--input", "tests/fixtures/books_txt", "--vocab-size",
                  "300", "--data", data.parent, "--out", runs, "--arms", "infinite_former", HEADS="3")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 1
    assert lines[-1].startswith("fairseq_plugins: error: ") and "--decoder-attention-heads" in lines[-1], lines[-5:]
    assert any(line.startswith("quickstart.sh: training infinite_former failed") for line in lines)
    assert not any(noise in proc.stdout for noise in NOISE), proc.stdout
    log = (runs / "infinite_former" / "train.log").read_text()
    assert not any(noise in log for noise in NOISE), log  # the run's log is what the user needs of it ...
    assert log.startswith("train.sh: THREADS=1") and log.rstrip().splitlines()[-1] == lines[-1]
    assert "\n".join(lines).endswith("\n".join(log.rstrip().splitlines()[-20:]))  # ... its end shown as it is
