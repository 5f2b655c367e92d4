"""gradfix: rewrites the PyTorch training-loop bugs behind
``RuntimeError: Trying to backward through the graph a second time``.

As a library: ``gradfix.check(source)``, ``gradfix.fix(source)`` and ``gradfix.check_paths(paths)``
(see ``gradfix.codemods.api``)."""

from importlib import import_module
from typing import TYPE_CHECKING

# The release this code is, or the one it leads to while ".devN" ends it (PEP 440); the package's
# metadata is built from it (pyproject.toml), so a source tree and an editable install say it too.
__version__ = "0.2.0.dev0"

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

if TYPE_CHECKING:  # what a type checker reads of those names (py.typed); `as` re-exports them (PEP 484)
    from gradfix.codemods.api import Result as Result, check as check, check_paths as check_paths, fix as fix
    from gradfix.codemods.registry import UnknownRuleError as UnknownRuleError
    from gradfix.codemods.report import Finding as Finding, FixKind as FixKind


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
