"""gradfix: rewrites the PyTorch training-loop bugs behind
``RuntimeError: Trying to backward through the graph a second time``.

As a library: ``gradfix.check(source)``, ``gradfix.fix(source)`` and ``gradfix.check_paths(paths)``
(see ``gradfix.codemods.api``)."""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gradfix")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

# Each name and the module it is imported from on first use: `import gradfix` (the command's
# start-up, the runner's server) stays cheap, and Ctrl-C during the command's start-up reaches its
# handler.
_LAZY = {
    "Result": "gradfix.codemods.api",
    "check": "gradfix.codemods.api",
    "check_paths": "gradfix.codemods.api",
    "fix": "gradfix.codemods.api",
    "Finding": "gradfix.codemods.report",
    "FixKind": "gradfix.codemods.report",
    "UnknownRuleError": "gradfix.codemods.registry",
}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gradfix' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, "load_ipython_extension", "unload_ipython_extension"])


def load_ipython_extension(shell) -> None:
    """``%load_ext gradfix`` in IPython or Jupyter: the 'backward through the graph a second time'
    error is explained where it is raised (``gradfix.cli.ipython``); IPython is imported only here."""
    from gradfix.cli import ipython

    ipython.load(shell)


def unload_ipython_extension(shell) -> None:
    from gradfix.cli import ipython

    ipython.unload(shell)
