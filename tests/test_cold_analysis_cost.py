"""What a cold check computes, and how often, beyond ``test_analysis_cost``: counted, never timed
(the figures live in benchmarks/check_speed.py)."""

import abc
import dataclasses
import inspect
import random
import re
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from gradfix.codemods.analysis import FileAnalysis
from gradfix.codemods.analysis.syntax import dotted_name
from gradfix.codemods.analysis.tree import SyntaxTree
from gradfix.codemods.analysis.values import NUMBER, TENSOR, Origin, Value
from gradfix.codemods.parse import parse_decoded
from gradfix.codemods.registry import all_rules
from gradfix.codemods.skeleton import _BUILDERS, build_skeleton
from gradfix.codemods.source import words_and_symbols

from .conftest import FIXTURES
from .test_skeleton import differences

CASE = FIXTURES / "gf001_duplicate_backward" / "unsafe_loss_helper_in_its_own_module"


# A training loop followed by code that reads what it left, with no backward after it: GF008 reads
# the names each following statement reads and writes, and finds nothing.
TRAINED_THEN_EVALUATED = textwrap.dedent(
    """
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
    last = loss.item()
    report = {"loss": last, "weight": model.weight.tolist()}
    print(report)
    """
)


def test_the_statements_after_a_loop_are_read_from_the_module_s_one_walk(visits):
    """GF008 asks what each statement after a loop reads and writes; on a long script that was a
    walk of LibCST's (which rebuilds every node it passes) per statement and loop."""
    data = TRAINED_THEN_EVALUATED.encode()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    rule = next(rule for rule in all_rules() if rule.CODE == "GF008")
    assert analysis.loops and list(rule(analysis).violations()) == []
    assert visits == []


@pytest.fixture
def instance_checks(monkeypatch):
    """The functions that made each ``isinstance`` of a LibCST class that went through ABCMeta's
    ``__instancecheck__`` (any that does not find the node's own class)."""
    callers = []
    check = abc.ABCMeta.__instancecheck__

    def counted(cls, instance):
        if cls.__module__.startswith("libcst"):
            callers.append(sys._getframe(1).f_code.co_name)
        return check(cls, instance)

    monkeypatch.setattr(abc.ABCMeta, "__instancecheck__", counted)
    return callers


def test_the_interpreter_tells_nodes_apart_by_their_own_class(instance_checks):
    """Each statement the dataflow walks, each target it assigns and each name it asks a module or
    a summary of is told apart by its class, not by ``isinstance`` of LibCST's classes: a failed
    one goes through ABCMeta, 3.8 million times in a cold check of diffusers (4% of its
    profile)."""
    data = (CASE / "before.py").read_bytes()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    assert analysis.backward_sites
    hot = {"_exec_statement", "_exec_small", "_assign", "target_names", "module", "_note_stored", "class_name_of", "_summary_of"}
    assert hot & set(instance_checks) == set()


def test_the_analysis_and_the_rules_tell_nodes_apart_by_their_own_class_in_every_fixture(instance_checks):
    """The tests of names, calls, unpacked targets, ``if`` chains, module bindings and logged values
    the analysis and GF007 make of each node: about 920,000 failed ``isinstance`` of LibCST's
    classes went through ABCMeta in a cold check of diffusers' 124 parsed files (each ten times an
    exact-class test)."""
    hot = {
        "_called_class", "_detaching_call", "_read_call", "_may_keep_its_arguments", "_function_call", "saves_tensors",
        "unpacked", "appended", "narrowed", "_exec_if_chain", "visit_Assign", "_built_modules", "_bind", "visit_Call",
        "_bind_optimizers", "_bind_framework", "creates_parameter", "_constructed_module", "_module_of", "_nested",
        "_names_automatic_optimization", "_call_summary", "_kept_value", "is_call",
    }  # fmt: skip
    analysed = 0
    for before in sorted(FIXTURES.glob("*/*/before.py")):
        data = before.read_bytes()
        analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
        for rule in all_rules():
            list(rule(analysis).violations())
        analysed += bool(analysis.backward_sites)
    assert analysed > 50
    assert hot & set(instance_checks) == set()


def test_classes_compared_by_identity_have_no_subclasses():
    """``type(node) is cst.Name`` answers as ``isinstance(node, cst.Name)`` only for a class no
    other class derives from: each LibCST class the analysis compares so has none."""
    compared = set()
    for path in (Path(__file__).parents[1] / "codemods").rglob("*.py"):
        compared |= set(re.findall(r"(?:type\([\w.\[\]]+\)|_type) is (?:not )?cst\.(\w+)", path.read_text()))
    assert {"Name", "Attribute", "Subscript", "SimpleStatementLine", "Assign"} <= compared
    assert [name for name in sorted(compared) if getattr(cst, name).__subclasses__()] == []


def test_the_dataflow_copies_values_without_dataclasses_replace(monkeypatch):
    """Joining paths, reading an attribute and taking an item copy a value with one field changed,
    hundreds of thousands of times in a long file: ``dataclasses.replace`` reads the class's
    fields and runs its constructor each time (143,000 calls, 3.6 % of diffusers' cold profile)."""
    replaced = []
    replace = dataclasses.replace
    monkeypatch.setattr(dataclasses, "replace", lambda obj, **changes: replaced.append(obj) or replace(obj, **changes))
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("gradfix.codemods.analysis.") and getattr(module, "replace", None) is replace:
            monkeypatch.setattr(module, "replace", dataclasses.replace)
    data = (CASE / "before.py").read_bytes()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    assert analysis.backward_sites
    assert [value for value in replaced if isinstance(value, Value)] == []


def test_a_changed_value_is_the_value_replace_makes():
    value = Value(graph=True, structure=TENSOR, guessed=True)
    assert value.changed(unbound=True) == dataclasses.replace(value, unbound=True)
    assert value.changed(unbound=True).__dict__ == dataclasses.replace(value, unbound=True).__dict__
    assert value.changed(unbound=True) is not value and not value.unbound


def test_values_and_origins_are_made_as_dataclasses_makes_them_without_a_setattr_per_field():
    """The analysis makes about 450,000 values and 100,000 origins in a cold check of diffusers'
    124 parsed files: the constructor ``dataclasses`` writes for a frozen class calls
    ``object.__setattr__`` once a field. Theirs store the fields in the instance's dict, the same
    fields in the same order, with the same defaults and factories."""
    for made in (Value, Origin):
        assert "__setattr__" not in made.__init__.__code__.co_names
        made_parameters = inspect.signature(made).parameters.values()
        assert [(p.name, p.kind) for p in made_parameters] == [(p.name, p.kind) for p in inspect.signature(reference_of(made)).parameters.values()]
    node, statement = cst.Name("x"), cst.SimpleStatementLine([])
    origin = Origin(node, statement)
    for arguments, keywords in [((), {}), ((True, frozenset({origin}), TENSOR), {"unread": True}), ((), {"freed": True, "structure": NUMBER})]:
        value = Value(*arguments, **keywords)
        assert list(vars(value).items()) == list(vars(reference_of(Value)(*arguments, **keywords)).items())
        assert value == Value(*arguments, **keywords) and hash(value) == hash(Value(*arguments, **keywords))
    assert list(vars(origin).items()) == [("node", node), ("statement", statement), ("possible", False), ("part", None)]
    assert Value().origins == frozenset() and Value(origins=frozenset({origin})).origins == {origin}
    with pytest.raises(dataclasses.FrozenInstanceError):
        Value().graph = True  # type: ignore[misc]


def reference_of(made: type) -> type:
    """A frozen dataclass with ``made``'s fields, whose constructor ``dataclasses`` writes."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory)) for f in dataclasses.fields(made)]
    return dataclasses.make_dataclass("Reference", fields, frozen=True)


def test_a_skeleton_node_s_fields_are_set_by_their_slots():
    """A skeleton builds about 750,000 nodes for diffusers' parsed files, each field set by
    ``object.__setattr__``, which looks the field's slot up on the class at each call: each
    builder holds its class's slots' setters."""
    source = "loss = criterion(model(x), y)\nloss.backward()\n"
    built = build_skeleton(source, "utf-8")
    assert built is not None and list(differences(built.module, cst.parse_module(source))) == []
    for node_type in (cst.Name, cst.Call, cst.Attribute, cst.Assign):
        assert object.__setattr__ not in _BUILDERS[node_type].__globals__.values()


def test_words_and_symbols_are_the_matches_of_a_word_or_a_symbol():
    """A file's words and symbols are counted from its bytes' kinds, not found one match object at
    a time (diffusers' files are mostly over 70 KB, where they are counted): the same count as
    the expression's matches, whatever the bytes."""
    word_or_symbol = re.compile(rb"[\w\x80-\xff]+|[^\w\s]")
    generator = random.Random(41)
    alphabet = [*range(256), *b" \t\n\x0b\x0c\r\x1c_a9.\x80\xff"]
    samples = [bytes(generator.choice(alphabet) for _ in range(generator.randrange(40))) for _ in range(2000)]
    samples += [(CASE / "before.py").read_bytes(), b"", b"w", b" w", b"\xff\xfe(", "é = 1 # ünïcode".encode()]
    for sample in samples:
        assert words_and_symbols(sample) == len(word_or_symbol.findall(sample)), sample


def chained_name(node: cst.CSTNode) -> str | None:
    """``dotted_name`` as defined link by link (``a.b`` of ``a``, then ``a.b.c`` of ``a.b``)."""
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        base = chained_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def test_a_dotted_name_is_read_in_one_call_whatever_its_length():
    """``dotted_name`` runs for nearly every expression the analysis reads (4.3 million calls in a
    cold check of diffusers), and a third of those calls were its own, one for each attribute of
    a chain: it follows a chain in one call, and names each node as the definition link by link
    does."""
    own_code = dotted_name.__code__
    from_itself = []

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code is own_code:
            from_itself.append(frame.f_back.f_code is own_code)

    data = (CASE / "before.py").read_bytes()
    sys.setprofile(profiler)
    try:
        analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
        for rule in all_rules():
            list(rule(analysis).violations())
    finally:
        sys.setprofile(None)
    assert len(from_itself) > 200 and sum(from_itself) == 0  # (the analysis reads hundreds of names: the profile saw them)
    expressions = ["x", "self.x", "torch.nn.functional.mse_loss", "a.b.c.d.e", "f(x).y", "x[0].y.z", "(a + b).c", "1", "'s'.join"]
    nodes = [cst.parse_expression(expression) for expression in expressions]
    nodes += SyntaxTree(analysis.module).findall(analysis.module, cst.Attribute)
    assert [dotted_name(node) for node in nodes] == [chained_name(node) for node in nodes]
    assert sum(dotted_name(node) is None for node in nodes) >= 4


def test_a_skeleton_s_nodes_are_built_by_the_code_that_reads_their_syntax():
    """A skeleton builds about 750,000 nodes for diffusers' parsed files: each builder is called
    by the code that reads the node's syntax, not through a function that takes the node's class
    and its fields as keywords (a call and a dict of keywords more per node)."""
    callers = []

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "build" and frame.f_back is not None:
            caller = frame.f_back.f_code
            callers.append((Path(caller.co_filename).name, bool(caller.co_flags & inspect.CO_VARKEYWORDS)))

    sys.setprofile(profiler)
    try:
        built = build_skeleton((CASE / "before.py").read_text(), "utf-8")
    finally:
        sys.setprofile(None)
    assert built is not None and len(callers) > 150
    assert set(callers) == {("skeleton.py", False)}
