"""What the tools print and write: results tables, quiet library imports."""
