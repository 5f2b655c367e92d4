"""The skeleton: the LibCST tree the analysis reads, built from Python's own parser.

LibCST's parse is most of a check's cost, and most of that is building whitespace, comments and
punctuation, which no question of the analysis is about. ``ast.parse`` costs a quarter of it. The
skeleton is a tree of LibCST's own node classes, shaped as LibCST's parser shapes the same source
(the same statements, lines, blocks, expressions, names and literals), with every whitespace,
comment and punctuation field left at its default. The analysis and the rules run on it unchanged.

A skeleton only answers whether a file has anything to report. Its whitespace is not the file's,
so it cannot place a finding or render a fix: a file whose skeleton has findings is parsed again by
LibCST (``parse.py``) and checked in full. Syntax the skeleton does not build (``match``,
``except*``), and code Python's parser does not read, are parsed by LibCST from the start.

The rules must answer the same on it as on LibCST's tree (the contract is in ``rule.py``): where
the analysis compares two expressions (the tests of two ``if`` statements, the optimizers two steps
name), it compares their ``expression_key``, which leaves out the parentheses and spacing the
skeleton does not have.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import types
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import libcst as cst

from .analysis import LAYOUT


class Unsupported(Exception):
    """The source holds syntax the skeleton does not build: LibCST parses it instead."""


@dataclass(frozen=True)
class Skeleton:
    module: cst.Module
    # What it was built from. Placing the nodes of LibCST's tree of the same source reads it too,
    # and compiling it tells whether this Python runs the file.
    python_tree: ast.Module


def build_skeleton(text: str, encoding: str) -> Skeleton | None:
    """The skeleton of a file's ``text`` (decoded from ``encoding``, as ``source.decoded`` does);
    None where it cannot be built: syntax it does not build (``Unsupported``), code Python's parser
    does not read, or a failure of its own, which LibCST's parse does not share."""
    try:
        with warnings.catch_warnings():  # the checked code's own warnings are not gradfix's to print
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
            return Skeleton(_Builder(text, encoding).module(tree), tree)
    except (Exception, RecursionError, MemoryError):
        return None


_new = object.__new__
_REQUIRED = object()


@functools.cache
def _defaults(node_type: type[cst.CSTNode]) -> dict[str, Any]:
    """Each field of ``node_type`` with its default. A default made by a factory is made once and
    shared by every skeleton node: it is whitespace or punctuation, which the syntax tree leaves
    out, so no node of the tree is shared."""
    defaults = {}
    for field in dataclasses.fields(node_type):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = _REQUIRED
        if isinstance(value, cst.CSTNode) and type(value) not in LAYOUT:
            raise TypeError(f"{node_type.__name__}.{field.name}: a shared default would be in the syntax tree")
        defaults[field.name] = value
    return defaults


class _Builders(dict):
    """For each node class, a function that builds its node from keyword arguments without the
    class's constructor (which validates every field, as nodes built from a parse do not need),
    each field not given left at its default. Written out per class, like the constructor
    ``dataclasses`` writes: a loop over the fields costs three times as much. Each field is set
    by its slot's own setter, which ``object.__setattr__`` looks up by name on the class at every
    call (the skeletons of Lightning's parsed files: 1.42 -> 1.14 s CPU)."""

    def __missing__(self, node_type: type[cst.CSTNode]) -> Callable[..., Any]:
        defaults = _defaults(node_type)
        parameters = ", ".join(name if value is _REQUIRED else f"{name}=defaults[{name!r}]" for name, value in defaults.items())
        body = "".join(f"    set_{name}(node, {name})\n" for name in defaults)
        namespace = {"defaults": defaults, "new": _new, "node_type": node_type}
        namespace.update((f"set_{name}", _slot(node_type, name).__set__) for name in defaults)
        signature = f"*, {parameters}" if parameters else ""
        exec(f"def build({signature}):\n    node = new(node_type)\n{body}    return node\n", namespace)
        self[node_type] = namespace["build"]
        return namespace["build"]


def _slot(node_type: type[cst.CSTNode], name: str) -> types.MemberDescriptorType:
    """The slot that holds the field ``name`` of ``node_type``'s nodes (LibCST's node classes
    have slots)."""
    slot = inspect.getattr_static(node_type, name)
    if type(slot) is not types.MemberDescriptorType:
        raise TypeError(f"{node_type.__name__}.{name} is not a slot")
    return slot


_BUILDERS = _Builders()


_BINARY = {
    ast.Add: cst.Add,
    ast.Sub: cst.Subtract,
    ast.Mult: cst.Multiply,
    ast.MatMult: cst.MatrixMultiply,
    ast.Div: cst.Divide,
    ast.FloorDiv: cst.FloorDivide,
    ast.Mod: cst.Modulo,
    ast.Pow: cst.Power,
    ast.LShift: cst.LeftShift,
    ast.RShift: cst.RightShift,
    ast.BitOr: cst.BitOr,
    ast.BitXor: cst.BitXor,
    ast.BitAnd: cst.BitAnd,
}
_AUGMENTED = {
    ast.Add: cst.AddAssign,
    ast.Sub: cst.SubtractAssign,
    ast.Mult: cst.MultiplyAssign,
    ast.MatMult: cst.MatrixMultiplyAssign,
    ast.Div: cst.DivideAssign,
    ast.FloorDiv: cst.FloorDivideAssign,
    ast.Mod: cst.ModuloAssign,
    ast.Pow: cst.PowerAssign,
    ast.LShift: cst.LeftShiftAssign,
    ast.RShift: cst.RightShiftAssign,
    ast.BitOr: cst.BitOrAssign,
    ast.BitXor: cst.BitXorAssign,
    ast.BitAnd: cst.BitAndAssign,
}
_UNARY = {ast.UAdd: cst.Plus, ast.USub: cst.Minus, ast.Not: cst.Not, ast.Invert: cst.BitInvert}
_BOOLEAN = {ast.And: cst.And, ast.Or: cst.Or}
_COMPARISON = {
    ast.Eq: cst.Equal,
    ast.NotEq: cst.NotEqual,
    ast.Lt: cst.LessThan,
    ast.LtE: cst.LessThanEqual,
    ast.Gt: cst.GreaterThan,
    ast.GtE: cst.GreaterThanEqual,
    ast.Is: cst.Is,
    ast.IsNot: cst.IsNot,
    ast.In: cst.In,
    ast.NotIn: cst.NotIn,
}
# Operators and punctuation are leaves without a place in the syntax tree: one of each serves all.
_OPERATORS = {op: node_type() for table in (_BINARY, _UNARY, _BOOLEAN, _COMPARISON) for op, node_type in table.items()}
_AUGMENTED_OPERATORS = {op: node_type() for op, node_type in _AUGMENTED.items()}
_DOT = cst.Dot()
_CONVERSIONS = {-1: None, 115: "s", 114: "r", 97: "a"}
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_STRING_PREFIX = re.compile(r"[rRbBuUfF]*")
_TRIPLE_QUOTES = ('"""', "'''")


def _keyword_statement(node_type: type[cst.CSTNode]) -> Callable[[Any, ast.stmt], cst.BaseSmallStatement]:
    """``pass``, ``break``, ``continue``: a statement that is its keyword."""
    return lambda builder, node: _BUILDERS[node_type]()


class _Builder:
    """Builds one module's skeleton from Python's tree of it, reading the text where the tree does
    not say what LibCST keeps: how literals are spelled, ``elif``, a block on its header's line."""

    def __init__(self, text: str, encoding: str = "utf-8") -> None:
        self._text = text
        self._encoding = encoding
        # Python's parser counts columns in UTF-8 bytes of the decoded text, line by line.
        encoded = text.encode("utf-8", "surrogatepass")
        starts = [0, *(match.end() for match in _LINE_BREAK.finditer(encoded))]
        self._utf8 = [encoded[start:end] for start, end in zip(starts, [*starts[1:], len(encoded)])]

    # text ------------------------------------------------------------------------------------
    def _segment(self, node: ast.AST) -> str:
        """The source text of ``node``."""
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return self._utf8[first][node.col_offset : node.end_col_offset].decode("utf-8")
        parts = [self._utf8[first][node.col_offset :]]
        parts += self._utf8[first + 1 : last]
        parts.append(self._utf8[last][: node.end_col_offset])
        return b"".join(parts).decode("utf-8")

    def _before_on_line(self, node: ast.AST) -> bytes:
        return self._utf8[node.lineno - 1][: node.col_offset]

    def _on_header_line(self, node: ast.stmt) -> bool:
        """Whether a block's first statement is on its header's logical line: after the colon on
        the same line, or on a line the colon's line continues with a backslash."""
        if self._before_on_line(node).strip():
            return True
        line = node.lineno - 2
        while line >= 0 and self._utf8[line].rstrip(b"\r\n").endswith(b"\\"):
            before = self._utf8[line].rstrip(b"\r\n")[:-1].strip()
            if before:
                return before.endswith(b":")
            line -= 1
        return False

    def _identifier(self, spelled: str) -> cst.Name:
        """A name as the source spells it. Python's parser gives identifiers in their NFKC form
        (``ŀ`` becomes ``l·``), LibCST as written: a file that spells one otherwise is not built."""
        if not spelled.isascii() and spelled not in self._text:
            raise Unsupported("an identifier not in its normal form")
        return _name(spelled)

    def _dotted(self, name: str) -> cst.Name | cst.Attribute:
        parts = name.split(".")
        result: cst.Name | cst.Attribute = self._identifier(parts[0])
        for part in parts[1:]:
            result = _BUILDERS[cst.Attribute](value=result, attr=self._identifier(part))
        return result

    def _starts_with(self, node: ast.AST, word: bytes) -> bool:
        return self._utf8[node.lineno - 1][node.col_offset : node.col_offset + len(word)] == word

    # module and blocks -----------------------------------------------------------------------
    def module(self, tree: ast.Module) -> cst.Module:
        return _BUILDERS[cst.Module](body=self._statements(tree.body), encoding=self._encoding)

    def _statements(self, statements: Sequence[ast.stmt]) -> list[cst.BaseStatement]:
        """Statements as LibCST groups them: small statements on one line (``a = 1; b = 2``) share
        a ``SimpleStatementLine``."""
        lines: list[cst.BaseStatement] = []
        small: list[cst.BaseSmallStatement] = []
        previous_end = -1
        for statement in statements:
            builder = self._compound.get(type(statement))
            if builder is not None:
                if small:
                    lines.append(_BUILDERS[cst.SimpleStatementLine](body=small))
                    small = []
                lines.append(builder(self, statement))
                previous_end = -1
                continue
            if small and statement.lineno != previous_end:
                lines.append(_BUILDERS[cst.SimpleStatementLine](body=small))
                small = []
            small.append(self._small(statement))
            previous_end = statement.end_lineno
        if small:
            lines.append(_BUILDERS[cst.SimpleStatementLine](body=small))
        return lines

    def _suite(self, statements: Sequence[ast.stmt]) -> cst.BaseSuite:
        """A block: on the header's line (``if x: y``) or indented below it."""
        if self._on_header_line(statements[0]):
            return _BUILDERS[cst.SimpleStatementSuite](body=[self._small(s) for s in statements])
        return _BUILDERS[cst.IndentedBlock](body=self._statements(statements))

    def _else(self, statements: Sequence[ast.stmt]) -> cst.Else | None:
        return _BUILDERS[cst.Else](body=self._suite(statements)) if statements else None

    # compound statements ---------------------------------------------------------------------
    def _if(self, node: ast.If) -> cst.If:
        orelse: cst.If | cst.Else | None
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and self._starts_with(node.orelse[0], b"elif"):
            orelse = self._if(node.orelse[0])
        else:
            orelse = self._else(node.orelse)
        return _BUILDERS[cst.If](test=self._expression(node.test), body=self._suite(node.body), orelse=orelse)

    def _for(self, node: ast.For | ast.AsyncFor) -> cst.For:
        return _BUILDERS[cst.For](
            target=self._expression(node.target),
            iter=self._expression(node.iter),
            body=self._suite(node.body),
            orelse=self._else(node.orelse),
            asynchronous=_BUILDERS[cst.Asynchronous]() if isinstance(node, ast.AsyncFor) else None,
        )

    def _while(self, node: ast.While) -> cst.While:
        return _BUILDERS[cst.While](test=self._expression(node.test), body=self._suite(node.body), orelse=self._else(node.orelse))

    def _with(self, node: ast.With | ast.AsyncWith) -> cst.With:
        items = [
            _BUILDERS[cst.WithItem](
                item=self._expression(item.context_expr),
                asname=None if item.optional_vars is None else _BUILDERS[cst.AsName](name=self._expression(item.optional_vars)),
            )
            for item in node.items
        ]
        return _BUILDERS[cst.With](
            items=items,
            body=self._suite(node.body),
            asynchronous=_BUILDERS[cst.Asynchronous]() if isinstance(node, ast.AsyncWith) else None,
        )

    def _try(self, node: ast.Try) -> cst.Try:
        handlers = [
            _BUILDERS[cst.ExceptHandler](
                body=self._suite(handler.body),
                type=self._optional(handler.type),
                name=None if handler.name is None else _BUILDERS[cst.AsName](name=self._identifier(handler.name)),
            )
            for handler in node.handlers
        ]
        return _BUILDERS[cst.Try](
            body=self._suite(node.body),
            handlers=handlers,
            orelse=self._else(node.orelse),
            finalbody=_BUILDERS[cst.Finally](body=self._suite(node.finalbody)) if node.finalbody else None,
        )

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> cst.FunctionDef:
        return _BUILDERS[cst.FunctionDef](
            name=self._identifier(node.name),
            params=self._parameters(node.args),
            body=self._suite(node.body),
            decorators=self._decorators(node.decorator_list),
            returns=None if node.returns is None else _BUILDERS[cst.Annotation](annotation=self._expression(node.returns)),
            asynchronous=_BUILDERS[cst.Asynchronous]() if isinstance(node, ast.AsyncFunctionDef) else None,
        )

    def _class(self, node: ast.ClassDef) -> cst.ClassDef:
        return _BUILDERS[cst.ClassDef](
            name=self._identifier(node.name),
            body=self._suite(node.body),
            bases=[self._positional_argument(base) for base in node.bases],
            keywords=[self._keyword_argument(keyword) for keyword in node.keywords],
            decorators=self._decorators(node.decorator_list),
        )

    def _decorators(self, decorators: Sequence[ast.expr]) -> list[cst.Decorator]:
        return [_BUILDERS[cst.Decorator](decorator=self._expression(d)) for d in decorators]

    def _unsupported(self, node: ast.stmt) -> cst.BaseStatement:
        raise Unsupported(type(node).__name__)

    _compound: dict[type, Callable[[Any, Any], cst.BaseStatement]] = {
        ast.If: _if,
        ast.For: _for,
        ast.AsyncFor: _for,
        ast.While: _while,
        ast.With: _with,
        ast.AsyncWith: _with,
        ast.Try: _try,
        ast.FunctionDef: _function,
        ast.AsyncFunctionDef: _function,
        ast.ClassDef: _class,
        ast.Match: _unsupported,
    }
    if hasattr(ast, "TryStar"):
        _compound[ast.TryStar] = _unsupported

    # small statements ------------------------------------------------------------------------
    def _small(self, node: ast.stmt) -> cst.BaseSmallStatement:
        builder = self._simple.get(type(node))
        if builder is None:
            raise Unsupported(type(node).__name__)
        return builder(self, node)

    def _expr(self, node: ast.Expr) -> cst.Expr:
        return _BUILDERS[cst.Expr](value=self._expression(node.value))

    def _assign(self, node: ast.Assign) -> cst.Assign:
        targets = [_BUILDERS[cst.AssignTarget](target=self._expression(t)) for t in node.targets]
        return _BUILDERS[cst.Assign](targets=targets, value=self._expression(node.value))

    def _augmented(self, node: ast.AugAssign) -> cst.AugAssign:
        return _BUILDERS[cst.AugAssign](
            target=self._expression(node.target),
            operator=_AUGMENTED_OPERATORS[type(node.op)],
            value=self._expression(node.value),
        )

    def _annotated(self, node: ast.AnnAssign) -> cst.AnnAssign:
        return _BUILDERS[cst.AnnAssign](
            target=self._expression(node.target),
            annotation=_BUILDERS[cst.Annotation](annotation=self._expression(node.annotation)),
            value=self._optional(node.value),
        )

    def _return(self, node: ast.Return) -> cst.Return:
        return _BUILDERS[cst.Return](value=self._optional(node.value))

    def _delete(self, node: ast.Delete) -> cst.Del:
        if len(node.targets) == 1:
            return _BUILDERS[cst.Del](target=self._expression(node.targets[0]))
        return _BUILDERS[cst.Del](target=_BUILDERS[cst.Tuple](elements=self._elements(node.targets)))

    def _raise(self, node: ast.Raise) -> cst.Raise:
        cause = None if node.cause is None else _BUILDERS[cst.From](item=self._expression(node.cause))
        return _BUILDERS[cst.Raise](exc=self._optional(node.exc), cause=cause)

    def _assert(self, node: ast.Assert) -> cst.Assert:
        return _BUILDERS[cst.Assert](test=self._expression(node.test), msg=self._optional(node.msg))

    def _global(self, node: ast.Global | ast.Nonlocal) -> cst.Global | cst.Nonlocal:
        names = [_BUILDERS[cst.NameItem](name=self._identifier(n)) for n in node.names]
        return _BUILDERS[cst.Global if isinstance(node, ast.Global) else cst.Nonlocal](names=names)

    def _import(self, node: ast.Import) -> cst.Import:
        return _BUILDERS[cst.Import](names=[self._alias(alias) for alias in node.names])

    def _import_from(self, node: ast.ImportFrom) -> cst.ImportFrom:
        names: Sequence[cst.ImportAlias] | cst.ImportStar
        if len(node.names) == 1 and node.names[0].name == "*":
            names = _BUILDERS[cst.ImportStar]()
        else:
            names = [self._alias(alias) for alias in node.names]
        return _BUILDERS[cst.ImportFrom](
            module=None if node.module is None else self._dotted(node.module),
            names=names,
            relative=[_DOT] * node.level,
        )

    def _alias(self, alias: ast.alias) -> cst.ImportAlias:
        asname = None if alias.asname is None else _BUILDERS[cst.AsName](name=self._identifier(alias.asname))
        return _BUILDERS[cst.ImportAlias](name=self._dotted(alias.name), asname=asname)

    _simple: dict[type, Callable[[Any, Any], cst.BaseSmallStatement]] = {
        ast.Expr: _expr,
        ast.Assign: _assign,
        ast.AugAssign: _augmented,
        ast.AnnAssign: _annotated,
        ast.Return: _return,
        ast.Delete: _delete,
        ast.Raise: _raise,
        ast.Assert: _assert,
        ast.Global: _global,
        ast.Nonlocal: _global,
        ast.Import: _import,
        ast.ImportFrom: _import_from,
        ast.Pass: _keyword_statement(cst.Pass),
        ast.Break: _keyword_statement(cst.Break),
        ast.Continue: _keyword_statement(cst.Continue),
    }

    # parameters ------------------------------------------------------------------------------
    def _parameters(self, arguments: ast.arguments) -> cst.Parameters:
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
        params = [self._param(a, d, "") for a, d in zip(positional, defaults)]
        split = len(arguments.posonlyargs)
        star_arg: Any
        if arguments.vararg is not None:
            star_arg = self._param(arguments.vararg, None, "*")
        elif arguments.kwonlyargs:
            star_arg = _BUILDERS[cst.ParamStar]()
        else:
            star_arg = cst.MaybeSentinel.DEFAULT
        return _BUILDERS[cst.Parameters](
            params=params[split:],
            star_arg=star_arg,
            kwonly_params=[self._param(a, d, "") for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)],
            star_kwarg=None if arguments.kwarg is None else self._param(arguments.kwarg, None, "**"),
            posonly_params=params[:split],
            posonly_ind=_BUILDERS[cst.ParamSlash]() if split else cst.MaybeSentinel.DEFAULT,
        )

    def _param(self, argument: ast.arg, default: ast.expr | None, star: str) -> cst.Param:
        annotation = None if argument.annotation is None else _BUILDERS[cst.Annotation](annotation=self._expression(argument.annotation))
        return _BUILDERS[cst.Param](name=self._identifier(argument.arg), annotation=annotation, default=self._optional(default), star=star)

    # expressions -----------------------------------------------------------------------------
    def _optional(self, node: ast.expr | None) -> cst.BaseExpression | None:
        return None if node is None else self._expression(node)

    def _expression(self, node: ast.expr) -> Any:
        builder = self._expressions.get(type(node))
        if builder is None:
            raise Unsupported(type(node).__name__)
        return builder(self, node)

    def _name_expression(self, node: ast.Name) -> cst.Name:
        return self._identifier(node.id)

    def _constant(self, node: ast.Constant) -> cst.BaseExpression:
        value = node.value
        if value is None or value is True or value is False:
            return _name(repr(value))
        if value is Ellipsis:
            return _BUILDERS[cst.Ellipsis]()
        if isinstance(value, (str, bytes)):
            return self._strings(node)
        if isinstance(value, complex):
            return _BUILDERS[cst.Imaginary](value=self._segment(node))
        if isinstance(value, float):
            return _BUILDERS[cst.Float](value=self._segment(node))
        return _BUILDERS[cst.Integer](value=self._segment(node))

    def _strings(self, node: ast.Constant | ast.JoinedStr) -> cst.BaseString:
        """A literal, or literals written side by side (``"a" f"{b}"``), which LibCST nests to the
        right."""
        pieces = _literals(self._segment(node))
        if len(pieces) == 1 and isinstance(node, ast.JoinedStr):
            return self._formatted_string(pieces[0], node.values)
        built = [self._literal(piece) for piece in pieces]
        result = built[-1]
        for left in reversed(built[:-1]):
            result = _BUILDERS[cst.ConcatenatedString](left=left, right=result)
        return result

    def _literal(self, text: str) -> cst.BaseString:
        if "f" not in _STRING_PREFIX.match(text).group().lower():
            return _BUILDERS[cst.SimpleString](value=text)
        # One f-string of several side by side: parsed on its own, and read from its own text.
        alone = text.join("()")
        parsed = ast.parse(alone, mode="eval").body
        return _Builder(alone)._formatted_string(text, parsed.values)

    def _formatted_string(self, text: str, values: Sequence[ast.expr]) -> cst.FormattedString:
        prefix = _STRING_PREFIX.match(text).group()
        quote = text[len(prefix) : len(prefix) + 3]
        if quote not in _TRIPLE_QUOTES:
            quote = quote[0]
        return _BUILDERS[cst.FormattedString](parts=self._formatted_parts(values), start=prefix + quote, end=quote)

    def _formatted_parts(self, values: Sequence[ast.expr]) -> list[cst.BaseFormattedStringContent]:
        parts: list[cst.BaseFormattedStringContent] = []
        for value in values:
            if isinstance(value, ast.FormattedValue):
                spec = None if value.format_spec is None else self._formatted_parts(value.format_spec.values)
                parts.append(
                    _BUILDERS[cst.FormattedStringExpression](
                        expression=self._expression(value.value),
                        conversion=_CONVERSIONS[value.conversion],
                        format_spec=spec,
                    )
                )
            else:  # the text between expressions; its exact spelling is nothing the analysis reads
                parts.append(_BUILDERS[cst.FormattedStringText](value=str(value.value)))
        return parts

    def _attribute(self, node: ast.Attribute) -> cst.Attribute:
        return _BUILDERS[cst.Attribute](value=self._expression(node.value), attr=self._identifier(node.attr))

    def _subscript(self, node: ast.Subscript) -> cst.Subscript:
        index = node.slice
        if isinstance(index, ast.Tuple) and index.elts and not self._parenthesized(index):
            elements = [self._subscript_element(e) for e in index.elts]
        else:
            elements = [self._subscript_element(index)]
        return _BUILDERS[cst.Subscript](value=self._expression(node.value), slice=elements)

    def _subscript_element(self, node: ast.expr) -> cst.SubscriptElement:
        if isinstance(node, ast.Slice):
            inner: cst.BaseSlice = _BUILDERS[cst.Slice](
                lower=self._optional(node.lower),
                upper=self._optional(node.upper),
                step=self._optional(node.step),
            )
        elif isinstance(node, ast.Starred):
            inner = _BUILDERS[cst.Index](value=self._expression(node.value), star="*")
        else:
            inner = _BUILDERS[cst.Index](value=self._expression(node))
        return _BUILDERS[cst.SubscriptElement](slice=inner)

    def _parenthesized(self, node: ast.Tuple) -> bool:
        """Whether a tuple is written in parentheses of its own: ``a[(1, 2)]``, not ``a[(1), 2]``."""
        text = self._segment(node)
        if not (text.startswith("(") and text.endswith(")")):
            return False
        try:
            inner = ast.parse(text[1:-1].join("[]"), mode="eval").body
        except SyntaxError:  # the first "(" closes before the end
            return False
        return isinstance(inner, ast.List) and len(inner.elts) == len(node.elts)

    def _call(self, node: ast.Call) -> cst.Call:
        arguments: list[tuple[tuple[int, int], cst.Arg]] = []
        for argument in node.args:
            arguments.append(((argument.lineno, argument.col_offset), self._positional_argument(argument)))
        for keyword in node.keywords:
            arguments.append(((keyword.lineno, keyword.col_offset), self._keyword_argument(keyword)))
        arguments.sort(key=lambda pair: pair[0])
        return _BUILDERS[cst.Call](func=self._expression(node.func), args=[a for _, a in arguments])

    def _positional_argument(self, node: ast.expr) -> cst.Arg:
        if isinstance(node, ast.Starred):
            return _BUILDERS[cst.Arg](value=self._expression(node.value), star="*")
        return _BUILDERS[cst.Arg](value=self._expression(node))

    def _keyword_argument(self, node: ast.keyword) -> cst.Arg:
        if node.arg is None:
            return _BUILDERS[cst.Arg](value=self._expression(node.value), star="**")
        return _BUILDERS[cst.Arg](value=self._expression(node.value), keyword=self._identifier(node.arg))

    def _binary(self, node: ast.BinOp) -> cst.BinaryOperation:
        return _BUILDERS[cst.BinaryOperation](
            left=self._expression(node.left),
            operator=_OPERATORS[type(node.op)],
            right=self._expression(node.right),
        )

    def _unary(self, node: ast.UnaryOp) -> cst.UnaryOperation:
        return _BUILDERS[cst.UnaryOperation](operator=_OPERATORS[type(node.op)], expression=self._expression(node.operand))

    def _boolean(self, node: ast.BoolOp) -> cst.BooleanOperation:
        """``a and b and c`` nests to the left, as LibCST reads it."""
        operator = _OPERATORS[type(node.op)]
        result = self._expression(node.values[0])
        for value in node.values[1:]:
            result = _BUILDERS[cst.BooleanOperation](left=result, operator=operator, right=self._expression(value))
        return result

    def _compare(self, node: ast.Compare) -> cst.Comparison:
        comparisons = [
            _BUILDERS[cst.ComparisonTarget](operator=_OPERATORS[type(op)], comparator=self._expression(comparator))
            for op, comparator in zip(node.ops, node.comparators)
        ]
        return _BUILDERS[cst.Comparison](left=self._expression(node.left), comparisons=comparisons)

    def _if_expression(self, node: ast.IfExp) -> cst.IfExp:
        return _BUILDERS[cst.IfExp](test=self._expression(node.test), body=self._expression(node.body), orelse=self._expression(node.orelse))

    def _lambda(self, node: ast.Lambda) -> cst.Lambda:
        return _BUILDERS[cst.Lambda](params=self._parameters(node.args), body=self._expression(node.body))

    def _named(self, node: ast.NamedExpr) -> cst.NamedExpr:
        return _BUILDERS[cst.NamedExpr](target=self._expression(node.target), value=self._expression(node.value))

    def _await(self, node: ast.Await) -> cst.Await:
        return _BUILDERS[cst.Await](expression=self._expression(node.value))

    def _yield(self, node: ast.Yield | ast.YieldFrom) -> cst.Yield:
        if isinstance(node, ast.YieldFrom):
            return _BUILDERS[cst.Yield](value=_BUILDERS[cst.From](item=self._expression(node.value)))
        return _BUILDERS[cst.Yield](value=self._optional(node.value))

    def _elements(self, values: Sequence[ast.expr]) -> list[cst.BaseElement]:
        return [
            _BUILDERS[cst.StarredElement](value=self._expression(v.value))
            if isinstance(v, ast.Starred)
            else _BUILDERS[cst.Element](value=self._expression(v))
            for v in values
        ]

    def _sequence(self, node: ast.Tuple | ast.List | ast.Set) -> cst.BaseExpression:
        node_type = {ast.Tuple: cst.Tuple, ast.List: cst.List, ast.Set: cst.Set}[type(node)]
        return _BUILDERS[node_type](elements=self._elements(node.elts))

    def _dict(self, node: ast.Dict) -> cst.Dict:
        elements = [
            _BUILDERS[cst.StarredDictElement](value=self._expression(value))
            if key is None
            else _BUILDERS[cst.DictElement](key=self._expression(key), value=self._expression(value))
            for key, value in zip(node.keys, node.values)
        ]
        return _BUILDERS[cst.Dict](elements=elements)

    def _comprehension_clauses(self, generators: Sequence[ast.comprehension]) -> cst.CompFor:
        inner = None
        for generator in reversed(generators):
            inner = _BUILDERS[cst.CompFor](
                target=self._expression(generator.target),
                iter=self._expression(generator.iter),
                ifs=[_BUILDERS[cst.CompIf](test=self._expression(test)) for test in generator.ifs],
                inner_for_in=inner,
                asynchronous=_BUILDERS[cst.Asynchronous]() if generator.is_async else None,
            )
        return inner

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> cst.BaseExpression:
        node_type = {ast.ListComp: cst.ListComp, ast.SetComp: cst.SetComp, ast.GeneratorExp: cst.GeneratorExp}[type(node)]
        return _BUILDERS[node_type](elt=self._expression(node.elt), for_in=self._comprehension_clauses(node.generators))

    def _dict_comprehension(self, node: ast.DictComp) -> cst.DictComp:
        return _BUILDERS[cst.DictComp](
            key=self._expression(node.key),
            value=self._expression(node.value),
            for_in=self._comprehension_clauses(node.generators),
        )

    def _starred(self, node: ast.Starred) -> cst.StarredElement:
        return _BUILDERS[cst.StarredElement](value=self._expression(node.value))

    _expressions: dict[type, Callable[[Any, Any], Any]] = {
        ast.Name: _name_expression,
        ast.Constant: _constant,
        ast.JoinedStr: _strings,
        ast.Attribute: _attribute,
        ast.Subscript: _subscript,
        ast.Call: _call,
        ast.BinOp: _binary,
        ast.UnaryOp: _unary,
        ast.BoolOp: _boolean,
        ast.Compare: _compare,
        ast.IfExp: _if_expression,
        ast.Lambda: _lambda,
        ast.NamedExpr: _named,
        ast.Await: _await,
        ast.Yield: _yield,
        ast.YieldFrom: _yield,
        ast.Tuple: _sequence,
        ast.List: _sequence,
        ast.Set: _sequence,
        ast.Dict: _dict,
        ast.ListComp: _comprehension,
        ast.SetComp: _comprehension,
        ast.GeneratorExp: _comprehension,
        ast.DictComp: _dict_comprehension,
        ast.Starred: _starred,
    }


def _name(value: str) -> cst.Name:
    return _BUILDERS[cst.Name](value=value)


def _literals(text: str) -> list[str]:
    """The string literals written side by side in ``text`` (with comments, line continuations and
    whitespace between them)."""
    pieces = []
    index, end = 0, len(text)
    while index < end:
        char = text[index]
        if char in " \t\r\n\\\f":
            index += 1
            continue
        if char == "#":
            newline = text.find("\n", index)
            index = end if newline < 0 else newline
            continue
        prefix = _STRING_PREFIX.match(text, index).end()
        quote = text[prefix : prefix + 3] if text[prefix : prefix + 3] in _TRIPLE_QUOTES else text[prefix]
        close = prefix + len(quote)
        while True:
            close = text.find(quote, close)
            if close < 0:
                raise Unsupported("unterminated literal")
            backslashes = len(text[:close]) - len(text[:close].rstrip("\\"))
            if backslashes % 2 == 0:
                break
            close += 1
        pieces.append(text[index : close + len(quote)])
        index = close + len(quote)
    return pieces
