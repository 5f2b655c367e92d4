from pathlib import Path

import pytest

from gradfix.codemods.execution.runner import ScriptRunner
from gradfix.codemods.execution.verify import RunCache

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_CASES = Path(__file__).resolve().parents[2] / "shared" / "cases"


@pytest.fixture(scope="session")
def runs():
    """Scripts run in children of one warm process that imported torch once."""
    with ScriptRunner() as runner:
        yield RunCache(runner)
