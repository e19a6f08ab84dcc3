"""``fairseq-longmem arms``: the experiment arms (:mod:`fairseq_plugins.lab.common.arms`): run one, or query them.

    fairseq-longmem arms train JOB ARM DATA SAVE_DIR [fairseq-train options...]
    fairseq-longmem arms eval JOB ARM DATA CHECKPOINT [fairseq-eval-lm options...]
    fairseq-longmem arms list JOB [--default] [--join or|comma]
    fairseq-longmem arms check JOB --arms="ARM ..." [--prog P] [--what arm] [--join or|comma]
    fairseq-longmem arms budget JOB [--one-line] [--unchecked]
    fairseq-longmem arms train-args JOB ARM --save-dir DIR [--root ROOT] [--cpu] [--prog P]
    fairseq-longmem arms eval-args JOB ARM --checkpoint CKPT [--root ROOT] [--cpu] [--prog P]
    fairseq-longmem arms extra-train-args JOB ARM
    fairseq-longmem arms lengths-args JOB ARM [--prog P]
    fairseq-longmem arms get JOB ARM FIELD
    fairseq-longmem arms seeds LIST [--prog P]

``train`` and ``eval`` run fairseq-train / fairseq-eval-lm once, in this process, on the arm's
command line (the job's budget from the environment, ``--cpu`` when torch sees no CUDA device,
the options given last; fairseq_plugins.lab.common.fairseq_tools.run_tool): they write what the fairseq
tool writes (checkpoints in SAVE_DIR; the log on stdout/stderr without fairseq's setup messages,
``QUIET=0`` shows them) and exit with its status. The other verbs print to stdout, one item per
line unless ``--join``/``--one-line``, and write no file; ``train-args``/``eval-args`` print the
options of the same run as typed after DATA on fairseq's own command line (``--user-dir`` first).
Bad input (an unknown job, arm or field, a bad budget variable) is one line ``PROG: error: ...``
with exit status 2, PROG being ``--prog`` (the recipe that asked).
"""

import argparse
import os
import re
import sys
from typing import List, Optional

import fairseq_plugins
from fairseq_plugins.lab.common.cli import topic_parser
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.arms import (budget, eval_args, eval_options, get_arm, job, joined, lengths_args,
                                              names, train_args, train_options)
from fairseq_plugins.lab.common.seeds import parse_seeds

# the checkout that holds the package (--user-dir ROOT/fairseq_plugins of train-args and eval-args)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fairseq_plugins.__file__)))


def _print_args(args: List[str]) -> None:
    for a in args:
        if "\n" in a:
            raise ConfigError(f"an argument holds a line break ({a!r}); rename the file or folder")
    if args:  # none: no line (an empty line would be one empty argument to a reader of lines)
        print("\n".join(args))


def _parser(prog: str) -> argparse.ArgumentParser:
    p, sub = topic_parser(prog, __doc__)
    for verb, tool, last in (("train", "fairseq-train", "save_dir"), ("eval", "fairseq-eval-lm", "checkpoint")):
        s = sub.add_parser(verb, help=f"run {tool} on one arm in this process (writes what {tool} writes)")
        s.add_argument("job")
        s.add_argument("arm")
        s.add_argument("data", help="the binarized data folder")
        s.add_argument(last, metavar=last.upper(), help="where checkpoints go" if verb == "train"
                       else "the checkpoint to evaluate")
        s.add_argument("options", nargs=argparse.REMAINDER, help=f"{tool} options, after the arm's (they override them)")
    s = sub.add_parser("list", help="the arm names of a job, one per line")
    s.add_argument("job")
    s.add_argument("--default", action="store_true", help="only the arms a script runs by default")
    s.add_argument("--join", choices=["or", "comma"], help="one line: 'a, b or c' or 'a, b, c'")
    s = sub.add_parser("check", help="exit 2 with one line unless every arm in --arms is an arm of the job")
    s.add_argument("job")
    s.add_argument("--arms", default="", help="the arm names, separated by spaces (pass as --arms=\"$ARMS\")")
    s.add_argument("--what", default="arm", help="the word for an arm in the message [arm]")
    s.add_argument("--join", choices=["or", "comma"], default="or", help="how the message lists the arms")
    s = sub.add_parser("budget", help="the job's budget variables NAME=value (environment or default)")
    s.add_argument("job")
    s.add_argument("--one-line", action="store_true", help="space-separated on one line")
    s.add_argument("--unchecked", action="store_true", help="print the values as they are, even if invalid")
    for cmd in ("train-args", "eval-args"):
        s = sub.add_parser(cmd, help=f"fairseq-{'train' if cmd == 'train-args' else 'eval-lm'} options, one per line")
        s.add_argument("job")
        s.add_argument("arm")
        s.add_argument("--root", default=ROOT, help="the checkout that holds fairseq_plugins (for --user-dir) [%(default)s]")
        s.add_argument("--save-dir" if cmd == "train-args" else "--checkpoint", required=True)
        s.add_argument("--cpu", action="store_true", help="add --cpu")
    s = sub.add_parser("extra-train-args", help="the job's own extra fairseq-train options for an arm")
    s.add_argument("job")
    s.add_argument("arm")
    s = sub.add_parser("lengths-args", help="the source and target length limits of a summarization arm")
    s.add_argument("job")
    s.add_argument("arm")
    s = sub.add_parser("get", help="one field of an arm (task, arch, criterion, label, description, ...)")
    s.add_argument("job")
    s.add_argument("arm")
    s.add_argument("field")
    s = sub.add_parser("seeds", help="a recipe's --seeds list checked, one seed per line (a seed given twice, "
                                     "or one that is not an integer: one line)")
    s.add_argument("seeds", metavar="LIST", help="seeds separated by commas or spaces, e.g. 1,2,3")
    # a LIST that starts with a minus sign ("-1,2") is the list, not an option: its check names it
    s._negative_number_matcher = re.compile(r"^-\d[\d,\s-]*$")
    for s in sub.choices.values():
        s.add_argument("--prog", help="the recipe's name for error messages")
    return p


def main(argv: List[str], prog: str) -> Optional[int]:
    """Answer one query of the arms registry (see the module docstring)."""
    from fairseq_plugins.lab.common.cli import recipe_prog, run_command

    # argparse's own errors carry the recipe's name too (--prog), not this internal command's
    args = _parser(recipe_prog(argv, prog)).parse_args(argv)
    # the recipe that asked (--prog) names itself in a one-line error
    return run_command(lambda _argv, _prog: _answer(args), [], args.prog or prog)


def _run(args: argparse.Namespace) -> int:
    """``arms train`` / ``arms eval``: the arm's fairseq tool, once, in this process."""
    import torch

    from fairseq_plugins.lab.common.fairseq_tools import run_tool

    cpu = not torch.cuda.is_available()
    if args.verb == "train":
        options = [*train_options(args.job, args.arm, args.save_dir, cpu), *args.options]
        if _finished(args, options):
            return 0
        return run_tool("train", [args.data, *options])
    return run_tool("eval-lm", [args.data, *eval_options(args.job, args.arm, args.checkpoint, cpu), *args.options])


def _finished(args: argparse.Namespace, options: List[str]) -> bool:
    """Whether the arm's save folder holds a checkpoint that has done its ``--max-update`` (the
    last one given) already; then it says so on stderr. fairseq resumed there would train one
    more update at the learning rate the schedule left, changing a finished checkpoint.

    Raises:
        ConfigError: the checkpoint there is another model's (another ``--arch``, or other sizes).
    """
    from fairseq_plugins.compat.checkpoint_files import RESUME_DEFAULT, saved_run

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--max-update", type=int, default=0)
    parser.add_argument("--restore-file", default=RESUME_DEFAULT)
    parser.add_argument("--arch", "-a")
    given, rest = parser.parse_known_args(options)  # the last of each wins, as in fairseq-train
    if given.restore_file != RESUME_DEFAULT:
        return False
    last = os.path.join(args.save_dir, RESUME_DEFAULT)
    saved = saved_run(last)
    if saved is None:
        return False
    done, model = saved
    differ = _model_differences(model, given.arch, rest)
    if differ:
        raise ConfigError(f"{last} holds another model than {args.arm} ({'; '.join(differ)}): give {args.arm} a save "
                          f"folder of its own, or move that checkpoint away")
    if given.max_update <= 0 or done is None or done < given.max_update:
        return False
    print(f"{args.prog or 'arms train'}: {args.arm} is trained: {last} is at update {done} of --max-update "
          f"{given.max_update}; nothing to do (raise MAX_UPDATE to train on)", file=sys.stderr)
    return True


def _model_differences(model: dict, arch: Optional[str], options: List[str]) -> List[str]:
    """What the saved ``model`` config has otherwise than the command line: its architecture, and
    every integer size option (``--decoder-embed-dim 128``, ...) it records with another value."""
    differ = []
    if arch and model.get("_name") and model["_name"] != arch:
        differ.append(f"--arch {model['_name']}, not {arch}")
    for option, value in zip(options, options[1:]):
        key = option[2:].replace("-", "_") if option.startswith("--") else None
        saved = model.get(key) if key else None
        if isinstance(saved, int) and not isinstance(saved, bool) and value.lstrip("-").isdigit() \
                and int(value) != saved:
            differ.append(f"{option} {saved}, not {value}")
    return differ


def _answer(args: argparse.Namespace) -> int:
    if args.verb in ("train", "eval"):
        return _run(args)
    if args.verb == "list":
        arms = names(args.job, args.default)
        print(joined(arms, args.join) if args.join else "\n".join(arms))
    elif args.verb == "check":
        if not args.arms.split():
            raise ConfigError(f"--arms needs at least one {args.what} ({joined(names(args.job), args.join)})")
        for name in args.arms.split():
            get_arm(args.job, name, args.what, args.join)
    elif args.verb == "budget":
        items = [f"{k}={v}" for k, v in budget(args.job, check=not args.unchecked).items()]
        print(" ".join(items) if args.one_line else "\n".join(items))
    elif args.verb == "train-args":
        _print_args(train_args(args.job, args.arm, args.root, args.save_dir, args.cpu))
    elif args.verb == "eval-args":
        _print_args(eval_args(args.job, args.arm, args.root, args.checkpoint, args.cpu))
    elif args.verb == "extra-train-args":
        _print_args(job(args.job).extra(get_arm(args.job, args.arm)))
    elif args.verb == "lengths-args":
        _print_args(lengths_args(args.job, args.arm))
    elif args.verb == "seeds":
        print("\n".join(parse_seeds(args.seeds)))
    else:
        arm = get_arm(args.job, args.arm)
        fields = ("label", "task", "arch", "criterion", "description", "max_source", "truncate_source", "has_memory")
        if args.field == "label":
            print(arm.label(budget(args.job, check=False)) or arm.name)  # a table's model column
        elif args.field in fields:
            print(getattr(arm, args.field))
        else:
            raise ConfigError(f"unknown field '{args.field}'; choose from {', '.join(fields)}")
    return 0
