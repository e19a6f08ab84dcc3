"""Memories a block can hold beside its attention (contract.py: the contract)."""
