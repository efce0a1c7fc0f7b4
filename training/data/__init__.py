"""Synthetic tool-calling dataset: the row contract, generation and validation."""
