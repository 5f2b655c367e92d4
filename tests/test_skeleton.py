"""The skeleton (``gradfix.codemods.skeleton.build_skeleton``) is LibCST's tree of the same source, less whitespace,
comments and punctuation: compared node by node with what LibCST's parser builds, on edge cases of
the builder's own, the fixtures and the real code beside this checkout. On the fixtures, the same
parse also stands for the tree LibCST's trusted parse (``parse.parse_trusted``) must build."""

import dataclasses
from typing import Iterator

import hypothesmith
import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings

from gradfix.codemods import check, parse
from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.source import decoded
from gradfix.codemods.registry import all_rules
from gradfix.codemods.skeleton import build_skeleton

from .conftest import FIXTURES, SHARED_CASES

SHARED_CORPUS = SHARED_CASES.parent / "corpus"

_OPERATOR_BASES = (cst.BaseBinaryOp, cst.BaseAugOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp)
_FORMATTING_FIELDS = {
    "lpar",
    "rpar",
    "leading_lines",
    "leading_whitespace",
    "lines_after_decorators",
    "header",
    "footer",
    "indent",
    "default_indent",
    "default_newline",
    "has_trailing_newline",
    "encoding",
    "comma",
    "semicolon",
    "dot",
    "equal",
    "colon",
    "first_colon",
    "second_colon",
    "lbracket",
    "rbracket",
    "lbrace",
    "rbrace",
    "star_tok",
    "trailing_whitespace",
    "newline",
    "asname_comma",
}


def differences(built: object, parsed: object, path: str = "module") -> Iterator[str]:
    """Where two trees differ in anything but formatting: node types, names, literals, operators,
    stars, the shape of statements, blocks and sequences. The text between an f-string's
    expressions is left out (the skeleton keeps its value, not its spelling), and so is the
    conversion of ``f"{x=}"`` (Python's parser does not tell it from ``f"x={x!r}"``)."""
    if isinstance(built, (list, tuple)) and isinstance(parsed, (list, tuple)):
        if len(built) != len(parsed):
            yield f"{path}: {len(built)} items, LibCST has {len(parsed)}"
            return
        for index, (a, b) in enumerate(zip(built, parsed)):
            yield from differences(a, b, f"{path}[{index}]")
        return
    if type(built) is not type(parsed):
        yield f"{path}: {type(built).__name__}, LibCST has {type(parsed).__name__}"
        return
    if not isinstance(built, cst.CSTNode):
        if built != parsed:
            yield f"{path}: {built!r}, LibCST has {parsed!r}"
        return
    if isinstance(built, _OPERATOR_BASES):
        return  # the same operator
    for field in dataclasses.fields(built):
        name = field.name
        if name in _FORMATTING_FIELDS or name.startswith("whitespace"):
            continue
        a, b = getattr(built, name), getattr(parsed, name)
        if type(built) is cst.FormattedString and name == "parts":
            a, b = ([p for p in parts if type(p) is cst.FormattedStringExpression] for parts in (a, b))
        elif (type(built) is cst.FormattedStringText and name == "value") or (type(built) is cst.FormattedStringExpression and name == "conversion"):
            continue
        yield from differences(a, b, f"{path}.{name}")


EDGE_CASES = {
    "if_elif_else_if": "if a:\n    pass\nelif b:\n    pass\nelse:\n    if c:\n        pass\n",
    "suites_on_the_header_line": "if a: b = 1; c = 2\nelse: d()\nwhile x: break\nclass C: pass\n",
    "small_statements_on_one_line": "a = 1; b = (2,\n  3); c = 4\nd = 5\n",
    "concatenated_strings": 'x = ("a"  # note\n     \'b\' f"{c!r:>{w}}" r"\\d")\ny = "q" "r" "s"\n',
    "strings_with_escapes": 'x = "a\\"b" + \'c\\\\\' + """d"e""" + f"{x=}"\n',
    "subscripts": "a[(1, 2)]\na[1, 2]\na[(1), 2]\na[(1), (2)]\na[1:2, ::3]\na[()]\na[x,]\n",
    "calls": "f(a, *b, c=1, **d)\nf(x for x in y)\nf(**a, b=1)\nf(a)(b)[c].d(e=f)\n",
    "parameters": "def f(a, /, b=1, *c, d, e=2, **g) -> int: pass\ndef h(*, k): pass\nlambda a, *b, c=1, **d: 0\n",
    "decorated_async": "@a.b(c)\n@d\nasync def f():\n    async with x as y, z:\n        async for i in j:\n            await k\n",
    "comprehensions": "[x for x in y if x if z for w in x]\n{k: v for k, v in d}\n{s for s in t}\n(g async for g in h)\n",
    "operators": "x = -a ** ~b @ c // d % e << f >> g & h | i ^ j\nx += 1; x @= m; x **= 2\ny = a < b <= c is not d not in e\n",
    "booleans": "x = a and b and c or d and not e\n",
    "assignments": "a = b = c\n(a, *b), c = d\n[e, f] = g\nh: int\ni: int = 1\nj.k[l] = m\n(n := 1)\n",
    "imports": "import a.b.c as d, e\nfrom . import f\nfrom ..g.h import (i as j, k)\nfrom l import *\n",
    "statements": "global a, b\ndel a, b\ndel (c)\nassert x, 'y'\nraise E from f\nraise\nreturn\nyield\nyield from z\n",
    "try": "try:\n    a\nexcept (E, F) as e:\n    b\nexcept G:\n    c\nelse:\n    d\nfinally:\n    e\n",
    "with_parentheses": "with (open(a) as b, open(c) as d):\n    pass\n",
    "literals": "x = [1, 2.5, 3j, 0x1F, 1_000, ..., None, True, b'z', {1, 2}, {'a': 1, **b}, (), (1,)]\n",
    "non_ascii_columns": "é = f('ü', g=\"ñ\")  # ä\nx = é; y = '漢字' 'かな'\n",
    "line_continuations": "x = 1 + \\\n    2\nif a and \\\n   b: pass\nclass A:\\\n    pass\nif b:  # c \\\n    pass\n",
    "nested_functions_and_classes": "class A(B, metaclass=M):\n    def f(self):\n        class C:\n            x = 1\n        return C\n",
}


def _sources() -> Iterator[tuple[str, bytes]]:
    for name, code in EDGE_CASES.items():
        yield name, code.encode()
    yield "crlf_line_endings", b"if a:\r\n    b = 1; c = 2\r\nd = 'x' 'y'\r\n"
    yield "latin_1_declared", "# -*- coding: latin-1 -*-\nx = 'caf\xe9'; y = f(x)\n".encode("latin-1")
    yield "byte_order_mark", b"\xef\xbb\xbfx = 1; y = 'z'\n"
    for root in (FIXTURES, SHARED_CASES, SHARED_CORPUS):
        if root.is_dir():
            for path in sorted(root.rglob("*.py")):
                yield str(path.relative_to(root.parent)), path.read_bytes()


FIXTURE_NAMES = {str(path.relative_to(FIXTURES.parent)) for path in FIXTURES.rglob("*.py")}


@pytest.mark.parametrize(("name", "source"), list(_sources()), ids=lambda value: value if isinstance(value, str) else "")
def test_the_skeleton_is_the_tree_libcst_builds_less_its_formatting(name, source):
    """On a fixture, LibCST's trusted parse (which skips the check of each node it builds) must build
    the very tree its validating parse builds: one parse, most of this test's cost, serves both
    comparisons. (Not on the real code: there the second parse would double the test's cost.)"""
    parsed = cst.parse_module(source)
    built = build_skeleton(*decoded(source, name))
    assert built is not None, f"{name}: no skeleton"
    assert list(differences(built.module, parsed)) == []
    if name in FIXTURE_NAMES:
        assert parse.parse_trusted(source).deep_equals(parsed), f"{name}: the trusted parse builds another tree"


def test_a_difference_of_shape_is_found():
    """The comparison itself: it tells a suite from a block, an operator from another, and ``elif``
    from ``else: if``."""
    pairs = [
        ("if a: b\n", "if a:\n    b\n"),
        ("x = a + b\n", "x = a - b\n"),
        ("x += 1\n", "x -= 1\n"),
        ("if a:\n    pass\nelif b:\n    pass\n", "if a:\n    pass\nelse:\n    if b:\n        pass\n"),
        ("a[(1, 2)]\n", "a[1, 2]\n"),
        ("x = 'a'\n", 'x = "a"\n'),
    ]
    for first, second in pairs:
        assert list(differences(build_skeleton(first, "utf-8").module, cst.parse_module(second))), (first, second)


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles what it generates
@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(code=hypothesmith.from_grammar() | hypothesmith.from_node())
def test_the_skeleton_of_generated_code_is_the_tree_libcst_builds_or_none(code):
    """Generated code finds what the edge cases above came from: a block continued onto the next
    line with a backslash, identifiers Python's parser gives in another normal form."""
    try:
        parsed = cst.parse_module(code)
    except (cst.ParserSyntaxError, RecursionError):
        return
    built = build_skeleton(code, "utf-8")
    if built is not None:
        assert list(differences(built.module, parsed)) == []


@pytest.mark.parametrize(
    "source",
    [
        b"match command:\n    case [x]:\n        pass\n",  # not built: LibCST parses it
        b"def f(:\n",  # Python's parser does not read it
        b"print 'python 2'\n",
        "x\u0140 = 1\n".encode(),  # Python reads the name as "xl\u00b7"
    ],
)
def test_no_skeleton_where_it_would_not_be_the_tree(source):
    assert build_skeleton(*decoded(source, "source.py")) is None


def test_a_file_the_skeleton_finds_nothing_in_is_never_parsed_by_libcst(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("LibCST parsed a file whose skeleton has no finding")

    monkeypatch.setattr(check.cst, "parse_module", fail)
    report = check_source((FIXTURES / "gf001_duplicate_backward" / "ok_lightning_gradient_penalty_returned_loss" / "ok.py").read_bytes(), all_rules())
    assert report.findings == [] and report.errors == [] and report.internal_errors == []


def test_a_file_without_a_skeleton_is_checked_in_full():
    source = b"""import torch
model = torch.nn.Linear(2, 1)
match 1:
    case _:
        loss = model(torch.ones(2)).sum()
        loss.backward()
        loss.backward()
"""
    report = check_source(source, all_rules(), FixMode.NONE, "match.py")
    assert [(f.code, f.line) for f in report.findings] == [("GF001", 7)]


def test_a_noqa_comment_silences_only_what_it_silences_in_the_file():
    """The skeleton renders ``print("step", loss.backward())`` on one line, the line of the comment;
    in the file the second backward is on the next line, which no comment silences."""
    source = b"""import torch
model = torch.nn.Linear(2, 1)
for x in [torch.ones(2)]:
    loss = model(x).sum()
    loss.backward()
    print("step",  # noqa: GF001
          loss.backward())
"""
    report = check_source(source, all_rules(), FixMode.NONE, "noqa.py")
    assert [(f.code, f.line) for f in report.findings] == [("GF001", 7)]


def test_a_file_with_findings_is_read_by_pythons_parser_once(monkeypatch):
    """The skeleton's tree of the file also places the findings of the full check and tells
    whether this Python compiles the file."""
    import ast

    source = (FIXTURES / "gf001_duplicate_backward" / "for_loop" / "before.py").read_bytes()
    check_source(source, all_rules(), FixMode.NONE, "before.py")  # (the syntax tree reads LibCST's classes once)
    parses = []
    original = ast.parse
    monkeypatch.setattr(ast, "parse", lambda *args, **kwargs: parses.append(1) or original(*args, **kwargs))
    report = check_source(source, all_rules(), FixMode.NONE, "before.py")
    assert [f.code for f in report.findings] == ["GF001"] and len(parses) == 1
