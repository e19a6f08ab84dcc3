"""What the tools print and write: results tables, files written whole, fairseq's output without its noise."""
