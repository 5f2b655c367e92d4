"""gradfix: rewrites the PyTorch training-loop bugs behind
``RuntimeError: Trying to backward through the graph a second time``.

As a library: ``gradfix.check(source)`` and ``gradfix.fix(source)`` (see ``gradfix.codemods.api``)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gradfix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["Result", "check", "fix", "__version__"]


def __getattr__(name: str):
    # Imported on first use: `import gradfix` (the command's start-up, the runner's server) stays
    # cheap, and Ctrl-C during the command's start-up reaches its handler.
    if name in ("Result", "check", "fix"):
        from gradfix.codemods import api

        return getattr(api, name)
    raise AttributeError(f"module 'gradfix' has no attribute {name!r}")


def load_ipython_extension(shell) -> None:
    """``%load_ext gradfix`` in IPython or Jupyter: the 'backward through the graph a second time'
    error is explained where it is raised (``gradfix.cli.ipython``); IPython is imported only here."""
    from gradfix.cli import ipython

    ipython.load(shell)


def unload_ipython_extension(shell) -> None:
    from gradfix.cli import ipython

    ipython.unload(shell)
