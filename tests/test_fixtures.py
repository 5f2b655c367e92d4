"""Every fixture folder, every check: generated from tests/fixtures/<rule module>/<case>/."""

import pytest

from gradfix.codemods.execution.verify import checks_for, discover

from .conftest import FIXTURES

CASES = discover([FIXTURES])
CHECKS = [(case, name, check) for case in CASES for name, check in checks_for(case)]


@pytest.mark.parametrize(("case", "name", "check"), CHECKS, ids=[f"{c.name}::{n}" for c, n, _ in CHECKS])
def test_fixture(case, name, check, runs):
    if case.missing_modules():
        pytest.skip(f"{case.name} needs {', '.join(case.missing_modules())}, not installed here")
    passed, detail = check(case, runs)
    assert passed, detail


def test_every_rule_has_fixtures_of_every_kind():
    from gradfix.codemods.registry import all_rules

    for rule in all_rules():
        kinds = {case.kind for case in CASES if case.rule is rule}
        needed = {"reported", "ok"} if rule.FIX is None else {"pair", "ok"}
        assert needed <= kinds, f"{rule.CODE} lacks fixture kinds: {kinds}"
