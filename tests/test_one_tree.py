"""One tree's answer: ``gradfix check`` first runs the rules on the file's skeleton (no parentheses,
whitespace or comments) and parses the file with LibCST for the full check only when the skeleton
has a finding. Findings must not depend on which tree was built: here every fixture, notebook and
script of ``../shared`` goes through both, and each tree's rules must find the same.

Each file is checked once, through the shipped entry point (``check_source``) with its gate
watched: the gate still runs on the skeleton and its answer is kept, then the full check runs
whatever the gate said, on LibCST's parse of the file. So each file is parsed once by each parser.
The comparison is made at two levels:

- the shipped answer (nothing where the gate found nothing, the full check's findings otherwise)
  is the full check's, code, line, column and message;
- the rules find the same codes, as many times, on the skeleton as on LibCST's tree. Where the
  skeleton has a finding the shipped answer is the full check's anyway, so this is what keeps a
  finding from depending on an unrelated one elsewhere in the file (which sends the file down the
  full path). Lines and messages are not compared here: a skeleton places nothing and renders its
  own spelling.
"""

import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Sequence

import pytest

from gradfix.codemods import check
from gradfix.codemods.analysis import FileAnalysis
from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.registry import all_rules
from gradfix.codemods.rule import Violation, without_repeats
from gradfix.codemods.skeleton import Skeleton

from .conftest import FIXTURES

TESTS = Path(__file__).parent
SHARED = TESTS.resolve().parents[1] / "shared"
RULES = all_rules()


def _fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.name in ("before.py", "reported.py", "ok.py") or p.suffix == ".ipynb") + sorted(
        (TESTS / "notebooks").glob("*.ipynb")
    )


def _shared_files() -> list[Path]:
    failures = SHARED / "real-failures"
    return [
        *sorted(failures.glob("set-*/cases/*/before.py")),
        *sorted(failures.glob("set-*/negatives/*/*.py")),
        *sorted((SHARED / "cases").rglob("*.py")),
        *sorted((SHARED / "corpus").rglob("*.py")),
    ]


class _Watched:
    """Checks through ``check_source`` with its skeleton gate watched and overruled: the gate's
    answer is kept and the full check runs after it. The skeleton's ``FileAnalysis`` is kept, and
    so are the violations the full check finds before ``# noqa`` comments silence any."""

    def __init__(self, setattr_: Callable[[object, str, object], None]) -> None:
        self.gate_found_nothing: bool | None = None  # None: no skeleton, the file went down the full path
        self.skeleton: Skeleton | None = None
        self.analyses: list[FileAnalysis] = []
        self.found_in_full: list[Violation] = []
        gate, analysis, unrepeated = check._skeleton_finds_nothing, check.FileAnalysis, check.without_repeats

        def watched_gate(*arguments) -> bool:
            self.gate_found_nothing = gate(*arguments)
            self.skeleton = arguments[1]
            return False

        def kept_analysis(*arguments) -> FileAnalysis:
            self.analyses.append(analysis(*arguments))
            return self.analyses[-1]

        def kept_violations(violations: Sequence[Violation]) -> list[Violation]:
            self.found_in_full = unrepeated(violations)
            return self.found_in_full

        setattr_(check, "_skeleton_finds_nothing", watched_gate)
        setattr_(check, "FileAnalysis", kept_analysis)
        setattr_(check, "without_repeats", kept_violations)

    def check(self, data: bytes, path: str) -> tuple[list[tuple], list[tuple], Counter, Counter]:
        """The shipped findings, the full check's, and the codes the rules find on each tree
        (before ``# noqa`` comments, which only the full check reads)."""
        self.gate_found_nothing, self.skeleton, self.analyses, self.found_in_full = None, None, [], []
        report = check_source(data, RULES, FixMode.NONE, path)
        assert report.errors == [] and report.internal_errors == [], (report.errors, report.internal_errors)
        full = [(f.code, f.line, f.column, f.cell, f.message) for f in report.findings]
        in_full = Counter(v.finding.code for v in self.found_in_full)
        if self.gate_found_nothing is None:  # prefiltered, or no skeleton: one path only
            return full, full, in_full, in_full
        if self.gate_found_nothing:
            return [], full, Counter(), in_full
        # The gate stopped at its first finding: the rest, from its facts. (The modules the file
        # imports are analysed too, before it where their summaries are not kept yet.)
        skeleton = next(analysis for analysis in self.analyses if self.skeleton and analysis.module is self.skeleton.module)
        in_skeleton = Counter(v.finding.code for v in without_repeats([v for rule in RULES for v in rule(skeleton).violations()]))
        return full, full, in_skeleton, in_full


_watched_here: _Watched | None = None  # in a worker process: installed once, for the worker's life


def _watch_in_worker() -> None:
    global _watched_here
    _watched_here = _Watched(setattr)


def _disagreement(path: Path) -> tuple[bool, str | None]:
    """Whether the skeleton was checked (not so for a file the prefilter skips, or one without a
    skeleton), and where the two trees' answers for ``path`` differ, in words (None where they agree)."""
    shipped, full, in_skeleton, in_full = _watched_here.check(path.read_bytes(), str(path))
    if shipped == full and in_skeleton == in_full:
        return _watched_here.gate_found_nothing is not None, None
    return True, f"{path}: shipped {shipped}, full {full}; the rules find {dict(in_skeleton)} on the skeleton, {dict(in_full)} on LibCST's tree"


def _answers_compared(paths: list[Path]) -> int:
    """How many of ``paths`` went through both trees; every file's answers must agree. The files
    are shared among forked processes (as ``gradfix check`` shares them), longest first, so that a
    long file does not finish last alone."""
    by_size = sorted(paths, key=lambda path: -path.stat().st_size)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=get_context("fork"), initializer=_watch_in_worker) as pool:
        answers = list(pool.map(_disagreement, by_size))
    assert [disagreement for _, disagreement in answers if disagreement is not None] == []
    return sum(compared for compared, _ in answers)


def test_every_fixture_gets_one_answer_from_both_trees():
    paths = _fixture_files()
    before = [p for p in paths if p.name == "before.py"]
    assert before and _answers_compared(paths) >= len(before)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared scripts are not at {SHARED}")
def test_every_shared_script_gets_one_answer_from_both_trees():
    paths = _shared_files()
    failing = [p for p in paths if p.parent.parent.name == "cases" and "real-failures" in p.parts]
    assert failing and _answers_compared(paths) >= len(failing)


# One optimizer stepping twice between two backwards of one graph (not two taking turns).
STEPPED_TWICE = """import torch
model = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    shared = model(x)
    first = shared.sum()
    second = (shared * 2).sum()
    first.backward()
    {0}.step()
    {1}.step()
    second.backward()
"""


def _from_template(template: str, plain: str, respelled: str) -> tuple[bytes, bytes]:
    """``template`` with its second place written as its first, and written otherwise."""
    return template.format(plain, plain).encode(), template.format(plain, respelled).encode()


def _steps_in_parentheses(fixture: str) -> tuple[bytes, bytes]:
    """A fixture, and the same with each ``x.step()`` written ``(x).step()``: which modules the
    optimizer updates is looked up by the optimizer's name."""
    source = (FIXTURES / fixture / "before.py").read_text()
    return source.encode(), re.sub(r"\b([A-Za-z_][\w.]*)\.step\(\)", r"(\1).step()", source).encode()


@pytest.mark.parametrize(
    ("plain", "respelled"),
    [
        _from_template(STEPPED_TWICE, "opt", "(opt)"),
        _from_template(STEPPED_TWICE, "opt", "( opt )"),
        _steps_in_parentheses("gf005_gan_detach/dcgan_module_level_epoch_batch_loops"),
        _steps_in_parentheses("gf005_gan_detach/wgan_clipping_backward_with_gradient_args"),
    ],
    ids=["optimizer_in_parentheses", "optimizer_spaced", "gan_dcgan", "gan_wgan"],
)
def test_parentheses_and_spaces_change_no_finding(plain, respelled, monkeypatch):
    """Python reads both spellings as one expression, and so does the skeleton: the findings
    (codes, lines and messages) are the same for both, and the same on each tree."""
    watched = _Watched(monkeypatch.setattr)
    answers = []
    for source in (plain, respelled):
        shipped, full, in_skeleton, in_full = watched.check(source, "respelled.py")
        assert shipped == full and in_skeleton == in_full, (shipped, full, in_skeleton, in_full)
        answers.append([(code, line, message) for code, line, _, _, message in shipped])
    assert answers[0] == answers[1] and answers[0], answers
