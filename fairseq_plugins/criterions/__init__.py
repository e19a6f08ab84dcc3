from fairseq_plugins.criterions import infinite_former_kl  # noqa: F401
