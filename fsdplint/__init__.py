"""fsdplint: a static analyzer for PyTorch FSDP training code."""

__version__ = "0.1.0"
