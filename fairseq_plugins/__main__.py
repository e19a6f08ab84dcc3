"""``python -m fairseq_plugins``: the options of every plugin component.

fairseq's ``--help`` is printed before model-, task- and criterion-specific
options are added to its parser, so it never lists them. This prints them,
generated from the same dataclasses fairseq uses, with defaults and help.
"""

import argparse

from fairseq.dataclass.utils import gen_parser_from_dataclass

import fairseq_plugins  # noqa: F401  (registers everything)
from fairseq_plugins.criterions.infinite_former_kl import InfiniteFormerKLConfig
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLMConfig
from fairseq_plugins.tasks.streaming_language_modeling import StreamingLanguageModelingConfig

COMPONENTS = [
    ("model infinite_former_lm (--arch infinite_former_lm | infinite_former_lm_wiki103 | "
     "infinite_former_lm_gpt2_small)", InfiniteFormerLMConfig),
    ("task streaming_lm (--task streaming_lm)", StreamingLanguageModelingConfig),
    ("criterion infinite_former_kl (--criterion infinite_former_kl)", InfiniteFormerKLConfig),
]


def main():
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_plugins",
        description="Options added by fairseq-longmem; pass them to fairseq-train / fairseq-eval-lm "
                    "together with --user-dir fairseq_plugins.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for title, config in COMPONENTS:
        group = parser.add_argument_group(title)
        gen_parser_from_dataclass(group, config())
    parser.print_help()


if __name__ == "__main__":
    main()
