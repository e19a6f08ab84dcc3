#!/usr/bin/env python3
"""fairseq-generate for scripts/generate-summaries.sh, with two fixes for this fairseq build.

    python scripts/summarization_generate.py DATA_BIN [any fairseq-generate option ...]

1. fairseq's own ``transformer`` is configured through argparse (legacy ``add_args``), so its
   checkpoints hold an ``argparse.Namespace``, which torch >= 2.6 refuses in its default safe
   loader (``weights_only=True``). Exactly that class is allowlisted
   (``torch.serialization.add_safe_globals``); nothing else is unpickled (no
   ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``). The plugin models' checkpoints need no allowlist.
2. ``--no-repeat-ngram-size`` does nothing on CPU in fairseq main (issues #4709, #5206): the
   Python fallback of ``NGramRepeatBlock`` compares the last n-1 columns of the whole
   ``(bsz*beam, max_len + 2)`` token buffer, which are padding, instead of the last n-1
   generated tokens. :func:`patch_ngram_blocker` passes it the generated prefix
   ``tokens[:, :step + 1]`` (the fix proposed in #4709), so it bans every token that would
   complete an n-gram already in the hypothesis. The CUDA kernel, when built, is left alone.
"""

import argparse
import sys


def patch_ngram_blocker():
    """Make fairseq's CPU n-gram blocker look at the generated prefix (see the module docstring)."""
    from fairseq import ngram_repeat_block

    cls = ngram_repeat_block.NGramRepeatBlock
    if getattr(cls, "_prefix_fix", False):
        return
    original = cls.forward

    def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        if not self.use_extension:
            tokens = tokens[:, : step + 1]
        return original(self, tokens, lprobs, bsz, beam_size, step)

    cls.forward = forward
    cls._prefix_fix = True


def main():
    import torch

    torch.serialization.add_safe_globals([argparse.Namespace])
    patch_ngram_blocker()
    from fairseq_cli.generate import cli_main

    sys.argv[0] = "fairseq-generate"
    cli_main()


if __name__ == "__main__":
    main()
