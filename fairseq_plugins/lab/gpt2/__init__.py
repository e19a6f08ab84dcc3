"""GPT-2 in the plugin (docs/gpt2.md): its vocabulary as a fairseq dictionary
(:mod:`fairseq_plugins.lab.gpt2.vocab`), the converter of a Hugging Face GPT-2 folder
(:mod:`fairseq_plugins.lab.gpt2.convert`, ``fairseq-longmem gpt2 convert``) and a tiny random GPT-2
for CPU runs of the recipe (:mod:`fairseq_plugins.lab.gpt2.tiny`, ``fairseq-longmem gpt2 tiny``)."""
