"""The cache's key holds what reads the checked files: a report made under one Python (version or
implementation) or one LibCST is never served under another, as a file one Python cannot compile
may be one another compiles."""

import importlib.machinery
import importlib.util
import os
import platform
import sys

import pytest

from gradfix.codemods.cache import ReportCache

from .test_cache import DOUBLE, checked, machine, run  # noqa: F401 (fixtures)


def another_python_version(monkeypatch, tmp_path):
    monkeypatch.setattr(platform, "python_version", lambda: "3.13.1")


def another_python_implementation(monkeypatch, tmp_path):
    monkeypatch.setattr(sys.implementation, "name", "pypy")


def _libcst_at(monkeypatch, origin):
    found = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("libcst", None, origin=str(origin))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: spec if name == "libcst" else found(name, *rest))


def _libcst_copy(tmp_path):
    (tmp_path / "libcst").mkdir()
    origin = tmp_path / "libcst" / "__init__.py"
    origin.write_bytes(open(importlib.util.find_spec("libcst").origin, "rb").read())
    return origin


def libcst_installed_elsewhere(monkeypatch, tmp_path):
    _libcst_at(monkeypatch, _libcst_copy(tmp_path))


@pytest.mark.parametrize("elsewhere", [another_python_version, another_python_implementation, libcst_installed_elsewhere])
def test_a_report_made_by_another_python_or_libcst_is_not_served(tmp_path, monkeypatch, checked, elsewhere):
    script, folder = tmp_path / "train.py", tmp_path / "cache"
    script.write_text(DOUBLE)
    made_here = run([script], ReportCache(folder))
    with monkeypatch.context() as there:
        elsewhere(there, tmp_path)
        assert run([script], ReportCache(folder)) == made_here
        assert checked == ["train.py", "train.py"], "a report made by another Python or LibCST was served"
    assert run([script], ReportCache(folder)) == made_here
    assert checked == ["train.py", "train.py"], "each keeps its own entry"


def test_a_report_made_before_libcst_was_installed_again_is_not_served(tmp_path, monkeypatch, checked):
    """Another version installed where this one was: pip writes its files anew."""
    script, folder = tmp_path / "train.py", tmp_path / "cache"
    script.write_text(DOUBLE)
    origin = _libcst_copy(tmp_path)
    _libcst_at(monkeypatch, origin)
    made_before = run([script], ReportCache(folder))
    later = os.stat(origin).st_mtime_ns + 1_000_000_000
    os.utime(origin, ns=(later, later))
    assert run([script], ReportCache(folder)) == made_before
    assert checked == ["train.py", "train.py"], "a report made by the LibCST installed before was served"
