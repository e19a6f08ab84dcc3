"""``--no-repeat-ngram-size`` on a CPU: fairseq 0.12's Python n-gram blocker looks at padding.

``NGramRepeatBlock`` falls back to Python when fairseq's CUDA kernel is not built or not on a
GPU. That fallback compares the last n-1 columns of the whole ``(bsz * beam, max_len + 2)``
token buffer, which are padding, instead of the last n-1 generated tokens, so on a CPU
fairseq-generate and fairseq-interactive ignore the option (fairseq issues #4709 and #5206).
:func:`install` passes it the generated prefix ``tokens[:, :step + 1]`` (the fix proposed in
#4709): it then bans every token that would complete an n-gram already in the hypothesis, as
the CUDA kernel does. The kernel, when used, is left alone. Installed for ``generate`` and
``interactive`` on fairseq 0.12 (:mod:`fairseq_plugins.compat`).
"""


def install() -> None:
    """Make fairseq's CPU n-gram blocker look at the generated prefix (this process; idempotent)."""
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
