"""A checkpoint remembers the dictionary it was trained with.

fairseq rebuilds a model from the *data directory's* ``dict.txt`` before it
loads a checkpoint. With a different dictionary of another size, loading fails
deep inside ``load_state_dict``; with one of the *same* size it silently
succeeds and every token id means something else. The plugin's models mix in
:class:`DictionaryCheckMixin`, which stores a fingerprint (md5 of the
symbols, 16 integers) as the buffer ``dictionary_fingerprint`` and compares it
before loading, so both cases end with one line naming the fix.
"""

import hashlib
from typing import Iterable

import torch
from torch import Tensor

from fairseq_plugins.errors import ConfigError

FINGERPRINT_KEY = "dictionary_fingerprint"


def dictionary_fingerprint(dictionaries: Iterable) -> Tensor:
    """md5 of the dictionaries' symbols, as an int64 tensor of shape ``(16,)``.

    int64 rather than uint8 so that fairseq's checkpoint averaging (sum, then
    integer division by the count) returns the same fingerprint.
    """
    digest = hashlib.md5()
    for d in dictionaries:
        digest.update("\n".join(d.symbols).encode("utf-8"))
        digest.update(b"\0")
    return torch.tensor(list(digest.digest()), dtype=torch.long)


class DictionaryCheckMixin:
    """Mix into a ``BaseFairseqModel`` subclass before it; call
    :meth:`remember_dictionaries` in ``__init__``/``build_model``."""

    def remember_dictionaries(self, *dictionaries) -> None:
        self.register_buffer(FINGERPRINT_KEY, dictionary_fingerprint(dictionaries))

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """Raises:
            ConfigError: the checkpoint's dictionary differs from the one the
                model was built with (the data directory's ``dict.txt``).
        """
        if hasattr(self, FINGERPRINT_KEY):
            mine = getattr(self, FINGERPRINT_KEY)
            theirs = state_dict.get(FINGERPRINT_KEY)
            if theirs is None:  # a checkpoint written before the fingerprint existed
                state_dict = dict(state_dict)
                state_dict[FINGERPRINT_KEY] = mine
            elif not torch.equal(theirs.to(mine.device, mine.dtype), mine):
                raise ConfigError(
                    "the checkpoint was trained with a different dictionary than the data "
                    "directory's (dict.txt; dict.SRC.txt/dict.TGT.txt for translation data): "
                    "the same token ids would mean other words; use the "
                    "data directory the model was trained on (when resuming fairseq-train: or a "
                    "new --save-dir to train from scratch)")
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
