"""Experiment drivers that regenerate the paper's results."""
