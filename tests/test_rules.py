"""Every rule's declared metadata and documentation example hold: `explain` shows what `fix` does."""

import pytest

from gradfix.codemods.engine import FixMode, check_source
from gradfix.codemods.registry import all_rules, select_rules

RULES = all_rules()
HEADER = b"import torch\nimport torch.nn as nn\n"


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_example_before_is_rewritten_into_example_after(rule):
    before = HEADER + rule.EXAMPLE_BEFORE.encode()
    report = check_source(before, [rule], FixMode.UNSAFE if rule.FIX and rule.FIX.value == "unsafe" else FixMode.SAFE)
    assert [f.code for f in report.fixed] == [rule.CODE]
    assert report.rewritten == HEADER + rule.EXAMPLE_AFTER.encode()


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_metadata(rule):
    assert rule.CODE.startswith("GF") and len(rule.CODE) == 5
    assert rule.__module__.rsplit(".", 1)[1] == rule.NAME
    assert rule.SUMMARY and len(rule.documentation().splitlines()) > 5


def test_codes_are_unique_and_prefix_selection_works():
    codes = [rule.CODE for rule in RULES]
    assert len(codes) == len(set(codes))
    assert [r.CODE for r in select_rules(["gf002"])] == ["GF002"]
    assert [r.CODE for r in select_rules(None, ["GF002"])] == [c for c in codes if c != "GF002"]
