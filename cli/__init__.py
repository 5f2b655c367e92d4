"""The ``gradfix`` command. ``main`` is the entry point: Ctrl-C and SIGTERM end it at any moment,
start-up included, with one line and the conventional exit status (130, 143), after the work in
progress has cleaned up (a write under way removes its temporary file, a running script is killed)."""

import signal
import sys

INTERRUPTED, TERMINATED = 130, 143


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that cleanup runs as it does for Ctrl-C."""


def _terminate(signum, frame) -> None:
    raise Terminated


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        # Imported here, so that Ctrl-C during the imports is handled; a check whose output is
        # plain text is answered before typer's and rich's imports (``plain_check``).
        from .plain_check import plain_check_status

        status = plain_check_status(sys.argv[1:])
        if status is not None:
            sys.exit(status)
        from .app import run

        run()
    except KeyboardInterrupt:
        _leave("interrupted", INTERRUPTED)
    except Terminated:
        _leave("terminated", TERMINATED)
    except SystemExit as exit_:
        if exit_.code == INTERRUPTED:  # typer caught the KeyboardInterrupt and exits with 130, silently
            _leave("interrupted", INTERRUPTED)
        raise


def _leave(why: str, status: int) -> None:
    sys.stderr.write(f"gradfix: {why}\n")
    sys.exit(status)
