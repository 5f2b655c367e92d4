"""The cache's key holds what reads the checked files: a report made under one Python (version or
implementation) or one LibCST is never served under another, as a file one Python cannot compile
may be one another compiles."""

import platform
import sys
from importlib import metadata

import pytest

from gradfix.codemods.cache import ReportCache

from .test_cache import DOUBLE, checked, machine, run  # noqa: F401 (fixtures)


def another_python_version(monkeypatch):
    monkeypatch.setattr(platform, "python_version", lambda: "3.13.1")


def another_python_implementation(monkeypatch):
    monkeypatch.setattr(sys.implementation, "name", "pypy")


def another_libcst(monkeypatch):
    installed = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "1.99.0" if name == "libcst" else installed(name))


@pytest.mark.parametrize("elsewhere", [another_python_version, another_python_implementation, another_libcst])
def test_a_report_made_by_another_python_or_libcst_is_not_served(tmp_path, monkeypatch, checked, elsewhere):
    script, folder = tmp_path / "train.py", tmp_path / "cache"
    script.write_text(DOUBLE)
    made_here = run([script], ReportCache(folder))
    with monkeypatch.context() as there:
        elsewhere(there)
        assert run([script], ReportCache(folder)) == made_here
        assert checked == ["train.py", "train.py"], "a report made by another Python or LibCST was served"
    assert run([script], ReportCache(folder)) == made_here
    assert checked == ["train.py", "train.py"], "each keeps its own entry"
