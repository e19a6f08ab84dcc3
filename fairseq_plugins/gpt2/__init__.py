"""GPT-2 in the plugin: its vocabulary as a fairseq dictionary (:mod:`fairseq_plugins.gpt2.vocab`)."""
