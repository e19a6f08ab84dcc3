"""fairseq-longmem: ∞-former and Fastformer for fairseq (package ``fairseq_plugins``)."""
from setuptools import find_packages, setup

HF = ["transformers>=4.36", "tokenizers>=0.15", "safetensors>=0.4"]

setup(
    name="fairseq-longmem",
    version="0.1.0",
    description="∞-former long-term memory and Fastformer attention as a fairseq --user-dir plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["fairseq_plugins", "fairseq_plugins.*"]),
    install_requires=[
        # ve-fairseq: a prebuilt wheel of upstream fairseq main that imports on
        # Python 3.11 (the 0.12.2 release does not). A user who already has a
        # working fairseq can install this package with --no-deps.
        "ve-fairseq==0.12.3",
        "torch>=2.1",
        "numpy<2",  # fairseq's token_block_dataset uses np.compat, removed in numpy 2
        "sentencepiece>=0.1.99",
        "sacrebleu>=2.3",
        "rouge-score>=0.1.2",
        "matplotlib>=3.7",  # benchmark plots
        "scipy>=1.7",  # t quantiles of the intervals over seeds (fairseq depends on it too)
    ],
    entry_points={"console_scripts": ["fairseq-longmem = fairseq_plugins.cli:entry"]},
    extras_require={
        # GPT-2 (docs/gpt2.md): reading model.safetensors in fairseq-longmem gpt2 convert; transformers
        # and tokenizers only for fairseq-longmem gpt2 tiny and the tests (never for training).
        # transformers imports torchaudio when one is installed: fairseq pulls a torchaudio that
        # may not load with the installed torch; scripts/install.sh removes such a torchaudio.
        "hf": HF,
        "test": ["pytest>=7", "pytest-xdist>=3", "filelock>=3", *HF],  # xdist: 2 workers; filelock: shared fixtures
    },
)
