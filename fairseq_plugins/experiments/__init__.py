"""The experiments the recipes run: the arms registry (:mod:`.arms`)."""
