"""The one prompt policy of every tool that continues or scores a text with a plugin language
model (docs/generation.md, "Prompts"): the hub interface's ``sample``, ``generate`` and
``score`` (:mod:`fairseq_plugins.models.hub`), ``fairseq-interactive``
(:mod:`fairseq_plugins.compat.generation`) and ``fairseq-longmem continue``
(:mod:`fairseq_plugins.lab.generation.continuation`).

* **Lines are read as in training.** fairseq-preprocess binarizes a text one line at a time and
  ends every line with the end-of-sentence symbol; a prompt is read the same way
  (:func:`prompt_lines`: each non-blank line, then ``</s>``), unless the caller asks to join its
  lines into one (``join_lines``). A continuation is decoded back the same way, one line per
  ``</s>`` (:func:`decode_lines`).
* **An empty prompt is refused** (:data:`EMPTY`): nothing but end-of-sentence or padding would
  make the model generate unconditionally, or score nothing.
* **Unknown symbols.** A prompt whose every token is ``<unk>`` (another script or language than
  the training text) is refused; one with some gets one warning naming how many
  (:func:`check_prompt`).

Refusals are :class:`~fairseq_plugins.errors.ConfigError`, a ``ValueError`` (what the hub
raises; the command-line tools print it as one line).
"""

from typing import Callable, List, Optional, Sequence

from torch import Tensor

from fairseq_plugins.errors import ConfigError

SPM_BLANK = "\u2581"  # sentencepiece's bare word-boundary piece: no content of its own


def empty_message(what: str = "the prompt") -> str:
    """The refusal of an empty prompt (``what``: how the caller names it)."""
    return f"{what} is empty: give the text to continue or score (at least one word)"


EMPTY = empty_message()


def prompt_lines(text: str, join_lines: bool = False) -> List[str]:
    """The lines a prompt ``text`` is read as: each non-blank line (every one then ends with
    ``</s>``, as fairseq-preprocess reads a training text), or with ``join_lines`` the whole
    text as one line, its lines joined with a space."""
    lines = [line for line in text.splitlines() if line.strip()]
    return [" ".join(lines)] if join_lines and lines else lines


def check_prompt(ids: Sequence[int], dictionary, what: str = "the prompt",
                 pieces: Optional[Sequence[Optional[str]]] = None) -> Optional[str]:
    """Check a prompt's token ids ``ids`` against the policy (module docstring).

    Args:
        ids: the prompt's ids in ``dictionary`` (end-of-sentence and padding count as no text).
        what: how the messages name the prompt.
        pieces: the tokenizer's pieces of ``ids`` (``None`` where there is none), to name the
            unknown ones in the warning.
    Returns:
        the warning (without a program prefix) when some tokens are ``<unk>``, else ``None``.
    Raises:
        ConfigError: an empty prompt, or one whose every token is ``<unk>``.
    """
    ids = [int(i) for i in ids]
    blank = dictionary.index(SPM_BLANK) if SPM_BLANK in dictionary.indices else None
    text = [k for k, i in enumerate(ids) if i not in (dictionary.eos(), dictionary.pad(), blank)]
    if not text:
        raise ConfigError(empty_message(what))
    unknown = [k for k in text if ids[k] == dictionary.unk()]
    if len(unknown) == len(text):
        raise ConfigError(f"every token of {what} is <unk>: the model's dictionary cannot encode it (another script "
                          "or language than the training text); give a prompt like the training text")
    if not unknown:
        return None
    named = ""
    if pieces is not None:
        shown = list(dict.fromkeys((pieces[k] or "").lstrip(SPM_BLANK) or (pieces[k] or "") for k in unknown))
        more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
        named = f" ({' '.join(shown[:8])}{more})"
    verb, them = ("is", "it") if len(unknown) == 1 else ("are", "them")
    return (f"{len(unknown)} of the {len(text)} tokens of {what} {verb} <unk>{named}: the model's dictionary cannot "
            f"encode {them}, and the model reads {them} as unknown")


def decode_lines(tokens: Tensor, eos: int, decode: Callable[[Tensor], str]) -> str:
    """``(T,)`` ids → text, one line per end-of-sentence (a final one ends the text, no empty
    line after it); ``decode`` turns the ids of one line into its text."""
    tokens = tokens.cpu()
    ends = [-1] + tokens.eq(eos).nonzero()[:, 0].tolist() + [tokens.numel()]
    lines = [decode(tokens[a + 1:b]) for a, b in zip(ends[:-1], ends[1:])]
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)
