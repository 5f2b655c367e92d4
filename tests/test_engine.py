"""The engine's guarantees: files are old or new, never half-written; a bad rewrite is never written."""

import contextlib
import gc
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import libcst as cst
import pytest

from gradfix.cli import Terminated
from gradfix.codemods import check, files, parse, run
from gradfix.codemods.source import may_backward
from gradfix.codemods.summaries import ExportedSummary, written_names
from gradfix.codemods.edits import Fix
from gradfix.codemods.check import check_source
from gradfix.codemods.files import FileChanged, write_atomically
from gradfix.codemods.report import FixMode
from gradfix.codemods.registry import all_rules
from gradfix.codemods.rule import FixKind, Rule, Violation

from .conftest import FIXTURES


class _BreaksCode(Rule):
    """A deliberately wrong rule: replaces every backward statement with `return`."""

    CODE = "XX001"
    NAME = "breaks_code"
    SUMMARY = "test rule"
    FIX = FixKind.SAFE
    EXAMPLE_BEFORE = EXAMPLE_AFTER = ""

    def violations(self) -> Iterator[Violation]:
        for site in self.analysis.backward_sites:
            broken = cst.parse_statement("return\n")
            yield self.violation(site.call, "bad", Fix(safe=True, replace=((site.statement, broken),)))


def test_a_rewrite_that_does_not_compile_is_dropped_as_an_internal_error():
    source = b"import torch\nloss = torch.ones(1, requires_grad=True).sum()\nloss.backward()\n"
    report = check_source(source, [_BreaksCode], FixMode.SAFE, "train.py")
    assert report.rewritten is None
    assert report.internal_errors and "does not parse" in report.internal_errors[0]


class _Crashes(_BreaksCode):
    CODE = "XX002"

    def violations(self) -> Iterator[Violation]:
        raise ValueError("a bug in a rule")


def test_a_crashing_rule_is_an_internal_error_for_that_file_only():
    source = b"import torch\nloss = torch.ones(1, requires_grad=True).sum()\nloss.backward()\n"
    report = check_source(source, [_Crashes], FixMode.SAFE, "train.py")
    assert report.rewritten is None and report.findings == []
    assert report.internal_errors == ["train.py: internal error: ValueError: a bug in a rule; the file was left as it was"]


def test_write_atomically_replaces_the_whole_file(tmp_path):
    target = tmp_path / "train.py"
    target.write_bytes(b"old\n")
    files.write_atomically(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, Terminated], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, interruption):
    target = tmp_path / "train.py"
    target.write_bytes(b"old\n")

    def interrupted(*args):
        raise interruption

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(interruption):
        files.write_atomically(target, b"new\n")
    assert target.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


def test_a_hard_linked_file_is_updated_in_place_for_every_name(tmp_path):
    target = tmp_path / "train.py"
    target.write_bytes(b"old\n")
    other = tmp_path / "copy_of_train.py"
    os.link(target, other)
    inode = target.stat().st_ino
    files.write_atomically(target, b"new, longer\n", expected=b"old\n")
    assert other.read_bytes() == target.read_bytes() == b"new, longer\n"
    assert target.stat().st_ino == inode and target.stat().st_nlink == 2
    files.write_atomically(other, b"n\n")
    assert target.read_bytes() == b"n\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy_of_train.py", "train.py"]


def test_files_without_backward_are_not_parsed(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("parsed a file the prefilter should have skipped")

    monkeypatch.setattr(check.cst, "parse_module", fail)
    report = check_source(b"import torch\nx = torch.ones(3)\n", all_rules(), FixMode.SAFE)
    assert report.findings == [] and report.errors == []


@pytest.mark.parametrize("source", [b"x = 1\n", b"def (:\n"])
def test_nodes_built_after_a_trusted_parse_are_validated_again(source):
    with contextlib.suppress(cst.ParserSyntaxError):
        parse.parse_trusted(source)
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_fixes_repeat_until_nothing_more_applies():
    # Merging the backwards (GF002) leaves one backward; nothing else is left to fix.
    source = (
        b"import torch\nimport torch.nn as nn\nnet = nn.Linear(2, 2)\nh = net(torch.ones(1, 2))\n"
        b"a = h.sum()\nb = h.mean()\na.backward()\nb.backward()\nb.backward()\n"
    )
    report = check_source(source, all_rules(), FixMode.SAFE)
    assert sorted(f.code for f in report.fixed) == ["GF001", "GF002"]
    assert report.rewritten.decode().endswith("(a + b).backward()\n")
    assert report.findings == []


class _DropsRepeatUnsafely(Rule):
    """Removes every backward statement but the first, as an unsafe fix."""

    CODE = "XX003"
    NAME = "drops_repeat"
    SUMMARY = "test rule"
    FIX = FixKind.UNSAFE
    EXAMPLE_BEFORE = EXAMPLE_AFTER = ""

    def violations(self) -> Iterator[Violation]:
        for site in self.analysis.backward_sites[1:]:
            yield self.violation(site.call, "repeat", Fix(safe=False, remove=(site.statement,)))


def test_unsafe_fixes_apply_only_in_unsafe_mode():
    source = b"import torch\nloss = torch.ones(1, requires_grad=True).sum()\nloss.backward()\nloss.backward()\n"
    safe = check_source(source, [_DropsRepeatUnsafely], FixMode.SAFE, "train.py")
    assert safe.rewritten is None and [f.fix for f in safe.findings] == [FixKind.UNSAFE]
    unsafe = check_source(source, [_DropsRepeatUnsafely], FixMode.UNSAFE, "train.py")
    assert unsafe.rewritten == source[: -len(b"loss.backward()\n")] and unsafe.findings == []


class _FixThatDoesNotFix(Rule):
    """Inserts a statement before the first backward, which it reports again afterwards."""

    CODE = "XX004"
    NAME = "does_not_fix"
    SUMMARY = "test rule"
    FIX = FixKind.SAFE
    EXAMPLE_BEFORE = EXAMPLE_AFTER = ""

    def violations(self) -> Iterator[Violation]:
        site = self.analysis.backward_sites[0]
        copy = cst.parse_statement("loss = loss * 1\n")
        yield self.violation(site.call, f"line {self.analysis.line(site.call)}", Fix(safe=True, insert_before=((site.statement, (copy,)),)))


def test_a_fix_whose_finding_comes_back_is_refused_not_repeated():
    source = b"import torch\nloss = torch.ones(1, requires_grad=True).sum()\nloss.backward()\n"
    report = check_source(source, [_FixThatDoesNotFix], FixMode.SAFE, "train.py")
    assert report.rewritten is None and report.fixed == []
    assert [(f.code, f.line, f.message) for f in report.findings] == [("XX004", 3, "line 3")]


def test_no_fix_removes_an_optimizer_update():
    source = (
        b"import torch\nw = torch.ones(1, requires_grad=True)\nopt = torch.optim.SGD([w], lr=0.1)\n"
        b"loss = (w * 2).sum()\nloss.backward()\nopt.step(); loss.backward()\n"
    )
    report = check_source(source, [_DropsRepeatUnsafely], FixMode.UNSAFE, "train.py")
    assert report.rewritten is None
    assert [f.fix for f in report.findings] == [None]
    assert "would remove or move an optimizer update" in report.findings[0].message


def test_writing_through_a_symlink_fixes_its_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "train.py"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    link = tmp_path / "train.py"
    link.symlink_to(target)
    write_atomically(link, b"new\n", expected=b"old\n")
    assert link.is_symlink() and target.read_bytes() == b"new\n"
    assert [p.name for p in target.parent.iterdir()] == ["train.py"]  # no temporary left behind


def test_a_file_edited_after_it_was_read_is_not_written(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(b"edited meanwhile\n")
    with pytest.raises(FileChanged):
        write_atomically(script, b"fixed\n", expected=b"as read\n")
    assert script.read_bytes() == b"edited meanwhile\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


@pytest.mark.parametrize(
    ("source", "parsed"),
    [
        (b'"""Kept for backward compatibility."""\nx = 1\n', False),
        (b"loss.backward ()\n", True),
        (b"accelerator.backward(\n    loss)\n", True),
        (b"grads = torch.autograd.grad(y, x)\n", True),
        (b"def training_step(self, batch, i):\n    return self(batch).sum()\n", False),
        (b"class Model(L.LightningModule):\n    def training_step(self, batch, i):\n        return self(batch).sum()\n", True),
        (b"from transformers import Seq2SeqTrainer as T\nclass Tr(T):\n    def compute_loss(self, m, x):\n        return m(**x).loss\n", True),
        (b"from transformers import Trainer\ndef training_step(batch):\n    return batch\n", False),
        # The hook named, not defined: a trainer runs a class of another file.
        (b"import lightning as L\nfrom model import Net\nassert isinstance(Net(), L.LightningModule) and Net.training_step\n", False),
        (b"class Model(L.LightningModule):\n    async def training_step (self, batch, i):\n        return batch\n", True),
    ],
)
def test_only_text_that_may_backward_is_parsed(source, parsed):
    assert may_backward(source) is parsed
    # What the prefilter skips is still compiled: a file that does not parse never reads as clean.
    [error] = check_source(source + b"(", all_rules(), FixMode.NONE, "a.py").errors
    assert error.startswith("a.py:") and "cannot parse" in error


_UPDATE = "def update(loss, optimizer):\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
_CRITERION = "class Criterion:\n    def __call__(self, out):\n        loss = out.pow(2).mean()\n        loss.backward()\n        return loss\n"
_SETUP = "import torch\n\nmodel = torch.nn.Linear(3, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"


@pytest.mark.parametrize(
    ("steps", "train", "code"),
    [
        # train.py never writes "backward": the prefilter skips it unless steps.py, read from
        # disk, exports a helper it names.
        (
            _UPDATE,
            "from .steps import update\n" + _SETUP + "for batch in torch.randn(4, 2, 3):\n    out = model(batch)\n"
            "    update(out.mean(), optimizer)\n    update(out.pow(2).mean(), optimizer)\n",
            "GF002",
        ),
        # A class is imported, not its method: the file is checked with the method's summary.
        (
            _CRITERION,
            "from .steps import Criterion\n" + _SETUP + "criterion = Criterion()\n"
            "for batch in torch.randn(4, 2, 3):\n    loss = criterion(model(batch))\n    loss.backward()\n",
            "GF001",
        ),
    ],
)
def test_a_file_is_checked_with_the_summaries_of_the_helpers_it_imports(tmp_path, steps, train, code):
    """Read from disk whether the run names the helper's module or not; without its summaries (an
    empty project) the file holds no finding."""
    (tmp_path / "pkg").mkdir()
    steps_path, train_path = tmp_path / "pkg" / "steps.py", tmp_path / "pkg" / "train.py"
    steps_path.write_text(steps)
    train_path.write_text(train)
    assert not check.check_file(train_path, all_rules(), FixMode.NONE, project={}).findings
    assert [finding.code for finding in check.check_file(train_path, all_rules()).findings] == [code]
    steps_report, train_report = run.check_files([steps_path, train_path], all_rules(), FixMode.NONE, jobs=1)
    assert [finding.code for finding in train_report.findings] == [code]
    assert not steps_report.findings


def test_check_paths_gives_each_file_its_configuration_and_says_each_file_checked(tmp_path):
    double = (FIXTURES / "gf001_duplicate_backward" / "unsafe_attribute_out_loss" / "before.py").read_bytes()
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        for name in ("one.py", "two.py", "three.py"):
            (tmp_path / folder / name).write_bytes(double)
    (tmp_path / "b" / "pyproject.toml").write_text('[tool.gradfix]\nselect = ["GF002"]\n')
    progress = []
    checked = run.check_paths([tmp_path], jobs=1, progress=lambda done, total: progress.append((done, total)))
    codes = {Path(report.path).relative_to(tmp_path).parts[0]: {f.code for f in report.findings} for report in checked.reports}
    assert codes == {"a": {"GF001"}, "b": set()}
    assert progress == [(done, 6) for done in range(1, 7)] and not checked.errors


def test_a_method_of_a_helper_class_makes_a_file_worth_parsing_only_where_the_file_calls_it():
    project = {"pkg.steps.Wrapper.step": ExportedSummary("Wrapper.step", ("loss",), (), None)}
    helpers = written_names(project)
    assert helpers == {(b"steps", b"Wrapper", b"step")}
    source = b"from pkg.steps import Wrapper\nwrapper = Wrapper()\n"
    assert not may_backward(source, helpers)
    assert may_backward(source + b"wrapper.step (loss)\n", helpers)
    assert not may_backward(source.replace(b"steps", b"other") + b"wrapper.step(loss)\n", helpers)


def test_a_diff_counts_lines_as_git_does(tmp_path):
    """A form feed (an old page break) or a line separator inside a line does not end it for git:
    the diff must not split it, or `git apply` rejects the hunk."""
    before = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
    paged = before.replace("    optimizer.zero_grad()\n", "    optimizer.zero_grad()  # \x0c page \u2028 break\n")
    assert paged != before
    report = check_source(paged.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert report.changed
    diff = files.unified_diff(report)
    assert "    optimizer.zero_grad()  # \x0c page \u2028 break\n" in diff
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "train.py").write_bytes(report.original)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply"], cwd=tmp_path, input=diff.encode(), check=True)
    assert (tmp_path / "train.py").read_bytes() == report.rewritten


def test_walks_skip_what_the_exclusions_name_and_take_what_is_named():
    from gradfix.codemods.config import Config

    tree = FIXTURES / "gf002_separate_backwards"
    default = files.collect_files([tree]).files
    assert default and all(path.name in ("before.py", "after.py", "ok.py", "reported.py") for path in default)
    excluded = Config(extend_exclude=("after.py", "ok_*")).excludes
    kept = files.collect_files([tree], excluded).files
    assert kept and all(path.name != "after.py" and not path.parent.name.startswith("ok_") for path in kept)
    named = tree / "shared_trunk_for_loop" / "after.py"
    assert files.collect_files([named], excluded).files == [named]
    assert files.collect_files([named], excluded, excluded_named=excluded).files == []


def _worker_and_item(items):
    return [(os.getpid(), item) for item in items]


def test_a_run_forks_its_workers_once_and_answers_in_the_order_of_its_items():
    known = []
    with run._Workers(2, []) as workers:
        # handed out longest first (the item is its cost), known in whatever order they finish
        first = workers.map(_worker_and_item, list(range(12)), lambda indexes, results: known.extend(indexes), cost=lambda item: item)
        second = workers.map(_worker_and_item, list(range(12, 20)))
    assert [item for _, item in first + second] == list(range(20))
    assert sorted(known) == list(range(12))
    assert len({worker for worker, _ in first + second}) <= 2 and os.getpid() not in {worker for worker, _ in first}


def test_every_tree_is_built_and_analysed_with_the_cycle_collector_held_back(monkeypatch):
    """A skeleton and its analysis are freed by reference counting; at Python's default threshold the
    cycle collector scans them over and over while they are built. The module's exports and the
    check of the same bytes share one analysis, held back from the collector from one to the other."""
    thresholds = []
    building, analysing = check.build_skeleton, check.FileAnalysis.__init__
    monkeypatch.setattr(check, "build_skeleton", lambda *args: thresholds.append(gc.get_threshold()[0]) or building(*args))
    monkeypatch.setattr(check.FileAnalysis, "__init__", lambda self, *args: thresholds.append(gc.get_threshold()[0]) or analysing(self, *args))
    source = (FIXTURES / "gf001_duplicate_backward" / "module_level_no_loop" / "before.py").read_bytes()
    check.exports_and_report(source, all_rules(), FixMode.NONE, "train.py")
    check.module_exports(source)
    check.check_source(source, all_rules(), FixMode.NONE, "train.py", {})
    default = gc.get_threshold()[0]
    assert len(thresholds) >= 5 and default not in thresholds
