from fairseq_plugins.tasks import streaming_language_modeling  # noqa: F401
