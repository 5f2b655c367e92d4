"""``gradfix server``: the language server for editors (``server.py``), started once pygls is known
to be installed. Apart from ``server.py`` so that the app never imports pygls: without it, the
command is a usage error that says what to install.
"""

from __future__ import annotations

import importlib.util

from .options import Verbose, _usage_error


def server(verbose: Verbose = False) -> None:
    """Run the language server for editors, on stdin and stdout (README: "In your editor")."""
    if importlib.util.find_spec("pygls") is None:
        _usage_error("the language server needs pygls: install gradfix with its `server` extra (gradfix[server]), or pip install pygls")
    from .server import serve

    serve()
