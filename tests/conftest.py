import os
import sys

# test helpers (long_range_task.py, ...) import as top-level modules
sys.path.insert(0, os.path.dirname(__file__))
