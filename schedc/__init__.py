"""schedc: a pipeline-schedule compiler for PyTorch training."""

__version__ = "0.1.0"
