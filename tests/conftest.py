import os
import sys

# test helpers (long_range_task.py, ...) import as top-level modules
sys.path.insert(0, os.path.dirname(__file__))


import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is much faster on a shared 2-core machine
    (``pytestmark = pytest.mark.usefixtures("one_thread")`` in a test module)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
