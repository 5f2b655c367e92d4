"""The Python API: ``gradfix.check`` and ``gradfix.fix`` on source text or bytes."""

from pathlib import Path

import pytest

import gradfix
from gradfix.codemods.registry import UnknownRuleError

from .conftest import FIXTURES

SHARED = FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop"
UNSAFE = FIXTURES / "gf008_backward_after_loop"


def test_check_lists_findings_and_leaves_the_source():
    source = (SHARED / "before.py").read_text()
    result = gradfix.check(source, path="train.py")
    assert [(f.code, f.path, f.line) for f in result.findings] == [("GF002", "train.py", 19)]
    assert result.source is source and not result.changed and not result.fixed and not result.errors


def test_fix_returns_the_fixed_source_of_the_type_given():
    text = gradfix.fix((SHARED / "before.py").read_text())
    assert text.source == (SHARED / "after.py").read_text()
    assert text.changed and [f.code for f in text.fixed] == ["GF002"] and not text.findings
    data = gradfix.fix((SHARED / "before.py").read_bytes())
    assert data.source == (SHARED / "after.py").read_bytes()


def test_unsafe_fixes_only_when_asked_and_rules_by_code():
    case = next(p for p in sorted(UNSAFE.iterdir()) if (p / "after.py").exists())
    source = (case / "before.py").read_text()
    assert not gradfix.fix(source).changed and gradfix.fix(source).findings
    assert gradfix.fix(source, unsafe_fixes=True).source == (case / "after.py").read_text()
    assert "GF008" not in {f.code for f in gradfix.check(source, ignore=["GF008"]).findings}
    with pytest.raises(UnknownRuleError):
        gradfix.check(source, select=["XX1"])


def test_bad_input_is_an_error_in_the_result_not_an_exception():
    result = gradfix.fix("loss.backward(\n", path="broken.py")
    assert result.errors == ("broken.py:1: cannot parse: '(' was never closed",)
    assert result.source == "loss.backward(\n" and not result.findings


def test_the_names_the_readme_gives_are_importable_and_listed():
    from gradfix import Finding, FixKind, UnknownRuleError as Exported

    assert Exported is UnknownRuleError and Finding.__name__ == "Finding" and FixKind.SAFE.value == "safe"
    assert {"check", "fix", "check_paths", "Result", "UnknownRuleError", "Finding", "FixKind", "__version__"} <= set(dir(gradfix))
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        gradfix.nothing  # noqa: B018


def test_select_and_ignore_take_a_string_of_codes_or_names():
    source = (SHARED / "before.py").read_text()
    assert [f.code for f in gradfix.check(source, select="GF002").findings] == ["GF002"]
    assert [f.code for f in gradfix.check(source, select="GF001, separate_backwards").findings] == ["GF002"]
    assert "GF002" not in {f.code for f in gradfix.check(source, ignore="separate_backwards").findings}
    with pytest.raises(UnknownRuleError, match="GF999"):
        gradfix.check(source, select="GF999")


def test_check_paths_reads_each_files_configuration_and_writes_nothing(tmp_path):
    before = (SHARED / "before.py").read_bytes()
    for folder in ("plain", "configured"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_bytes(before)
    (tmp_path / "configured" / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["separate_backwards"]\n')
    checked = gradfix.check_paths([tmp_path], fixing=True, jobs=1)
    reports = {Path(r.path).parent.name: r for r in checked.reports}
    assert [f.code for f in reports["plain"].fixed] == ["GF002"] and reports["plain"].rewritten == (SHARED / "after.py").read_bytes()
    assert not reports["configured"].fixed and reports["configured"].rewritten is None
    assert all((tmp_path / folder / "train.py").read_bytes() == before for folder in reports)
    assert [f.code for r in gradfix.check_paths([tmp_path], select="GF002", jobs=1).reports for f in r.findings] == ["GF002", "GF002"]
    with pytest.raises(UnknownRuleError, match="GF999"):
        gradfix.check_paths([tmp_path], ignore="GF999")
