from fairseq_plugins.models import infinite_former_lm  # noqa: F401
