"""``fairseq-longmem prep TOPIC COMMAND``: the Python stages of the data-prep pipelines.

The bash pipelines in ``data-prep/`` (docs/data-preparation.md) call these; each topic is a
module of :mod:`fairseq_plugins.lab.data` with its own argparse
(``fairseq-longmem prep TOPIC --help``). Bad input raises
:class:`~fairseq_plugins.errors.ConfigError`, printed as one line
``fairseq-longmem prep TOPIC: error: ...`` (the pipelines show it under their own name).
"""

import importlib
from typing import Dict, List, Optional, Tuple

# topic -> (module, one-line help)
TOPICS: Dict[str, Tuple[str, str]] = {
    "lm": ("fairseq_plugins.lab.data.lm", "prepare-lm.sh: state, convert, tokenize, finish"),
    "gpt2": ("fairseq_plugins.lab.gpt2.bpe", "prepare-lm.sh --bpe gpt2: state, encode, finish"),
    "summarization": ("fairseq_plugins.lab.data.summarization",
                      "prepare-summarization.sh: state, fetch-aclsum, convert, tokenize, finish"),
    "sorting": ("fairseq_plugins.lab.sorting.data", "make-sorting.sh: state, generate, write-dict, finish"),
    "recall": ("fairseq_plugins.lab.recall.data", "make-recall.sh: state, generate, write-dict, finish"),
    "mqar": ("fairseq_plugins.lab.mqar.data", "fairseq_plugins/lab/mqar/mqar.sh's data: state, generate, write-dict, finish"),
    "spm": ("fairseq_plugins.lab.data.spm", "sentencepiece train / encode (the pipelines' settings)"),
}


def _usage(prog: str) -> str:
    width = max(len(t) for t in TOPICS)
    lines = [f"usage: {prog} TOPIC COMMAND [options]   ({prog} TOPIC --help)", "",
             "The Python stages of the data-prep pipelines (data-prep/*.sh). Topics:", ""]
    return "\n".join(lines + [f"  {t:<{width}}  {h}" for t, (_, h) in TOPICS.items()])


def main(argv: List[str], prog: str) -> Optional[int]:
    """Dispatch ``argv[0]`` (a topic of :data:`TOPICS`) to its module's ``main(argv, prog)``,
    whose ConfigError is printed under ``PROG TOPIC``."""
    from fairseq_plugins.errors import ConfigError

    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(prog))
        return 0 if argv else 2
    topic, rest = argv[0], argv[1:]
    if topic not in TOPICS:
        raise ConfigError(f"unknown topic '{topic}'; choose from {', '.join(TOPICS)} ({prog} --help)")
    from fairseq_plugins.lab.common.cli import run_command

    return run_command(importlib.import_module(TOPICS[topic][0]).main, rest, f"{prog} {topic}")
