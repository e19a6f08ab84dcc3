"""Custom autograd operations, each beside the naive reference the tests compare it with."""
