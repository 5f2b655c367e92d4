"""gradfix: rewrites the PyTorch training-loop bugs behind
``RuntimeError: Trying to backward through the graph a second time``."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gradfix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
