"""``fairseq-longmem bench``: speed and memory of the models (docs/benchmark.md).

    fairseq-longmem bench train     # tokens/s and peak memory against the context (training, forward)
    fairseq-longmem bench generate  # ms per generated token and memory after long prompts
    fairseq-longmem bench paired    # the ∞-former's memory-on ÷ off training speed, in lockstep pairs
    fairseq-longmem bench memory    # the ∞-former's long-term memory cost per segment, part by part
    fairseq-longmem bench gpt2      # transformers' GPT-2 against infinite_former_gpt2, side by side
    fairseq-longmem bench VERB --quick   # tiny sizes: a smoke test of the verb

Each verb runs one measurement and writes OUT/VERB.md (its table), OUT/VERB.json and, for the
verbs with a plot, OUT/VERB.png (``--out``, default runs/benchmark): never another verb's
files, so that the four can share one folder; an earlier run's files of the same verb are replaced
only with ``--force``. The files are written whole or not at all, the JSON records the command
line and versions (``provenance``), and the plot is left out (a stale one of the same verb
removed) when nothing was measured.

The options every verb shares are defined once here (:func:`_run_options`, :func:`_size_options`,
:func:`_precision_options`) and checked once (:func:`_check`); a verb is its library module
(``fairseq_plugins.lab.bench.VERB``, with ``run(args)`` and optionally ``check(args)``, which refuses
bad values of its own options before anything is measured) and one entry of :data:`VERBS`
naming its own options.
"""

import argparse
import importlib
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from fairseq_plugins.lab.common import cli
from fairseq_plugins.errors import ConfigError

OUT = "runs/benchmark"
# --quick: smaller defaults (options given explicitly still win), for the options a verb has
QUICK = dict(windows="128,256", streams="256,1024", segment=64, repeats=2, warmup=1, vocab=500, num_basis=16,
             encoder_lengths="256,512", prompts="128,512")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default, except where there is none (the help says what unset means)."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


# ---- options shared by the verbs ------------------------------------------------------------


def _run_options(p: argparse.ArgumentParser, warmup: bool = True) -> None:
    """Where and how every measurement runs, and where it writes."""
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to measure")
    p.add_argument("--repeats", type=cli.positive_int, default=3,
                   help="timed repeats per measurement (the median is reported)")
    if warmup:
        p.add_argument("--warmup", type=cli.non_negative_int, default=1, help="untimed repeats before them")
    p.add_argument("--timeout", type=cli.positive_float, default=600,
                   help="seconds per measurement (bench paired: this × its streams)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: this process's CPU time, which other jobs on a shared "
                        "machine do not inflate (with --threads 1 it equals the wall clock of an idle core)")
    p.add_argument("--allocator", choices=["cached", "system"], default="cached",
                   help="CPU workers: cached keeps freed memory in the process (glibc's mmap and trim thresholds "
                        "raised, as torch's CUDA caching allocator does on a GPU); system: glibc's defaults, which "
                        "hand every block of 32 MB or more back to the kernel and page-fault it in anew at its "
                        "next use (docs/benchmark.md)")
    p.add_argument("--threads", type=cli.positive_int, default=None,
                   help="torch intra-op threads per measurement (default: torch's choice, one per core); "
                        "1 with `taskset -c 0` keeps the numbers steady when other jobs share the machine")
    p.add_argument("--out", default=OUT, help="folder for this verb's VERB.md, .json and .png (other verbs' "
                                              "files in it are left as they are)")
    p.add_argument("--force", action="store_true", help="replace this verb's files of an earlier run in --out")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the whole pipeline")


def _size_options(p: argparse.ArgumentParser, whole_model: bool = True) -> None:
    """The sizes of the models (``whole_model=False``: of one long-term memory layer)."""
    if whole_model:
        p.add_argument("--layers", type=cli.positive_int, default=2, help="decoder layers of every arm")
    p.add_argument("--width", type=cli.positive_int, default=128, help="model width")
    p.add_argument("--heads", type=cli.positive_int, default=4, help="attention heads")
    if whole_model:
        p.add_argument("--ffn", type=cli.positive_int, default=512, help="feed-forward width")
        p.add_argument("--vocab", type=cli.positive_int, default=8000, help="vocabulary size (output logits)")
    p.add_argument("--num-basis", type=cli.positive_int, default=64, help="∞-former N and M")
    p.add_argument("--segment", type=cli.positive_int, default=512, help="∞-former segment (= short-term memory)")


def _precision_options(p: argparse.ArgumentParser, bf16: bool = True) -> None:
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--fp16", action="store_true", help="half-precision model (CUDA)")
    if bf16:
        precision.add_argument("--bf16", action="store_true", help="bfloat16 autocast")


def _arms_option(p: argparse.ArgumentParser, arms: List[str]) -> None:
    p.add_argument("--arms", default=",".join(arms), help="comma-separated subset of the arms to measure")


def _tokens_per_step(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--tokens-per-step", type=cli.positive_int, default=None, help=what)


# ---- the verbs' own options -------------------------------------------------------------------


def _train(p: argparse.ArgumentParser) -> None:
    from fairseq_plugins.lab.bench.models import arm_names

    _run_options(p)
    _size_options(p)
    _precision_options(p)
    _arms_option(p, arm_names())
    p.add_argument("--modes", default="train,infer",
                   help="comma-separated subset of train (forward + backward) and infer (forward only)")
    p.add_argument("--windows", default="512,1024,2048,4096,8192,16384",
                   help="attention windows of transformer_lm and fastformer_lm")
    p.add_argument("--streams", default="1024,4096,16384,65536", help="stream tokens consumed by the ∞-former")
    _tokens_per_step(p, "train transformer_lm and fastformer_lm on max(1, N ÷ window) sequences per step "
                        "(unset: one sequence)")
    p.add_argument("--transformer-max-window", type=cli.positive_int, default=None,
                   help="skip transformer_lm at windows above this (its cost is quadratic)")
    p.add_argument("--chunk-sizes", default="", help="extra fastformer_lm training rows with these "
                                                     "--attention-chunk-size values, e.g. 16,64")
    p.add_argument("--chunk-windows", default="512,16384", help="windows of the --chunk-sizes rows")
    p.add_argument("--encoder-lengths", default="1024,4096,16384,65536",
                   help="document lengths of the summarizer encoder rows ('' skips them)")
    p.add_argument("--memory-limit-mb", type=cli.positive_float, default=None,
                   help="memory budget of each measurement above the built model and its input, in MB; "
                        "beyond it the row reads OOM. CUDA: torch.cuda.set_per_process_memory_fraction; "
                        "CPU: an address-space limit (RLIMIT_AS) over the worker's size once the model is "
                        "built, so allocations past it fail for real (approximate: it counts address space, "
                        "not resident memory)")


def _generate(p: argparse.ArgumentParser) -> None:
    from fairseq_plugins.lab.bench.generate import generating_arms

    _run_options(p)
    _size_options(p)
    _precision_options(p, bf16=False)
    _arms_option(p, generating_arms())
    p.add_argument("--prompts", default="1024,4096,16384,65536", help="prompt lengths")
    p.add_argument("--gen-tokens", type=cli.positive_int, default=32, help="timed greedy tokens after the prompt")
    p.add_argument("--token-prefill-max", type=cli.positive_int, default=16384,
                   help="longest prompt for the arms that read it token by token")


def _paired(p: argparse.ArgumentParser) -> None:
    _run_options(p)
    _size_options(p)
    _precision_options(p)
    p.add_argument("--paired-segments", type=cli.positive_int, default=16,
                   help="segments per pass (the first of each pass, which has no memory yet, untimed)")
    p.add_argument("--paired-streams", default=None,
                   help="comma-separated streams per step (default: 1, and with --tokens-per-step N also "
                        "N ÷ segment: the tokens per step of bench train's transformer_lm and fastformer_lm rows)")
    _tokens_per_step(p, "also pair N ÷ segment streams per step (unless --paired-streams is given)")
    p.add_argument("--memory-read", default="location", choices=["location", "content", "mixture"],
                   help="the ∞-former's read of its long-term memory (docs/infinite-former.md)")
    p.add_argument("--paired-against", default="off", choices=["off", "location", "content", "mixture"],
                   help="the other member of each pair: 'off' (the twin without the long-term memory) or the "
                        "same model with this read (the ratio is then this read's time ÷ --memory-read's)")
    p.add_argument("--paired-model", default="lm", choices=["lm", "summarizer"],
                   help="lm: the ∞-former language model, segment by segment; summarizer: infinite_former_summarizer, "
                        "one training update per step (--segment: its chunk length and lead window)")
    p.add_argument("--doc-length", type=int, default=4096, help="summarizer: document tokens")
    p.add_argument("--summary-length", type=int, default=8, help="summarizer: summary tokens")


def _gpt2(p: argparse.ArgumentParser) -> None:
    from fairseq_plugins.lab.bench.gpt2 import DEFAULTS as D, PARTS
    from fairseq_plugins.lab.bench.gpt2_models import ARMS

    _run_options(p)
    p.set_defaults(timeout=D["timeout"])
    p.add_argument("--layers", type=cli.positive_int, default=D["layers"], help="GPT-2 layers (n_layer)")
    p.add_argument("--width", type=cli.positive_int, default=D["width"],
                   help="GPT-2 width (n_embd; the FFN is 4 × width)")
    p.add_argument("--heads", type=cli.positive_int, default=D["heads"], help="attention heads (n_head)")
    p.add_argument("--vocab", type=cli.positive_int, default=D["vocab"],
                   help="vocabulary (vocab_size; <|endoftext|> is the last id)")
    p.add_argument("--positions", type=cli.positive_int, default=D["positions"],
                   help="position table (n_positions): HF's window; --segment and a prompt plus --gen-tokens fit in it")
    p.add_argument("--num-basis", type=cli.positive_int, default=D["num_basis"], help="∞-former N and M (paper: 512)")
    p.add_argument("--segment", type=cli.positive_int, default=D["segment"],
                   help="block length L: training blocks, and the fairseq model's blocks (at most --positions)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for every model")
    p.add_argument("--models", default=D["models"], help=f"comma-separated subset of {', '.join(ARMS)} (transformers' "
                                                         "GPT2LMHeadModel; infinite_former_gpt2 memory off; memory on)")
    p.add_argument("--parts", default=D["parts"], help=f"comma-separated subset of {', '.join(PARTS)}")
    p.add_argument("--tokens-per-step", type=cli.positive_int, default=D["tokens_per_step"],
                   help="training tokens per step: a whole number of --segment blocks")
    p.add_argument("--prompts", default=D["prompts"], help="prompt lengths (HF's full window is added)")
    p.add_argument("--gen-tokens", type=cli.positive_int, default=D["gen_tokens"],
                   help="timed greedy tokens after each prompt")


def _memory(p: argparse.ArgumentParser) -> None:
    _run_options(p, warmup=False)  # its parts: max(--repeats, 5) timed calls after two untimed
    _size_options(p, whole_model=False)


# verb -> (library module with run(args), one-line help and what it writes, its options)
VERBS: Dict[str, Tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = {
    "train": ("fairseq_plugins.lab.bench.train",
              "tokens/s and peak memory against the context, training and forward only, every arm and the "
              "summarizer encoder; writes OUT/train.md, .json, .png", _train),
    "generate": ("fairseq_plugins.lab.bench.generate",
                 "ms per generated token, incremental state and peak memory after prompts of growing length; "
                 "writes OUT/generate.md, .json, .png", _generate),
    "paired": ("fairseq_plugins.lab.bench.paired",
               "the ∞-former's memory-on ÷ off training speed, both models in one process in lockstep pairs; "
               "writes OUT/paired.md, .json", _paired),
    "memory": ("fairseq_plugins.lab.bench.memory",
               "the ∞-former's long-term memory cost per segment, one layer, part by part (ms); "
               "writes OUT/memory.md, .json", _memory),
    "gpt2": ("fairseq_plugins.lab.bench.gpt2",
             "transformers' GPT-2 against infinite_former_gpt2 (memory off, on) on the same random weights: "
             "training tokens/s, ms per generated token, prompt reads, peak memory; writes OUT/gpt2.md, .json, .png",
             _gpt2),
}


def _parser(prog: str) -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The topic's parser and each verb's."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                epilog="Each verb writes only its own files in --out; "
                                       f"{prog} VERB --help for its options.")
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs = {}
    for verb, (_, help_, options) in VERBS.items():
        verbs[verb] = sub.add_parser(verb, help=help_, description=help_[0].upper() + help_[1:] + ".",
                                     formatter_class=_Help)
        options(verbs[verb])
    return p, verbs


# ---- checks ---------------------------------------------------------------------------------


def _positive_ints(args, name: str) -> List[int]:
    text = getattr(args, name)
    try:
        values = [int(x) for x in str(text).split(",") if x]
    except ValueError:
        values = [0]
    if any(v <= 0 for v in values):
        raise ConfigError(f"--{name.replace('_', '-')} must be positive integers separated by commas, got {text!r}")
    return values


def _check(args, defaults: Dict) -> None:
    """Refuse bad values of the shared options in one line (the numbers' ranges are their argparse
    types'); apply --quick."""
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"--device cuda, but torch sees no CUDA device here (torch {torch.__version__}); run "
                              "on a GPU machine with a CUDA build of torch, or pass --device cpu")
    if args.clock == "cpu" and (args.threads != 1 or args.device != "cpu"):
        raise ConfigError("--clock cpu needs --threads 1 on --device cpu (idle threads of a pool spin and count "
                          "as CPU time)")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out} is a file; give a folder (the verb writes {args.verb}.md, .json there)")
    from fairseq_plugins.lab.common.files import refuse_existing

    refuse_existing([os.path.join(args.out, f"{args.verb}.{ext}") for ext in ("md", "json", "png")], args.force)
    if args.quick:
        for name, value in QUICK.items():
            if hasattr(args, name) and getattr(args, name) == defaults[name]:
                setattr(args, name, value)
    for name in ("windows", "streams", "chunk_sizes", "chunk_windows", "encoder_lengths", "prompts"):
        if hasattr(args, name):
            _positive_ints(args, name)


def main(argv: List[str], prog: str) -> Optional[int]:
    """Parse, check, measure (every measurement in a worker process), write OUT/VERB.*, print the table."""
    parser, verbs = _parser(prog)
    args = parser.parse_args(argv)
    _check(args, {name: verbs[args.verb].get_default(name) for name in QUICK})
    from fairseq_plugins.lab.bench import report
    from fairseq_plugins.lab.common.files import provenance

    from fairseq_plugins.lab.bench import models, worker

    measurement = importlib.import_module(VERBS[args.verb][0])
    if hasattr(measurement, "check"):  # the verb's own checks (ConfigError), before anything is measured
        measurement.check(args)
    if hasattr(measurement, "builders"):  # what a model refuses, refused once before measuring
        models.check_sizes(args)
        models.refuse_unbuildable(measurement.builders(args))
    failed = len(worker.FAILURES)
    result = measurement.run(args)
    written = report.write(args.out, args.verb, result, provenance(prog, argv))
    print(result.table, end="" if result.table.endswith("\n") else "\n")
    print(f"wrote {', '.join(written)}")
    failures = worker.FAILURES[failed:]
    if failures:  # the measured rows are kept; the run still failed
        what, error = failures[0]
        print(f"{prog}: error: {len(failures)} measurement{'s' if len(failures) > 1 else ''} failed (first: {what}: "
              f"{error}); their rows read the error, the others are in {', '.join(written)}", file=sys.stderr)
        return 1
    return 0
