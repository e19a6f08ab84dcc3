from fairseq_plugins.models import infinite_former_lm  # noqa: F401
from fairseq_plugins.models import fastformer_lm  # noqa: F401
from fairseq_plugins.models import fastformer  # noqa: F401
from fairseq_plugins.models import infinite_former_summarizer  # noqa: F401
from fairseq_plugins.models import infinite_former_gpt2  # noqa: F401
