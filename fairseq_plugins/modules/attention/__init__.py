"""The attention variants behind one contract (docs/design/architecture.md, "Contracts")."""
