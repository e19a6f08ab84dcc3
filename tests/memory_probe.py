"""Test helper: the chunks one layer's long-term memory receives (tests/core/test_generation.py,
tests/lab/gpt2/test_gpt2_generation.py)."""

from fairseq_plugins.modules.memory.continuous import LongTermMemory


def record_entered_chunks(monkeypatch, memory):
    """A list that collects, in order, every chunk ``memory`` (one layer's LongTermMemory)
    enters into B (its ``update``), while the update runs as before."""
    entered = []
    update = LongTermMemory.update

    def record(self, state, chunk, chunk_valid):
        if self is memory:
            entered.append(chunk)
        return update(self, state, chunk, chunk_valid)

    monkeypatch.setattr(LongTermMemory, "update", record)
    return entered
