"""What the two recall experiments share: recall by distance (:mod:`fairseq_plugins.lab.recall`,
docs/results/recall.md) and multi-query associative recall (:mod:`fairseq_plugins.lab.mqar`,
docs/results/mqar.md). Each is a generated data set, a checkpoint's answers scored on it and a table
over arms and training seeds; this module holds the parts that are the same for both, named by the
experiment's ``task`` (``"recall"``, ``"mqar"``: its arm job, its result files ``TASK.json`` /
``TASK-wiped.json``, its command ``fairseq-longmem TASK`` and its recipe ``scripts/TASK.sh``).

* data-prep stages (``fairseq-longmem prep TASK COMMAND``): :func:`run_stages` (the four commands
  ``state``, ``generate``, ``write-dict``, ``finish`` and their common options),
  :func:`window_multiples` (an option of multiples of the window W), :func:`stage_outputs`,
  :func:`read_records`, :func:`write_manifest`;
* results over arms and seeds (``fairseq-longmem TASK table``): :func:`collect_results`,
  :func:`arm_rows`, :func:`seed_cells`, :func:`seed_interval`, :func:`interval_text`,
  :func:`write_table`;
* the command line ``fairseq-longmem TASK score | table | plot``: :func:`run_topic`, with
  :func:`add_score_verb` and :func:`score_verb` for the task's own ``score``.

Every refusal is a :class:`~fairseq_plugins.errors.ConfigError` (one line, exit 2). What a function
alone needs (fairseq, the intervals, the table writer, the task's own modules) it imports when called.
"""

import argparse
import glob
import importlib
import json
import logging
import os
import re
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import cli
from fairseq_plugins.lab.common.files import write_json

Verb = Callable[[argparse.Namespace, str, List[str]], None]  # (args, prog, argv)


# ----------------------------------------------------------------------------- data-prep stages

STAGES = (("state", "is OUT up to date / may it be rebuilt"),
          ("generate", "write RAW/{train,valid,test}.txt and .jsonl"),
          ("write-dict", "write the fixed fairseq dictionary"),
          ("finish", "check the binarized splits, write OUT/manifest.json"))


def window_multiples(text: str, option: str, example: str, value: Callable[[str, float], Tuple[float, str]],
                     twice: Callable[[float], str]) -> List[Tuple[float, str]]:
    """An option of multiples m of the window (``text``: numbers separated by spaces or commas) as
    ``value(word, m)`` of each, ``(number it is compared by, text)`` pairs, ascending.

    Args:
        option: the option's name in the messages (``--distances``).
        example: the example of the first message (``0.5 1 2``).
        value: each word and its number -> the pair; raises ConfigError for a value out of range.
        twice: the message for a number two words share.
    Raises:
        ConfigError: a word that is no number, ``value``'s refusal, no words, a number given twice.
    """
    pairs = []
    for word in text.replace(",", " ").split():
        try:
            m = float(word)
        except ValueError:
            raise ConfigError(f"{option} takes multiples of the window (e.g. \"{example}\"), not '{word}'") from None
        pairs.append(value(word, m))
    if not pairs:
        raise ConfigError(f"{option} needs at least one multiple of the window (e.g. \"0.5 1 2 4\")")
    numbers = [n for n, _ in pairs]
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise ConfigError(twice(repeated[0]))
    return sorted(pairs)


def stage_outputs(splits: Sequence[str]) -> List[str]:
    """The files of a finished build, relative to OUT: the dictionary, each split's text and records
    (``raw/``) and its binarized form (``bin/``)."""
    files = ["dict.txt", "bin/dict.txt"]
    for s in splits:
        files += [f"raw/{s}.txt", f"raw/{s}.jsonl", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def read_records(raw: str, split: str) -> List[Dict]:
    """The records ``raw/{split}.jsonl`` (one JSON object per line, one per example)."""
    with open(os.path.join(raw, f"{split}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_manifest(out: str, name: str, manifest: Dict) -> int:
    """Write ``manifest`` with ``fairseq_data`` (OUT/bin, real path) to ``OUT/name`` (the build's last
    file) and print the data folder fairseq-train reads; returns 0, the stage's exit status."""
    manifest = {**manifest, "fairseq_data": os.path.join(os.path.realpath(out), "bin")}
    write_json(os.path.join(out, name), manifest)
    print(f"fairseq-train data: {manifest['fairseq_data']}")
    return 0


def run_stages(argv: Sequence[str], prog: str, doc: str, stages: Dict[str, Callable], layout: Callable,
               add_options: Callable[[argparse.ArgumentParser], None],
               check: Callable[[argparse.Namespace], None], dict_needs_out: bool = True) -> int:
    """``PROG COMMAND``: parse the stage and its options, check them, run ``stages[COMMAND](args,
    layout(args))`` and return its exit status.

    Every command takes ``--out`` (``write-dict`` too when ``dict_needs_out``), the task's options
    (``add_options``) and ``--seed``; ``state`` adds ``--force``, ``generate`` ``--raw``, ``write-dict``
    ``--path``. The description is ``doc``'s first line.

    Raises:
        ConfigError: ``check``'s refusal, a negative ``--seed``, the layout's or the stage's refusal.
    """
    p = cli.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, help_ in STAGES:
        q = sub.add_parser(name, help=help_)
        q.add_argument("--out", required=dict_needs_out or name != "write-dict", help="output folder")
        add_options(q)
        q.add_argument("--seed", type=int, required=True, help="random seed")
        if name == "state":
            q.add_argument("--force", action="store_true", help="rebuild whatever OUT holds")
        if name == "generate":
            q.add_argument("--raw", required=True, help="folder for the text files")
        if name == "write-dict":
            q.add_argument("--path", required=True, help="dict.txt to write")
    args = p.parse_args(argv)
    check(args)
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0, not {args.seed}")
    return stages[args.cmd](args, layout(args))


# ----------------------------------------------------------------------------- results over arms and seeds


def result_files(task: str) -> Tuple[Tuple[str, bool], ...]:
    """``((file, memory wiped), ...)``: the scores one seed's folder holds."""
    return ((f"{task}.json", False), (f"{task}-wiped.json", True))


def collect_results(run_dir: str, task: str, shared: Sequence[str], data_name: str) -> List[Dict]:
    """Every ``RUN_DIR/ARM/seedS/TASK[-wiped].json`` as ``{"arm", "seed", "memory_wiped", "path",
    "result"}``, in path order.

    Args:
        shared: the result keys every file must agree on (they were scored on the same data).
        data_name: the data in the message for files that disagree (``recall data``).
    Raises:
        ConfigError: none there, a file that is not JSON, or results scored on different data.
    """
    files = dict(result_files(task))
    found = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*", "seed*", f"{task}*.json"))):
        seed_dir = os.path.dirname(path)
        match = re.fullmatch(r"seed(\d+)", os.path.basename(seed_dir))
        wiped = files.get(os.path.basename(path))
        if match is None or wiped is None:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not JSON ({e}); score that run again "
                              f"(fairseq-longmem {task} score)") from None
        found.append({"arm": os.path.basename(os.path.dirname(seed_dir)), "seed": int(match.group(1)),
                      "memory_wiped": wiped, "path": path, "result": result})
    if not found:
        raise ConfigError(f"no {run_dir}/ARM/seedS/{task}.json found; "
                          f"run fairseq_plugins/lab/{task}/{task}.sh --out {run_dir} first")
    for key in shared:
        other = next((r for r in found if r["result"].get(key) != found[0]["result"].get(key)), None)
        if other is not None:
            raise ConfigError(f"{found[0]['path']} and {other['path']} were scored on different data ({key} "
                              f"{found[0]['result'].get(key)!r} and {other['result'].get(key)!r}); score every run "
                              f"on the same {data_name}")
    return found


def arm_rows(found: List[Dict], task: str) -> List[Tuple[Dict, List[Dict]]]:
    """``[(row, runs)]``, one per arm and memory state of :func:`collect_results`'s ``found``: arms in
    the registry order of job ``task`` (others after them, by name), each memory-wiped row after its
    arm's; ``row`` is ``{"arm", "label", "memory_wiped", "seeds"}``, ``runs`` its results by seed."""
    from fairseq_plugins.lab.common import arms as arm_registry
    from fairseq_plugins.lab.common.table import order_key

    order = arm_registry.names(task)
    out = []
    for arm, wiped in sorted({(r["arm"], r["memory_wiped"]) for r in found},
                             key=lambda k: (order_key(order, k[0]), k[1])):
        runs = sorted((r for r in found if r["arm"] == arm and r["memory_wiped"] == wiped), key=lambda r: r["seed"])
        out.append(({"arm": arm, "label": f"{arm}, memory wiped" if wiped else arm, "memory_wiped": wiped,
                     "seeds": [r["seed"] for r in runs]}, runs))
    return out


def seed_cells(runs: List[Dict], part: str, key: str, value) -> Dict[int, Dict]:
    """``{seed: cell}``: per run the cell of ``result[part]`` (a list of dicts) whose ``key`` is
    ``value``, for the runs that have one with an accuracy (not None)."""
    cells = {}
    for r in runs:
        cell = next((c for c in r["result"][part] if c[key] == value), None)
        if cell is not None and cell["accuracy"] is not None:
            cells[r["seed"]] = cell
    return cells


def seed_interval(per_seed: Dict[int, float], level: float) -> Dict:
    """``{"mean", "low", "high", "per_seed"}``: the mean of the per-seed values with its t-interval
    over the seeds at ``level`` (:func:`~fairseq_plugins.lab.common.intervals.t_interval`; low and high
    None with one seed)."""
    from fairseq_plugins.lab.common.intervals import t_interval

    mean, low, high = t_interval(list(per_seed.values()), level)
    return {"mean": mean, "low": low, "high": high, "per_seed": per_seed}


def interval_text(cell: Dict) -> str:
    """A table cell: ``mean [low, high]`` (three decimals), or the mean alone without an interval."""
    if cell["low"] is None:
        return f"{cell['mean']:.3f}"
    return f"{cell['mean']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}]"


def write_table(run_dir: str, summarize: Callable[[str], Dict], markdown_table: Callable[[Dict], str],
                out_md: Optional[str] = None, out_json: Optional[str] = None) -> str:
    """``markdown_table(summarize(run_dir))``, written to ``out_md`` (default RUN_DIR/results.md) and
    returned, and the summary as JSON (sorted keys) to ``out_json`` (default RUN_DIR/results.json);
    each file whole or not at all.

    Raises:
        ConfigError: ``summarize``'s refusal (no results under RUN_DIR, results of different data).
    """
    from fairseq_plugins.lab.common.table import write_files

    summary = summarize(run_dir)
    md = markdown_table(summary)
    write_files(out_md or os.path.join(run_dir, "results.md"), md, out_json or os.path.join(run_dir, "results.json"),
                summary, sort_keys=True)
    return md


# ----------------------------------------------------------------------------- the command line


def add_score_verb(verbs, verb_help: str, data_help: str, split_help: str, count: Callable[[str], int],
                   max_examples: Dict, json_help: str, arm_help: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``score`` verb's parser: ``--checkpoint``, ``--data``, ``--memory-wiped``, ``--arm`` (with
    ``arm_help`` only), ``--split``, ``--max-examples``, ``--batch-size``, ``--json``, ``--force``, ``--gpu``.

    Args:
        verb_help, data_help, split_help, json_help, arm_help: the help of the verb and those options.
        count: the argparse ``type`` of ``--max-examples`` and ``--batch-size``.
        max_examples: ``--max-examples``'s other keywords (its ``help``, a ``metavar``).
    """
    s = verbs.add_parser("score", help=verb_help)
    s.add_argument("--checkpoint", required=True, help="fairseq checkpoint (.pt)")
    s.add_argument("--data", required=True, help=data_help)
    s.add_argument("--memory-wiped", action="store_true", help="score with the long-term memory wiped")
    if arm_help:
        s.add_argument("--arm", default=None, help=arm_help)
    s.add_argument("--split", default="test", help=split_help)
    s.add_argument("--max-examples", type=count, default=None, **max_examples)
    s.add_argument("--batch-size", type=count, default=16, help="examples per forward call [16]")
    s.add_argument("--json", default=None, help=json_help)
    s.add_argument("--force", action="store_true", help="replace an earlier result at --json")
    s.add_argument("--gpu", action="store_true", help="use CUDA when available")
    return s


def score_verb(args: argparse.Namespace, prog: str, argv: List[str], score: Callable[[], Dict],
               line: Callable[[Dict], str]) -> None:
    """The ``score`` verb: refuse a ``--json`` place first (a missing folder; an earlier result without
    ``--force``), then ``score()`` with fairseq's loading messages quiet, add ``score_seconds`` and
    ``train_seconds``, print ``ARM[ (memory wiped)]: line(result)`` and, with ``--json``, write the
    result with its provenance (``args``: ``checkpoint``, ``json``, ``force``).

    Raises:
        ConfigError: the ``--json`` place refused, or ``score``'s refusal.
    """
    from fairseq_plugins.lab.common.answers import train_seconds
    from fairseq_plugins.lab.common.files import (check_out_folder, provenance, refuse_existing, text_writer,
                                                  write_atomically)
    from fairseq_plugins.lab.common.table import to_json

    if args.json:
        check_out_folder(os.path.dirname(os.path.abspath(args.json)), "--json")
        refuse_existing([args.json], args.force, option="--force", where="--json")
    for name in ("fairseq", "fairseq_plugins"):  # loading a checkpoint is not news here
        logging.getLogger(name).setLevel(logging.WARNING)
    t0 = time.time()
    r = score()
    r["score_seconds"] = round(time.time() - t0, 1)
    r["train_seconds"] = train_seconds(args.checkpoint)
    print(f"{r['arm']}{' (memory wiped)' if r['memory_wiped'] else ''}: {line(r)}")
    if args.json:
        r["provenance"] = provenance(prog, argv, [args.checkpoint])
        write_atomically({args.json: text_writer(to_json(r, sort_keys=True))})


def _add_results_verbs(verbs, recipe: str, table_help: str, plot_help: str) -> None:
    """The ``table`` (RUN_DIR, ``--out-md``, ``--out-json``) and ``plot`` (RUN_DIR, ``--out``) verbs;
    RUN_DIR is the output folder of ``recipe``."""
    t = verbs.add_parser("table", help=table_help)
    t.add_argument("run_dir", metavar="RUN_DIR", help=f"output folder of {recipe}")
    t.add_argument("--out-md", default=None, help="markdown table [RUN_DIR/results.md]")
    t.add_argument("--out-json", default=None, help="JSON summary [RUN_DIR/results.json]")
    f = verbs.add_parser("plot", help=plot_help)
    f.add_argument("run_dir", metavar="RUN_DIR", help=f"output folder of {recipe}")
    f.add_argument("--out", default=None, help="the figure [RUN_DIR/accuracy.png]")


def _results_verbs(package: str, recipe: str) -> Dict[str, Verb]:
    """``{"table", "plot"}`` of an experiment ``package`` whose ``table`` module has ``table(run_dir,
    out_md, out_json) -> str`` and ``summarize(run_dir)`` and whose ``plot`` module has ``plot(summary,
    path)``, imported when the verb runs. ``table`` prints the table; ``plot`` writes ``--out``
    (default RUN_DIR/accuracy.png) and prints ``wrote PATH``.

    Raises (when run):
        ConfigError: RUN_DIR is not a folder (``plot``), or the table's refusal.
    """
    def table(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
        module = importlib.import_module(f"{package}.table")
        print(module.table(args.run_dir, args.out_md, args.out_json), end="")

    def plot(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
        figure = importlib.import_module(f"{package}.plot")
        summarize = importlib.import_module(f"{package}.table").summarize
        if not os.path.isdir(args.run_dir):
            raise ConfigError(f"{args.run_dir} is not a folder; pass the output folder of {recipe}")
        path = args.out or os.path.join(args.run_dir, "accuracy.png")
        figure.plot(summarize(args.run_dir), path)
        print(f"wrote {path}")

    return {"table": table, "plot": plot}


def run_topic(argv: List[str], prog: str, doc: str, task: str, add_score: Callable[[object], None], score: Verb,
              table_help: str, plot_help: str) -> int:
    """``PROG VERB``: the topic of experiment ``task`` (package ``fairseq_plugins.lab.TASK``, recipe
    ``scripts/TASK.sh``), its verbs ``score`` (``add_score(verbs)`` declares it, e.g. with
    :func:`add_score_verb`; ``score(args, prog, argv)`` runs it), ``table`` and ``plot`` (the package's
    ``table.table``, ``table.summarize`` and ``plot.plot``, imported when run). ``doc`` gives the
    parser's description (its first line) and epilog (the rest).

    Returns the exit status: a ConfigError is one line ``PROG VERB: error: ...`` (2), an unknown
    option one line from the verb's parser (2).
    """
    recipe = f"fairseq_plugins/lab/{task}/{task}.sh"
    parser, verbs = cli.topic_parser(prog, doc)
    add_score(verbs)
    _add_results_verbs(verbs, recipe, table_help, plot_help)
    run = {"score": score, **_results_verbs(f"fairseq_plugins.lab.{task}", recipe)}
    args = cli.parse_verb_args(parser, argv)
    return cli.run_command(lambda _argv, _prog: run[args.verb](args, prog, argv), [], f"{prog} {args.verb}")
