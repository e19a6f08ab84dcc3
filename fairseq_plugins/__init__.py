"""fairseq-longmem: long-context attention for fairseq (``--user-dir fairseq_plugins``).

Registers with fairseq:

* model ``infinite_former_lm`` (architectures ``infinite_former_lm``,
  ``infinite_former_lm_wiki103``, ``infinite_former_lm_gpt2_small``);
* task ``streaming_lm`` (in-order streams, memory carried across batches);
* criterion ``infinite_former_kl`` (cross-entropy + λ_KL · KL).

fairseq's ``--user-dir`` auto-imports only ``models/`` and ``tasks/``; the
criterions are imported here. Everything is imported under the single name
``fairseq_plugins`` (never a second dotted path, which would register twice).
"""

from fairseq_plugins.errors import install_excepthook

install_excepthook()

from fairseq_plugins import criterions, models, tasks  # noqa: E402,F401
