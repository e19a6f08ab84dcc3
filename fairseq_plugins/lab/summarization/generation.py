"""Around fairseq-generate for summaries (scripts/generate-summaries.sh, docs/summarization.md#decoding):
the task options a checkpoint was trained with, and the hypotheses of its output in data order.

Generation must cut sources exactly as training did, so the task options that decide which
source tokens the model sees are read from the checkpoint (:func:`task_args`). fairseq-generate
prints its hypotheses in batch order; ``hyp.txt`` holds them in example order, one per line,
every example exactly once (:func:`write_hypotheses`).
"""

from typing import Dict, List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import write_atomically
from fairseq_plugins.lab.summarization.lengths import sizes, split_prefix
from fairseq_plugins.lab.summarization.lines import count_lines, lines_writer


def task_args(checkpoint: str) -> List[str]:
    """fairseq-generate's ``--source-lang``, ``--target-lang``, ``--max-source-positions``,
    ``--max-target-positions`` (and ``--truncate-source``) of a ``translation`` checkpoint, read
    with torch's safe loader (fairseq's ``argparse.Namespace`` allow-listed, nothing else:
    :func:`fairseq_plugins.lab.common.checkpoints.read_state`).

    Raises:
        ConfigError: the file is missing or cannot be read (truncated, corrupt: it is left as
            it is), a torch file that is no fairseq checkpoint, or its task is not ``translation``.
    """
    from fairseq_plugins.lab.common.checkpoints import read_state

    state = read_state(checkpoint, option="CHECKPOINT")
    cfg = state.get("cfg") or {}
    task = cfg.get("task") or {}
    if task.get("_name") != "translation":
        raise ConfigError(f"{checkpoint} was trained with task {task.get('_name')!r}, not translation (use a "
                          f"checkpoint from scripts/train-summarizer.sh)")
    args = ["--source-lang", task["source_lang"], "--target-lang", task["target_lang"],
            "--max-source-positions", str(task["max_source_positions"]),
            "--max-target-positions", str(task["max_target_positions"])]
    if task.get("truncate_source"):
        args.append("--truncate-source")
    return args


def read_hypotheses(generate_out: str, n: int) -> List[str]:
    """The detokenized hypotheses of fairseq-generate's output ``generate_out`` (its
    ``D-<id>\\t<score>\\t<text>`` lines) for examples ``0 .. n-1``, in id order.

    Raises:
        ConfigError: an example has two hypotheses (``--nbest`` > 1), or one has none.
    """
    hyps: Dict[int, str] = {}
    with open(generate_out, encoding="utf-8") as f:
        for line in f:
            if line.startswith("D-"):
                parts = line.rstrip("\n").split("\t", 2)
                i, text = int(parts[0][2:]), (parts[2] if len(parts) > 2 else "")
                if i in hyps:
                    raise ConfigError(f"example {i} has two hypotheses in {generate_out} (use --nbest 1)")
                hyps[i] = text
    missing = [i for i in range(n) if i not in hyps]
    if missing or len(hyps) != n:
        raise ConfigError(f"{len(missing)} of {n} examples have no hypothesis in {generate_out} "
                          f"(first ids {missing[:5]})")
    return [hyps[i].replace("\n", " ") for i in range(n)]


def write_hypotheses(generate_out: str, data: str, split: str, out: str, ref: Optional[str] = None) -> int:
    """Write the hypotheses of ``generate_out`` to ``out`` (one per line, example order), whole
    or not at all, after checking that ``ref`` (the raw references, if given) has one line per
    example of ``DATA/SPLIT``. Returns the number of examples.

    Raises:
        ConfigError: the split is missing, ``ref`` has another line count, or a hypothesis is
            missing or repeated (:func:`read_hypotheses`); nothing is written then.
    """
    n = len(sizes(split_prefix(data, split) + ".source"))
    if ref is not None:
        lines = count_lines(ref)
        if lines != n:
            raise ConfigError(f"{ref} has {lines} lines but {data} holds {n} {split} examples (data folder out "
                              f"of sync?)")
    hyps = read_hypotheses(generate_out, n)
    write_atomically({out: lines_writer(hyps)})
    return n
