"""Fuzzing for crashes and non-parsing output. The fixtures' training code (each backwards a graph,
so the analysis runs) gets arbitrary Python spliced in (hypothesmith, from the language's grammar)
or its lines mutated (deleted, repeated, swapped, indented, a backward copied elsewhere).
Whatever comes of it, checking and fixing with unsafe fixes never raises, never reports an
internal error, and any rewrite parses and compiles.

Most of the time goes to checking the fixtures (a tenth of a second each), which bounds the
examples run here.
"""

import textwrap

import hypothesmith
import libcst as cst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.registry import all_rules

from .conftest import FIXTURES

SOURCES = sorted(path.read_text() for path in FIXTURES.rglob("*.py"))
MUTATIONS = ("delete", "repeat", "swap_with_next", "indent", "dedent", "copy_a_backward_here")


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip())] if line.strip() else ""


def spliced(source: str, position: int, code: str) -> str:
    """``code`` inserted before one of the lines of ``source``, indented like that line (so that
    it lands in the loop, the function or the branch the line is in)."""
    lines = source.splitlines(keepends=True)
    at = position % (len(lines) + 1)
    inserted = textwrap.indent(code, _indentation(lines[at]) if at < len(lines) else "")
    if inserted and not inserted.endswith("\n"):
        inserted += "\n"
    return "".join(lines[:at]) + inserted + "".join(lines[at:])


@st.composite
def mutated_fixtures(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(SOURCES)).splitlines(keepends=True)
    backwards = [line.strip() for line in lines if "backward" in line and not line.lstrip().startswith("#")]
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        mutation = draw(st.sampled_from(MUTATIONS))
        if mutation == "delete":
            del lines[at]
        elif mutation == "repeat":
            lines.insert(at, lines[at])
        elif mutation == "swap_with_next" and at + 1 < len(lines):
            lines[at], lines[at + 1] = lines[at + 1], lines[at]
        elif mutation == "indent":
            lines[at] = "    " + lines[at]
        elif mutation == "dedent":
            lines[at] = lines[at].removeprefix("    ")
        elif mutation == "copy_a_backward_here" and backwards:
            lines.insert(at, _indentation(lines[at]) + draw(st.sampled_from(backwards)) + "\n")
        if not lines:
            break
    return "".join(lines)


def _check_and_fix(source: str) -> None:
    report = check_source(source.encode(), all_rules(), FixMode.UNSAFE)
    assert report.internal_errors == []
    if report.changed:
        cst.parse_module(report.rewritten)
        compile(report.rewritten, "<rewritten>", "exec", dont_inherit=True)


# hypothesmith's strategy is drawn by @given itself: drawn inside a composite strategy it is
# fifteen times slower.
@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=st.sampled_from(SOURCES), position=st.integers(0, 10**4), code=hypothesmith.from_grammar())
def test_generated_code_spliced_into_training_code(source: str, position: int, code: str):
    _check_and_fix(spliced(source, position, code))


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(source=mutated_fixtures())
def test_mutated_training_code(source: str):
    _check_and_fix(source)
