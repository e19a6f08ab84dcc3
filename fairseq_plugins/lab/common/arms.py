"""The registry of experiment arms: arm -> task, arch, criterion and flags, grouped in jobs.

The job defined here is ``lm`` (the language-modelling comparison: scripts/train.sh, evaluate.sh,
quickstart.sh), whose arms every LM experiment builds on. An experiment with arms of its own
defines its job in its folder (:data:`EXPERIMENT_JOBS`: ``benchmark`` for ``fairseq-longmem
bench``, ``precision`` for scripts/gpu-checks.sh, ``sorting``, ``recall``, ``summarization``,
``mqar``). The budget
of a job comes from the environment (empty or unset: the default, as ``${VAR:-default}`` does). The
recipes run an arm with ``fairseq-longmem arms train|eval`` and query the registry with the other
verbs of ``fairseq-longmem arms`` (:mod:`fairseq_plugins.lab.common.arms_cli`). Standard library only:
it is read before fairseq is imported.
"""

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from fairseq_plugins.errors import ConfigError

Budget = Mapping[str, str]
Flags = Callable[[Budget], List[str]]


def _none(_budget: Budget) -> List[str]:
    return []


@dataclass(frozen=True)
class Arm:
    """One arm of a job.

    ``flags(budget)`` are the arm's own fairseq-train options (after task/arch/criterion),
    ``tail`` options go after the job's common ones, ``eval_flags`` are its fairseq-eval-lm
    options; ``model_flags`` are the model-config values that tell this arm from another arm
    with the same arch in a checkpoint (e.g. ``memory_off``); ``has_memory``: the arm reads a
    long-term or document memory, so the recipes also score its memory-wiped control; ``label``:
    the arm's name in a results table's model column (empty: the arm's name itself).
    """

    name: str
    task: str
    arch: str
    criterion: Optional[str]  # None: fairseq's default (cross_entropy), not passed
    description: str
    flags: Flags = _none
    tail: Flags = _none
    eval_flags: Flags = _none
    default: bool = True
    label: Callable[[Budget], str] = lambda budget: ""
    max_source: Optional[str] = None  # summarization: the budget variable of --max-source-positions
    truncate_source: bool = False
    model_flags: Mapping[str, object] = field(default_factory=dict)
    has_memory: bool = False


@dataclass(frozen=True)
class Job:
    name: str
    arms: Tuple[Arm, ...]
    budget: Tuple[Tuple[str, str], ...] = ()  # (variable, default), in the order scripts print them
    # budget variables that must be non-negative integers; None: those whose default is one
    integers: Optional[Tuple[str, ...]] = None
    # the integer and number variables that may be 0 (every other one must be positive)
    may_be_zero: Tuple[str, ...] = ("SEED", "WARMUP")
    extra: Callable[[Arm], List[str]] = lambda arm: []  # extra fairseq-train options of the job
    # how an arm's fairseq-train options are put together: "lm" (the language-modelling sizes and
    # schedule), "summarization" (the arm's own, then ``common``), "model" (the arm's own options only),
    # "" (no fairseq-train command)
    command: str = "lm"
    # "summarization": the options after the arm's own, common(arm, budget, save_dir, device)
    common: Optional[Callable[[Arm, Budget, str, List[str]], List[str]]] = None

    def integer_variables(self) -> Tuple[str, ...]:
        """The budget variables that :func:`budget` checks as non-negative integers."""
        if self.integers is not None:
            return self.integers
        return tuple(name for name, default in self.budget if default.isdigit())

    def positive_variables(self) -> Tuple[str, ...]:
        """Of :meth:`integer_variables`, those 0 cannot be: a size, a count, ``MAX_UPDATE``
        (fairseq reads 0 as no limit); not those of ``may_be_zero``."""
        return tuple(name for name in self.integer_variables() if name not in self.may_be_zero)

    def number_variables(self) -> Tuple[str, ...]:
        """The budget variables that are decimal numbers (their default has a point: ``LR``,
        ``DROPOUT``); :func:`budget` checks them as finite and positive (or zero, in ``may_be_zero``)."""
        return tuple(name for name, default in self.budget if name not in self.integer_variables()
                     and "." in default and default.replace(".", "", 1).isdigit())

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    def names(self, default_only: bool = False) -> List[str]:
        return [a.name for a in self.arms if a.default or not default_only]


def _int(budget: Budget, name: str) -> int:
    try:
        return int(budget[name])
    except ValueError:
        raise ConfigError(f"{name} must be an integer, not '{budget[name]}'") from None


def _half(budget: Budget, name: str) -> str:  # bash $((X / 2)): truncates toward zero
    return str(int(_int(budget, name) / 2))


def _double(budget: Budget, name: str) -> str:
    return str(2 * _int(budget, name))


# ---- the language-modelling comparison ---------------------------------------------

LM_BUDGET = (("LAYERS", "2"), ("WIDTH", "128"), ("HEADS", "4"), ("FFN", "512"), ("SEGMENT", "64"),
             ("STREAMS", "16"), ("MAX_UPDATE", "600"), ("LR", "0.002"), ("WARMUP", "100"),
             ("NUM_BASIS", "64"), ("SEED", "1"))


def _memory_flags(b: Budget) -> List[str]:
    return _compressive_flags(b) + ["--num-samples", b["NUM_BASIS"]]


def _compressive_flags(b: Budget) -> List[str]:
    """The streaming arms' options that the compressive memory reads too (not the continuous
    memory's --num-samples: fairseq_plugins/modules/memory/registry.py)."""
    return ["--tokens-per-sample", b["SEGMENT"], "--mem-len", b["SEGMENT"], "--batch-size", b["STREAMS"],
            "--num-basis-functions", b["NUM_BASIS"]]


def _blocks(b: Budget) -> List[str]:  # the same tokens per update as STREAMS/2 blocks of 2*SEGMENT
    return ["--tokens-per-sample", _double(b, "SEGMENT"), "--batch-size", _half(b, "STREAMS")]


def ltm_parameters(width: int, num_basis: int) -> int:
    """Parameters of one layer's ∞-former long-term memory (docs/design/infinite-former.md §3):
    the smoothing gate (a Conv1d e → e of kernel 3: 3e² + e), W_K, W_V and W_O^LTM (3e², no bias)
    and the read's w_μ, w_σ (2N)."""
    return 6 * width * width + width + 2 * num_basis


def matched_ffn(b: Budget) -> str:
    """The FFN width of the memory-off twin whose parameter count matches the ∞-former's: FFN
    raised by one layer's memory parameters over the (2e + 1) parameters an FFN unit costs
    (fc1's row and bias, fc2's column), rounded."""
    width = _int(b, "WIDTH")
    return str(_int(b, "FFN") + round(ltm_parameters(width, _int(b, "NUM_BASIS")) / (2 * width + 1)))


def _memory_eval(b: Budget) -> List[str]:
    return ["--tokens-per-sample", b["SEGMENT"], "--batch-size", b["STREAMS"]]


def _window_eval(b: Budget) -> List[str]:
    return ["--sample-break-mode", "none", "--tokens-per-sample", _double(b, "SEGMENT"),
            "--context-window", b["SEGMENT"], "--batch-size", b["STREAMS"]]


LM_ARMS = (
    Arm("infinite_former", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "∞-former (short-term memory + continuous long-term memory)", flags=_memory_flags,
        eval_flags=_memory_eval, model_flags={"no_long_term_memory": False}, has_memory=True),
    Arm("memory_off", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "the same model with --no-long-term-memory (Transformer-XL-style twin)", flags=_memory_flags,
        tail=lambda b: ["--no-long-term-memory"], eval_flags=_memory_eval,
        model_flags={"no_long_term_memory": True}),
    Arm("infinite_former_evicted", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "infinite_former with --ltm-input evicted (the paper's: the memory receives what leaves the short-term memory)",
        flags=_memory_flags, tail=lambda b: ["--ltm-input", "evicted"], eval_flags=_memory_eval, default=False,
        model_flags={"no_long_term_memory": False}, has_memory=True),
    Arm("infinite_former_no_sticky", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "infinite_former with --no-sticky-memories (the old memory sampled uniformly)",
        flags=_memory_flags, tail=lambda b: ["--no-sticky-memories"], eval_flags=_memory_eval, default=False,
        model_flags={"no_long_term_memory": False}, has_memory=True),
    Arm("memory_off_matched", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "memory_off with its FFN widened to the ∞-former's parameter count (parameter-matched twin)",
        flags=_memory_flags, tail=lambda b: ["--no-long-term-memory", "--decoder-ffn-embed-dim", matched_ffn(b)],
        eval_flags=_memory_eval, default=False, model_flags={"no_long_term_memory": True}),
    Arm("compressive", "streaming_lm", "compressive_transformer_lm", "infinite_former_kl",
        "Compressive Transformer (Rae et al. 2020): short-term memory + NUM_BASIS compressed slots per layer (the "
        "∞-former's N), rate 4, 1D-conv compression", flags=_compressive_flags, eval_flags=_memory_eval, default=False,
        model_flags={"no_long_term_memory": False}, has_memory=True),
    Arm("infinite_former_mixture", "streaming_lm", "infinite_former_lm", "infinite_former_kl",
        "infinite_former with --memory-read mixture (a read addressed by a softmax over the basis; beyond the "
        "paper, docs/infinite-former.md)", flags=_memory_flags, tail=lambda b: ["--memory-read", "mixture"],
        eval_flags=_memory_eval, default=False, model_flags={"no_long_term_memory": False, "memory_read": "mixture"},
        has_memory=True),
    Arm("transformer_lm", "language_modeling", "transformer_lm", "cross_entropy",
        "fairseq's own transformer_lm",
        flags=lambda b: ["--sample-break-mode", "none", "--decoder-normalize-before",
                         "--decoder-input-dim", b["WIDTH"], "--decoder-output-dim", b["WIDTH"], *_blocks(b)],
        eval_flags=_window_eval),
    Arm("fastformer_lm", "language_modeling", "fastformer_lm", "cross_entropy",
        "Fastformer additive attention (plugin)", flags=lambda b: ["--sample-break-mode", "none", *_blocks(b)],
        eval_flags=_window_eval, default=False),
)


def _lm_common(b: Budget, save_dir: str, device: List[str]) -> List[str]:
    return ["--decoder-layers", b["LAYERS"], "--decoder-embed-dim", b["WIDTH"],
            "--decoder-attention-heads", b["HEADS"], "--decoder-ffn-embed-dim", b["FFN"],
            "--share-decoder-input-output-embed", "--dropout", "0.1",
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0", "--lr", b["LR"],
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", b["WARMUP"], "--max-update", b["MAX_UPDATE"],
            "--seed", b["SEED"], "--save-dir", save_dir, "--no-epoch-checkpoints",
            "--validate-interval-updates", b["MAX_UPDATE"],
            "--log-format", "simple", "--log-interval", "50", "--required-batch-size-multiple", "1", *device]


JOBS: Dict[str, Job] = {
    "lm": Job("lm", LM_ARMS, LM_BUDGET),
}


# ---- queries -------------------------------------------------------------------------


# the jobs an experiment's folder defines: name -> "module:function" returning its Job, built on
# first use (so that this registry imports no experiment)
EXPERIMENT_JOBS: Dict[str, str] = {
    "benchmark": "fairseq_plugins.lab.bench.arms:job",  # fairseq-longmem bench
    "precision": "fairseq_plugins.lab.precision.arms:job",  # scripts/gpu-checks.sh
    "sorting": "fairseq_plugins.lab.sorting.arms:job",  # the paper's sorting task (fairseq_plugins/lab/sorting/sorting.sh)
    "recall": "fairseq_plugins.lab.recall.arms:job",  # recall by distance (fairseq_plugins/lab/recall/recall.sh)
    "summarization": "fairseq_plugins.lab.summarization.arms:job",  # scripts/summarization-comparison.sh
    "mqar": "fairseq_plugins.lab.mqar.arms:job",  # multi-query associative recall (fairseq_plugins/lab/mqar/mqar.sh)
}


_LOADED: Dict[str, Job] = {}  # the experiments' jobs built so far


def job(name: str) -> Job:
    """The job ``name`` (:data:`JOBS`, or an experiment's, :data:`EXPERIMENT_JOBS`).

    Raises:
        ConfigError: an unknown job (the line lists them).
    """
    if name in JOBS:
        return JOBS[name]
    if name not in EXPERIMENT_JOBS:
        raise ConfigError(f"unknown job '{name}' ({', '.join([*JOBS, *EXPERIMENT_JOBS])})")
    if name not in _LOADED:
        import importlib

        module, _, function = EXPERIMENT_JOBS[name].partition(":")
        _LOADED[name] = getattr(importlib.import_module(module), function)()
    return _LOADED[name]


def names(job_name: str, default_only: bool = False) -> List[str]:
    """The arm names of a job, in the order of its tables."""
    return job(job_name).names(default_only)


def joined(items: List[str], style: str = "or") -> str:
    """``a, b or c`` (``style='or'``) or ``a, b, c`` (``'comma'``)."""
    if style == "comma" or len(items) < 2:
        return ", ".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def get_arm(job_name: str, name: str, what: str = "ARM", style: str = "or") -> Arm:
    """The arm ``name`` of a job, or a :class:`ConfigError` naming the valid ones."""
    j = job(job_name)
    try:
        return j.arm(name)
    except KeyError:
        raise ConfigError(f"unknown {what} '{name}' ({joined(j.names(), style)})") from None


def budget(job_name: str, env: Optional[Mapping[str, str]] = None, check: bool = True) -> Dict[str, str]:
    """The budget variables of a job: the environment's value, or the default when unset or empty.

    Raises:
        ConfigError: (``check``) a variable the job needs as an integer is not a non-negative integer,
            or 0 where it must be positive; a decimal variable (``LR``) is not a finite number, or
            negative, or 0 where it must be positive.
    """
    env = os.environ if env is None else env
    j = job(job_name)
    values = {name: (env.get(name) or default) for name, default in j.budget}
    for name in j.integer_variables() if check else ():
        if not values[name].isdigit() or not values[name].isascii():
            raise ConfigError(f"{name} must be a non-negative integer, not '{values[name]}'")
        if name in j.positive_variables() and int(values[name]) == 0:
            raise ConfigError(f"{name} must be a positive integer, not '{values[name]}'")
    for name in j.number_variables() if check else ():
        try:
            number = float(values[name])
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0 or (number == 0 and name not in j.may_be_zero):
            kind = "a non-negative" if name in j.may_be_zero else "a positive"
            raise ConfigError(f"{name} must be {kind} number (e.g. {dict(j.budget)[name]}), not '{values[name]}'")
    return values


def _plugin(root: str) -> List[str]:
    return ["--user-dir", os.path.join(root, "fairseq_plugins")]


def _identity(arm: Arm) -> List[str]:
    return ["--task", arm.task, "--arch", arm.arch] + (["--criterion", arm.criterion] if arm.criterion else [])


def train_options(job_name: str, arm_name: str, save_dir: str, cpu: bool,
                  env: Optional[Mapping[str, str]] = None) -> List[str]:
    """fairseq-train's options for one arm (what follows DATA), without ``--user-dir``:
    ``fairseq-longmem arms train`` runs them with the plugin (:func:`fairseq_plugins.lab.common.fairseq_tools.run_tool`).

    Raises:
        ConfigError: an unknown job or arm, a budget variable that is not an integer, a job
            without a fairseq-train command.
    """
    j = job(job_name)
    b = budget(job_name, env)
    arm = get_arm(job_name, arm_name)
    device = ["--cpu"] if cpu else []
    if j.command == "lm":
        return _identity(arm) + arm.flags(b) + _lm_common(b, save_dir, device) + arm.tail(b) + j.extra(arm)
    if j.command == "summarization":
        return (["--arch", arm.arch, "--criterion", arm.criterion] + arm.flags(b)
                + j.common(arm, b, save_dir, device))
    if j.command == "model":
        return _identity(arm) + arm.flags(b)
    raise ConfigError(f"job '{job_name}' has no fairseq-train command")


def train_args(job_name: str, arm_name: str, root: str, save_dir: str, cpu: bool,
               env: Optional[Mapping[str, str]] = None) -> List[str]:
    """fairseq-train's options for one arm as typed after DATA on fairseq-train's command line:
    ``--user-dir ROOT/fairseq_plugins`` (every arm loads the plugin: its checks, its one-line
    errors, and the ``torch.load`` allow-list that fairseq's own ``transformer`` needs to resume,
    docs/summarization.md), then :func:`train_options`. The precision job's arms: their model
    options only (scripts/gpu-checks.sh adds the rest)."""
    options = train_options(job_name, arm_name, save_dir, cpu, env)
    return options if job(job_name).command == "model" else _plugin(root) + options


def eval_options(job_name: str, arm_name: str, checkpoint: str, cpu: bool,
                 env: Optional[Mapping[str, str]] = None) -> List[str]:
    """fairseq-eval-lm's options for one LM arm (what follows DATA), without ``--user-dir``."""
    if job_name not in ("lm", "sorting"):
        raise ConfigError(f"job '{job_name}' has no fairseq-eval-lm command: eval-args serves the lm and sorting "
                          f"jobs (the other recipes score with their own tools: see their --help)")
    b = budget(job_name, env)
    arm = get_arm(job_name, arm_name)
    return (["--task", arm.task, "--path", checkpoint, "--gen-subset", "test"] + arm.eval_flags(b)
            + ["--log-format", "simple", "--log-interval", "1000"] + (["--cpu"] if cpu else []))


def eval_args(job_name: str, arm_name: str, root: str, checkpoint: str, cpu: bool,
              env: Optional[Mapping[str, str]] = None) -> List[str]:
    """fairseq-eval-lm's options for one LM arm as typed after DATA: ``--user-dir`` first."""
    return _plugin(root) + eval_options(job_name, arm_name, checkpoint, cpu, env)


def lengths_args(job_name: str, arm_name: str, env: Optional[Mapping[str, str]] = None) -> List[str]:
    """The source and target length limits of one summarization arm (fairseq-longmem summarize check-lengths)."""
    b = budget(job_name, env)
    arm = get_arm(job_name, arm_name)
    if arm.max_source is None:
        raise ConfigError(f"arm '{arm_name}' of job '{job_name}' has no source length limit")
    return (["--max-source", b[arm.max_source], "--max-target", b["MAX_TARGET"]]
            + (["--truncate-source"] if arm.truncate_source else []))


def _matches(model_cfg, flag: str, value) -> bool:
    """A checkpoint's model config has ``flag`` at ``value``: a bool flag absent from an older
    config counts as False; any other value compares by its string (fairseq's choice enums)."""
    if isinstance(value, bool):
        return bool(getattr(model_cfg, flag, False)) == value
    return str(getattr(model_cfg, flag, None)) == str(value)


def arm_of_model(job_name: str, arch: str, model_cfg) -> Optional[str]:
    """The arm whose arch and model flags match a checkpoint's model config, or None. Where
    several match, the one with the most flags (``infinite_former_mixture`` before
    ``infinite_former``); among those, the first in the job's table."""
    found = [arm for arm in job(job_name).arms
             if arm.arch == arch and all(_matches(model_cfg, k, v) for k, v in arm.model_flags.items())]
    return max(found, key=lambda arm: len(arm.model_flags)).name if found else None
