import os
from pathlib import Path

import libcst as cst
import pytest

from gradfix.codemods.execution.runner import ScriptRunner
from gradfix.codemods.execution.verify import RunCache

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_CASES = Path(__file__).resolve().parents[2] / "shared" / "cases"

# Tests change gradfix's behaviour with monkeypatch, which no cache key can see, and must not leave
# a .gradfix_cache in the repository; the cache's own tests turn it back on.
os.environ["GRADFIX_NO_CACHE"] = "1"


@pytest.fixture(scope="session")
def runs():
    """Scripts run in children of one warm process that imported torch once."""
    with ScriptRunner() as runner:
        yield RunCache(runner)


class _Lent:
    """The session's warm runner, lent to a command that would start and close its own."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def __enter__(self) -> ScriptRunner:
        return self.runner

    def __exit__(self, *exc_info) -> None:
        """The runner stays open for the tests after this one."""


@pytest.fixture
def warm_cli(runs, monkeypatch):
    """``gradfix`` as the command line runs it, on the session's warm runner: a cold start costs
    seconds, and one test (test_diagnose's) already pays it to show the command starts its own."""
    from typer.testing import CliRunner

    from gradfix.cli import run_commands
    from gradfix.cli.app import app

    monkeypatch.setattr(run_commands, "ScriptRunner", lambda: _Lent(runs.runner))
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def visits(monkeypatch):
    """How many nodes LibCST's own walk (``CSTNode.visit``) enters."""
    entered = []
    walk = cst.CSTNode.visit

    def counted(node, visitor):
        entered.append(node)
        return walk(node, visitor)

    monkeypatch.setattr(cst.CSTNode, "visit", counted)
    return entered
