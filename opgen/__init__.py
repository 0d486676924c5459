"""opgen: custom PyTorch operators from a signature, with fakes and graph-entry tests."""

__version__ = "0.1.0"
