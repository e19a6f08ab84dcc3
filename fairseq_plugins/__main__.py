"""``python -m fairseq_plugins``: the options of every plugin component.

fairseq's ``--help`` is printed before model-, task- and criterion-specific
options are added to its parser, so it never lists them. This prints them,
generated from the same dataclasses fairseq uses, with defaults and help.
"""

import argparse

from fairseq.dataclass.utils import gen_parser_from_dataclass

import fairseq_plugins  # noqa: F401  (registers everything)
from fairseq_plugins.criterions.infinite_former_kl import InfiniteFormerKLConfig
from fairseq_plugins.models.fastformer import FastformerConfig
from fairseq_plugins.models.fastformer_lm import FastformerLMConfig
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerLMConfig
from fairseq_plugins.models.infinite_former_summarizer import InfiniteFormerSummarizerConfig
from fairseq_plugins.tasks.streaming_language_modeling import StreamingLanguageModelingConfig

COMPONENTS = [
    ("model infinite_former_lm (--arch infinite_former_lm | infinite_former_lm_wiki103 | "
     "infinite_former_lm_gpt2_small)", InfiniteFormerLMConfig),
    ("task streaming_lm (--task streaming_lm)", StreamingLanguageModelingConfig),
    ("criterion infinite_former_kl (--criterion infinite_former_kl)", InfiniteFormerKLConfig),
    ("model fastformer_lm (--arch fastformer_lm | fastformer_lm_tiny | fastformer_lm_base)", FastformerLMConfig),
    ("model fastformer (--arch fastformer | fastformer_tiny | fastformer_base)", FastformerConfig),
    ("model infinite_former_summarizer (--arch infinite_former_summarizer | infinite_former_summarizer_base)",
     InfiniteFormerSummarizerConfig),
]


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` unless the help already states the default
    (options whose default is interpolated from another option)."""

    def _get_help_string(self, action):
        if "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def main():
    print("Options added by fairseq-longmem; pass them to fairseq-train / fairseq-eval-lm / "
          "fairseq-generate together with --user-dir fairseq_plugins.\n")
    for title, config in COMPONENTS:
        # one parser per component: options shared by name (e.g. --dropout) show under each
        parser = argparse.ArgumentParser(prog=title, add_help=False, usage=argparse.SUPPRESS,
                                         formatter_class=_DefaultsFormatter)
        gen_parser_from_dataclass(parser.add_argument_group(title), config())
        parser.print_help()
        print()


if __name__ == "__main__":
    main()
