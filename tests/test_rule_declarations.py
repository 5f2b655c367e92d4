"""A rule declares its facts once, and every tool reads them there: its code and name (its module's
name), what its fix keeps, and its documentation's sections (its docstring)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods.registry import all_rules
from gradfix.codemods.rule import RULES_PACKAGE, SECTIONS, Rule

from .independent_oracle import same_result_codes
from .safe_fix_differential import gradient_keeping_codes

RULES = all_rules()
TESTS = Path(__file__).parent


def _rule(module: str, **declared: object) -> type[Rule]:
    return type("Probe", (Rule,), {"__module__": module, **declared})


def test_a_rule_of_the_package_takes_its_code_and_name_from_its_module():
    probe = _rule(f"{RULES_PACKAGE}.gf099_probe_rule")
    assert (probe.CODE, probe.NAME) == ("GF099", "probe_rule")


@pytest.mark.parametrize("attribute", ["CODE", "NAME"])
def test_a_rule_of_the_package_that_declares_its_code_or_name_again_is_refused(attribute):
    with pytest.raises(TypeError, match="its module's name"):
        _rule(f"{RULES_PACKAGE}.gf099_probe_rule", **{attribute: "GF098"})


def test_a_rule_outside_the_package_keeps_the_code_it_declares():
    probe = _rule("tests.probe", CODE="XX001", NAME="probe")
    assert (probe.CODE, probe.NAME) == ("XX001", "probe")


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_every_rule_documents_every_section(rule):
    sections = rule.sections()
    assert tuple(sections) == SECTIONS
    assert all(text.strip() and not text.startswith(tuple(SECTIONS)) for text in sections.values())
    assert rule.documentation().startswith(f"What it finds: {sections['What it finds']}")


def test_explain_prints_the_declared_sections_and_what_the_fix_keeps():
    explained = CliRunner().invoke(app, ["explain", "GF006"])
    assert explained.exit_code == 0
    titles = [line.partition(":")[0] for line in explained.stdout.splitlines() if line.partition(":")[0] in SECTIONS]
    assert titles == list(SECTIONS)
    assert "Fix safety: safe: `gradfix fix` applies the fix. It changes no value the program computes" in explained.stdout


def test_a_docstring_out_of_its_sections_is_refused():
    probe = _rule("tests.probe", __doc__="What it finds: a bug.\n\nThe fix: a fix.\n\nWhy it fails: a reason.")
    with pytest.raises(ValueError, match="sections are What it finds, The fix, Why it fails"):
        probe.sections()


def test_the_oracles_read_what_the_rules_declare_their_fixes_keep():
    for oracle in ("independent_oracle.py", "safe_fix_differential.py"):
        tree = ast.parse((TESTS / oracle).read_text())
        codes = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"GF\d{3}", n.value)]
        assert codes == [], oracle
    assert gradient_keeping_codes() == {rule.CODE for rule in RULES if rule.KEEPS_GRADIENTS}
    assert same_result_codes() == {rule.CODE for rule in RULES if rule.KEEPS_GRADIENTS or rule.KEEPS_RESULTS}
    assert {"GF006", "GF007"} <= same_result_codes()
