"""``python -m fairseq_plugins.bench JOB``: one benchmark measurement in a worker process
(started by :func:`fairseq_plugins.bench.worker.run`; users run ``fairseq-longmem bench``)."""
import sys

from fairseq_plugins.bench.worker import main

sys.exit(main(sys.argv[1:]))
