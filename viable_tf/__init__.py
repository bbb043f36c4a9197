"""viable_tf: VIABLE few-shot meta-learning (learned inner-loop losses) in TensorFlow."""

__version__ = "0.2.0"
