"""``python -m fairseq_plugins.lab.bench JOB``: one benchmark measurement in a worker process
(started by :func:`fairseq_plugins.lab.bench.worker.run`; users run ``fairseq-longmem bench``)."""
import sys

from fairseq_plugins.lab.bench.worker import main

sys.exit(main(sys.argv[1:]))
