"""``fairseq-longmem arms``: the registry of experiment arms (:mod:`fairseq_plugins.experiments.arms`).

    fairseq-longmem arms list JOB [--default] [--join or|comma]
    fairseq-longmem arms check JOB --arms="ARM ..." [--prog P] [--what arm] [--join or|comma]
    fairseq-longmem arms budget JOB [--one-line] [--unchecked]
    fairseq-longmem arms train-args JOB ARM --root ROOT --save-dir DIR [--cpu] [--prog P]
    fairseq-longmem arms eval-args JOB ARM --root ROOT --checkpoint CKPT [--cpu] [--prog P]
    fairseq-longmem arms extra-train-args JOB ARM
    fairseq-longmem arms lengths-args JOB ARM [--prog P]
    fairseq-longmem arms get JOB ARM FIELD

Prints to stdout, one item per line (for bash's ``mapfile -t``) unless ``--join``/``--one-line``;
writes no file. Bad input (an unknown job, arm or field, a bad budget variable) is one line
``PROG: error: ...`` with exit status 2, PROG being ``--prog`` (the recipe that asked).
"""

import argparse
from typing import List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.experiments.arms import (budget, eval_args, get_arm, job, joined, lengths_args, names,
                                              train_args)


def _print_args(args: List[str]) -> None:
    for a in args:
        if "\n" in a:
            raise ConfigError(f"an argument holds a line break ({a!r}); rename the file or folder")
    print("\n".join(args))


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    sub = p.add_subparsers(dest="cmd", required=True)
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
        s.add_argument("--root", required=True, help="the repository (for --user-dir)")
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
    for s in sub.choices.values():
        s.add_argument("--prog", help="the recipe's name for error messages")
    return p


def main(argv: List[str], prog: str) -> Optional[int]:
    """Answer one query of the arms registry (see the module docstring)."""
    from fairseq_plugins.cli import run_command

    args = _parser(prog).parse_args(argv)
    # the recipe that asked (--prog) names itself in a one-line error
    return run_command(lambda _argv, _prog: _answer(args), [], args.prog or prog)


def _answer(args: argparse.Namespace) -> int:
    if args.cmd == "list":
        arms = names(args.job, args.default)
        print(joined(arms, args.join) if args.join else "\n".join(arms))
    elif args.cmd == "check":
        for name in args.arms.split():
            get_arm(args.job, name, args.what, args.join)
    elif args.cmd == "budget":
        items = [f"{k}={v}" for k, v in budget(args.job, check=not args.unchecked).items()]
        print(" ".join(items) if args.one_line else "\n".join(items))
    elif args.cmd == "train-args":
        _print_args(train_args(args.job, args.arm, args.root, args.save_dir, args.cpu))
    elif args.cmd == "eval-args":
        _print_args(eval_args(args.job, args.arm, args.root, args.checkpoint, args.cpu))
    elif args.cmd == "extra-train-args":
        _print_args(job(args.job).extra(get_arm(args.job, args.arm)))
    elif args.cmd == "lengths-args":
        _print_args(lengths_args(args.job, args.arm))
    else:
        arm = get_arm(args.job, args.arm)
        if args.field == "label":
            print(arm.label(budget(args.job, check=False)))
        elif args.field in ("task", "arch", "criterion", "description", "max_source", "truncate_source"):
            print(getattr(arm, args.field))
        else:
            raise ConfigError(f"unknown field '{args.field}'")
    return 0
