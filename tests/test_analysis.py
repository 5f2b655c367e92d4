"""The shared analysis on its own: which names carry graph, where it was built, what loops carry."""

import gc
import textwrap
from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.registry import all_rules
from gradfix.codemods.analysis.syntax import is_detach, is_name
from gradfix.codemods.analysis.tree import LAYOUT, SyntaxTree, find_nodes
from gradfix.codemods.analysis.torch_names import ModuleInfo
from gradfix.codemods.analysis import (
    NUMBER,
    TENSOR,
    UNKNOWN,
    Carried,
    FileAnalysis,
    GradientEffect,
    ListOf,
    Origin,
    TupleOf,
    Value,
    assigned_names,
    expand,
    read_names,
)


def analyse(code: str) -> FileAnalysis:
    header = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    return FileAnalysis(cst.parse_module(header + textwrap.dedent(code)))


def backwarded(code: str):
    """The value of the last backwarded tensor in ``code``."""
    return analyse(code).backward_sites[-1].value


@pytest.mark.parametrize(
    "expression",
    [
        "model(x)",
        "model(x).sum()",
        "F.mse_loss(model(x), y)",
        "criterion(model(x), y)",
        "torch.cat([model(x), x])",
        "(model(x) * 2)[0]",
        "w * x",
        "x @ w",
        "helper(model, x)",
    ],
)
def test_graph_carrying_values(expression):
    value = backwarded(
        f"""
        model = nn.Linear(2, 2)
        criterion = nn.MSELoss()
        w = torch.randn(2, 2, requires_grad=True)
        x, y = torch.randn(2, 2), torch.randn(2, 2)
        out = {expression}
        out.backward()
        """
    )
    assert value.graph and any(isinstance(o, Origin) for o in value.origins)


@pytest.mark.parametrize(
    "expression",
    [
        "model(x).detach()",
        "model(x).item()",
        "model(x).tolist()",
        "model(x).data",
        "torch.zeros(2, 2)",
        "nn.ReLU()(x)",
        "float(model(x).sum())",
        "x * 2",
        "torch.eq(model(x).argmax(1), x[0]).sum().float()",  # comparisons and indices have no history
        "model(x).max(1)[1].long()",
        "(model(x) > 0).float()",
        "torch.multinomial(model(x).softmax(-1), 1)",
    ],
)
def test_values_without_graph(expression):
    value = backwarded(
        f"""
        model = nn.Linear(2, 2)
        x = torch.randn(2, 2)
        out = {expression}
        out.backward()
        """
    )
    assert not value.graph


def test_no_grad_blocks_and_decorators_build_no_graph():
    analysis = analyse(
        """
        model = nn.Linear(2, 2)
        with torch.no_grad():
            target = model(torch.ones(2))
        target.backward()

        @torch.no_grad()
        def evaluate():
            out = model(torch.ones(2))
            out.backward()
        """
    )
    assert [site.value.graph for site in analysis.backward_sites] == [False, False]


def test_parameters_are_leaves_with_no_origin():
    value = backwarded(
        """
        w = nn.Parameter(torch.ones(2))
        w.backward()
        """
    )
    assert value.graph and not value.origins


def test_two_heads_share_the_encoder_origin_and_two_calls_share_nothing():
    analysis = analyse(
        """
        encoder = nn.Linear(2, 2)
        head_a = nn.Linear(2, 1)
        head_b = nn.Linear(2, 1)
        x = torch.ones(2)
        features = encoder(x)
        a = head_a(features).sum()
        b = head_b(features).sum()
        c = encoder(x).sum()
        a.backward()
        b.backward()
        c.backward()
        """
    )
    a, b, c = (set(site.value.origins) for site in analysis.backward_sites)
    assert a & b and not (a & c) and not (b & c)


def test_tuple_unpacking_and_recurrent_structures():
    analysis = analyse(
        """
        lstm = nn.LSTM(2, 3)
        hidden = (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3))
        for step in range(3):
            output, hidden = lstm(torch.ones(4, 1, 2), hidden)
            output.sum().backward()
        """
    )
    loop = analysis.loops[0]
    assert loop.entry["hidden"].structure == TupleOf((TENSOR, TENSOR))
    assert loop.back_edge["hidden"].structure == TupleOf((TENSOR, TENSOR))
    assert loop.back_edge["output"].structure is TENSOR


def test_an_imported_modules_function_named_in_place_changes_no_module_object():
    analysis = analyse(
        """
        import commons
        model = nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            norm = commons.clip_grad_value_(model.parameters(), None)
            optimizer.step()
            segment = commons.slice_segments(y, 0, 4)
        """
    )
    loop = analysis.loops[0]
    assert not loop.back_edge.get("commons", Value()).graph  # (it was read as a tensor changed in place)
    assert not loop.back_edge["segment"].graph


def test_items_of_a_tuple_hold_the_graph_their_callee_proves_and_are_guessed_otherwise():
    analysis = analyse(
        """
        from helpers import unread

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)

            def forward(self, x):
                return self.fc(x), x.argmax(-1)

        model = Net()
        for x in loader:
            logits, indices = model(x)
            first, second = [model(x), model(x)]
            picked = model(x)[0]
            index = model(x)[1]
            out, aux = unread(model, x)
            taken = unread(model, x)[0]
            loss = (logits + first + picked + out + taken).sum() * indices.float().mean() * index.float().mean()
            loss.backward()
        """
    )
    loss = analysis.statement_at(analysis.line(analysis.backward_sites[0].call) - 1)
    read = {name.value: analysis.value_read(name) for name in m.findall(loss, m.Name())}
    assert read["logits"].graph and not read["logits"].guessed  # (the forward gradfix read returns it built by a layer)
    assert read["first"].graph and not read["first"].guessed  # (a literal list: each item is known)
    assert read["picked"].graph and not read["picked"].guessed  # (picked by a literal index: as unpacked)
    assert read["out"].graph and read["out"].guessed  # (an item of what code gradfix did not read returns)
    assert read["taken"].graph and read["taken"].guessed  # (the same, picked by index)
    assert read["indices"].graphless and read["index"].graphless  # (the callee's argmax, unpacked or picked)


def test_a_repeated_list_is_a_list_and_a_slot_reads_what_was_written_to_it():
    analysis = analyse(
        """
        model = nn.Linear(2, 2)
        losses = [None] * 3
        for i in range(3):
            losses[i] = model(torch.ones(1, 2)).sum()
            losses[i].backward()
        """
    )
    site = analysis.backward_sites[0]
    assert isinstance(analysis.loops[0].entry["losses"].structure, ListOf)  # (not a tensor: no ``losses.detach()``)
    written = analysis.line(site.statement) - 1
    assert not site.value.freed and {analysis.line(o.statement) for o in site.value.origins if isinstance(o, Origin)} == {written}


def test_two_branches_on_a_flag_set_once_before_both_are_exclusive():
    step = """
        def step(model, x, per_item):
            flag = per_item and x is not None
            for item in x:
                if flag:
                    model(item).sum().backward()
            if not flag:
                model(x).sum().backward()
        """
    for code, exclusive in ((step, True), (step + "    flag = False\n", False)):  # (assigned again after them)
        analysis = analyse(code)
        first, second = analysis.backward_sites
        assert analysis.exclusive(first.statement, second.statement) is exclusive


def test_a_loop_marks_what_an_iteration_receives_from_the_previous_one():
    analysis = analyse(
        """
        cell = nn.GRUCell(2, 2)
        h = torch.zeros(1, 2)
        states = []
        for step in range(3):
            h = cell(torch.ones(1, 2), h)
            states.append(h)
            h.sum().backward()
        """
    )
    loop = analysis.loops[0]
    site = analysis.backward_sites[0]
    assert Carried(loop, "h") in site.value.origins
    assert Carried(loop, "h") in loop.back_edge["h"].origins  # a recurrence
    assert loop.back_edge["states"].structure == ListOf(TENSOR)
    assert not loop.entry["h"].graph and loop.back_edge["h"].graph


def test_detaching_at_the_top_of_the_loop_cuts_the_carried_graph():
    analysis = analyse(
        """
        cell = nn.GRUCell(2, 2)
        h = None
        for step in range(3):
            if h is not None:
                h = h.detach()
            h = cell(torch.ones(1, 2), h)
            h.sum().backward()
        """
    )
    loop, site = analysis.loops[0], analysis.backward_sites[0]
    carried = {o for o in expand(site.value.origins, loop) if isinstance(o, Carried)}
    assert Carried(loop, "h") not in carried


def test_writes_in_a_loop_say_whether_they_build_on_what_the_previous_iteration_left():
    analysis = analyse(
        """
        cell = nn.GRUCell(2, 2)
        h = torch.zeros(1, 2)
        states, buffer, total = [], torch.zeros(4, 2), 0
        for step in range(4):
            prev = h
            h = cell(torch.ones(1, 2), prev)
            if step % 2:
                states = []
            states.append(h)
            buffer[step] = h.detach()
            total = total + step
            for part in range(2):
                pass
            h.sum().backward()
        """
    )
    loop = analysis.loops[0]
    assert list(analysis.writes_of(loop, "h").values()) == [True]  # through the alias, by the dataflow
    assert list(analysis.writes_of(loop, "states").values()) == [False, None]
    assert list(analysis.writes_of(loop, "buffer").values()) == [None]  # an item written: the old tensor changed
    assert list(analysis.writes_of(loop, "total").values()) == [True]  # no graph: the value reads the name
    assert list(analysis.writes_of(loop, "part").values()) == [False]  # bound anew by a nested loop's header, from its iterable
    assert not analysis.afresh_each_iteration(loop, "h") and not analysis.made_anew_in(loop, "h")
    assert analysis.made_anew_in(loop, "states") and not analysis.afresh_each_iteration(loop, "states")
    assert analysis.afresh_each_iteration(loop, "prev") and not analysis.made_anew_in(loop, "buffer")
    # (a nested loop's target may be bound anew, but not in each iteration: its iterable may be empty)
    assert analysis.made_anew_in(loop, "part") and not analysis.afresh_each_iteration(loop, "part")


def test_attribute_writes_name_the_object_and_the_function_that_writes():
    analysis = analyse(
        """
        class Model(nn.Module):
            def reset(self):
                self.hidden = None

        model = Model()
        model.hidden = torch.zeros(1)
        """
    )
    reset = analysis.function_at(6)
    assert analysis.attribute_writes("hidden") == [("self", reset), ("model", None)]
    assert analysis.attribute_writes("cell") == []


def test_state_kept_on_self_between_calls():
    analysis = analyse(
        """
        class Memory(nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = nn.GRUCell(2, 2)
                self.state = torch.zeros(1, 2)

            def forward(self, x):
                self.state = self.cell(x, self.state)
                return self.state * 2
        """
    )
    forward = next(loop for loop in analysis.loops if loop.is_call)
    assert forward.carried_names == {"self.state"}
    assert Carried(forward, "self.state") in forward.returned.origins | forward.back_edge["self.state"].origins
    assert not forward.entry["self.state"].graph  # __init__ stores a plain tensor


def test_assigned_and_read_names():
    statement = cst.parse_module("out, self.h = model(x, self.h); a[i] += 1; cache.append(out); w.add_(g)\n").body[0]
    assert assigned_names(statement) == {"out", "self.h", "a", "cache", "w"}
    assert assigned_names(statement, rebinding_only=True) == {"out", "self.h", "a"}
    assert {"model", "x", "self", "self.h", "a", "i", "cache", "out", "g"} <= read_names(statement)
    in_place = cst.parse_module("with torch.no_grad():\n    w -= lr * w.grad\n").body[0]
    assert assigned_names(in_place, rebinding_only=True) == set()


def test_gradient_effects():
    analysis = analyse(
        "model = nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loss = model(torch.ones(2)).sum()\n"
        "optimizer.zero_grad()\nloss.backward()\nnorm = model.weight.grad.norm()\n"
        "clip_grad_norm_(model.parameters(), 1.0)\noptimizer.first_step()\noptimizer.step()\n"
        "metrics.update({'loss': 1})\nscaler.update()\nprint(norm.item())\n"
    )
    effects = [analysis.gradient_effects(statement) for statement in analysis.module.body[6:]]
    assert effects == [
        GradientEffect.ZERO_GRAD,  # a known optimizer's zeroing, not also a step
        GradientEffect.BACKWARD,
        GradientEffect.READ_GRAD,
        GradientEffect.CLIP,
        GradientEffect.STEP,  # any other method of a known optimizer steps it
        GradientEffect.STEP,
        GradientEffect(0),  # a dict's update
        GradientEffect.SCALER_UPDATE,
        GradientEffect(0),
    ]
    assert [analysis.updates_parameters(s) for s in analysis.module.body[6:]] == [True, False, False, False, True, True, False, True, False]


def site(code: str):
    return analyse(code).backward_sites[-1]


@pytest.mark.parametrize(
    ("call", "retained"),
    [
        ("loss.backward()", False),
        ("loss.backward(retain_graph=False)", False),
        ("loss.backward(retain_graph=None)", False),
        ("loss.backward(retain_graph=True)", True),
        ("loss.backward(None, True)", True),
        ("loss.backward(retain_graph=keep)", None),
        ("loss.backward(create_graph=True)", True),
        ("torch.autograd.grad(loss, params)", False),
        ("torch.autograd.grad(outputs=loss, inputs=params, retain_graph=True)", True),
        ("torch.autograd.grad(loss, params, None, True)", True),
        ("accelerator.backward(loss, retain_graph=True)", True),
        ("accelerator.backward(loss, **kwargs)", None),
    ],
)
def test_retain_graph_is_read_in_three_states(call, retained):
    backward = site(
        f"""
        model = nn.Linear(2, 1)
        params = list(model.parameters())
        loss = model(torch.ones(2)).sum()
        {call}
        """
    )
    assert backward.retain_graph is retained
    assert [cst.Module([]).code_for_node(t) for t in backward.tensors] == ["loss"]


@pytest.mark.parametrize(
    ("call", "api"),
    [
        ("loss.backward()", "Tensor.backward"),
        ("loss.backward(torch.ones_like(loss))", "Tensor.backward"),
        ("scaler.scale(loss).backward()", "GradScaler.scale(...).backward"),
        ("torch.autograd.backward(loss)", "torch.autograd.backward"),
        ("torch.autograd.backward(tensors=[loss])", "torch.autograd.backward"),
        ("torch.autograd.grad(outputs=loss, inputs=params)", "torch.autograd.grad"),
        ("fabric.backward(loss)", "Fabric.backward"),
        ("accelerator.backward(loss)", "Accelerator.backward"),
        ("engine.backward(loss)", "DeepSpeedEngine.backward"),
        ("optimizer.backward(loss)", "<wrapper>.backward"),
    ],
)
def test_every_backward_api_names_the_backwarded_tensor(call, api):
    backward = site(
        f"""
        from accelerate import Accelerator
        from lightning.fabric import Fabric
        import deepspeed
        accelerator = Accelerator()
        fabric = Fabric(accelerator="cpu")
        model = nn.Linear(2, 1)
        engine, optimizer, _, _ = deepspeed.initialize(model=model)
        params = list(model.parameters())
        loss = model(torch.ones(2)).sum()
        {call}
        """
    )
    assert backward.api.name == api
    assert [cst.Module([]).code_for_node(t) for t in backward.tensors] == ["loss"]
    assert backward.value.graph


def test_a_helper_that_backwards_its_parameter_is_a_backward_site():
    analysis = analyse(
        """
        def backward_and_log(loss):
            loss.backward()
            print(loss.item())

        model = nn.Linear(2, 1)
        for x in [torch.ones(2)]:
            out = model(x).sum()
            backward_and_log(out)
        """
    )
    helper_call = analysis.backward_sites[-1]
    assert helper_call.api.name == "backward_and_log()" and helper_call.tensor.value == "out"


def test_nested_loops_reach_a_fixed_point(monkeypatch):
    from gradfix.codemods.analysis import dataflow

    passes = []
    original = dataflow.DataflowAnalysis._exec_body
    monkeypatch.setattr(dataflow.DataflowAnalysis, "_exec_body", lambda self, suite, env: passes.append(1) or original(self, suite, env))
    analyse(
        """
        model = nn.Linear(2, 2)
        h = torch.zeros(2)
        for epoch in range(2):
            for batch in range(2):
                for step in range(2):
                    h = model(h)
                    h.sum().backward()
                    h = h.detach()
        """
    )
    assert len(passes) <= 27  # three passes a loop at most, where identity-compared origins took 4 each


@pytest.mark.parametrize(
    ("code", "rounds"),
    [
        # defined before it is called with a graph: its body is walked again with what the call passes
        ("def update(loss):\n    loss.backward()\n\ndef main():\n    update(model(x).sum())\n\nmain()\n", 2),
        # defined before it is called with no graph: what the walk saw is final
        ("def update(n):\n    print(n)\n\ndef main():\n    update(3)\n\nmain()\n", 1),
        # called before its definition: the walk sees the summary again
        ("def main():\n    update(model(x).sum())\n\ndef update(loss):\n    loss.backward()\n\nmain()\n", 2),
        # a constructor walked before a caller passed it a graph
        ("class Keep:\n    def __init__(self, t):\n        self.t = t\n\nkept = Keep(model(x))\n", 2),
        ("class Keep:\n    def __init__(self, n):\n        self.n = n\n\nkept = Keep(3)\n", 1),
    ],
)
def test_the_module_is_walked_again_only_when_a_walk_used_a_fact_a_later_definition_changed(monkeypatch, code, rounds):
    from gradfix.codemods.analysis import dataflow

    walks = []
    original = dataflow.DataflowAnalysis._run_module
    monkeypatch.setattr(dataflow.DataflowAnalysis, "_run_module", lambda self, module: walks.append(1) or original(self, module))
    analysis = analyse("model = nn.Linear(2, 1)\nx = torch.ones(2)\n" + code)
    assert len(walks) == rounds
    if "loss.backward()" in code:
        assert {site.api.name for site in analysis.backward_sites} == {"Tensor.backward", "update()"}


@pytest.mark.parametrize(
    ("optimized", "called", "untrained"),
    [
        ("teacher.parameters()", "student", True),
        ("student.parameters()", "student", False),
        ("model.decoder.parameters()", "model", False),  # model holds what is trained
        ("[x]", "model", False),  # what the untrained model makes of x trains x
    ],
)
def test_a_module_is_trained_through_the_modules_that_hold_it(optimized, called, untrained):
    analysis = analyse(
        f"""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Linear(2, 2)
                self.decoder = nn.Linear(2, 2)

        model = Net()
        teacher = nn.Linear(2, 2)
        student = nn.Linear(2, 2)
        x = torch.zeros(2, requires_grad=True)
        optimizer = torch.optim.SGD({optimized}, lr=0.1)
        target = {called}(x)
        """
    )
    statement = analysis.module.body[-1]
    assert analysis.untrained_graph([statement]) is untrained


def test_a_constructor_keeps_the_graphs_its_callers_pass_on_the_instance():
    analysis = analyse(
        """
        class Target(nn.Module):
            def __init__(self, feature, scale):
                super().__init__()
                self.target = feature * 2
                self.scale = scale

            def forward(self, x):
                return F.mse_loss(x, self.target) * self.scale

        teacher = nn.Linear(2, 2)
        kept = Target(teacher(torch.ones(2)), scale=3.0)
        """
    )
    forward = next(loop for loop in analysis.loops if loop.is_call and loop.node.name.value == "forward")
    built = analysis.built_outside(forward.scope, [forward.returned])
    assert [analysis.line(s) for s in built] == [8, 15]  # self.target = ..., and the caller's teacher(...)


class _VisitOrder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) not in LAYOUT:
            self.nodes.append(node)
        return True


def test_the_syntax_tree_holds_the_nodes_libcst_visits_in_its_order_and_their_parents():
    fixtures = sorted((Path(__file__).parent / "fixtures").rglob("*.py"))
    sources = [path.read_text() for path in fixtures[::8]]
    sources.append(
        textwrap.dedent("""
        from . import (a as b, c)  # comment
        from .. x import *
        @decorator(f"{value!r:>{width}}", *args, **kwargs)
        async def f(p, /, q: int = 1, *r, s, **t) -> list[int]:
            global g
            async with a as (b, c), d:
                yield [x async for x in y if x]
            lambda u, *v: (u, v)
            match command:
                case [Point(x=0, y=0), *rest] if rest: pass
                case {"k": 1, **others} | str() as z: pass
            try:
                del a[1:2, ::3]
            except* (E1, E2) as error:
                raise X from error
            finally:
                w = (yield)
            return await (not a) if b else c
    """)
    )
    for source in sources:
        module = cst.parse_module(source)
        tree, visited = SyntaxTree(module), _VisitOrder()
        module.visit(visited)
        assert len(tree._nodes) == len(visited.nodes)
        assert all(ours is libcsts for ours, libcsts in zip(tree._nodes, visited.nodes))
    for node in visited.nodes[1:]:  # of the last source, which has a node of most kinds
        assert any(child is node for child in tree.parent(node).children)


class _Calls(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[tuple[str, cst.CSTNode]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.calls.append(("visit", node))
        return node.name.value != "skipped"  # what a visitor's False skips, a replay skips

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.calls.append(("leave", original_node))

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(("visit", node))

    def leave_Attribute(self, original_node: cst.Attribute) -> None:
        self.calls.append(("leave", original_node))


class _EveryCall(cst.CSTVisitor):
    """A visitor that overrides ``on_visit``: every node, children entered on anything true."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, cst.CSTNode]] = []

    def on_visit(self, node: cst.CSTNode) -> bool | None:
        self.calls.append(("visit", node))
        if isinstance(node, cst.FunctionDef):
            return None if node.name.value == "skipped" else True
        return not isinstance(node, cst.Return)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.calls.append(("leave", original_node))


@pytest.mark.parametrize("visitor", [_Calls, _EveryCall])
def test_a_replay_makes_the_calls_of_a_visit_of_the_module_or_of_a_subtree(visitor):
    module = cst.parse_module(
        textwrap.dedent("""
        def skipped():
            loss.backward()
        def kept(model, x):
            def inner():
                return model.head(x)
            return torch.sum(model(x).mean(dim=0))
    """)
    )
    tree = SyntaxTree(module)
    for root in (module, module.body[1]):
        replayed, visited = visitor(), visitor()
        tree.replay(replayed, None if root is module else root)
        root.visit(visited)
        visited.calls = [(kind, node) for kind, node in visited.calls if type(node) not in LAYOUT]
        assert replayed.calls == visited.calls and len(visited.calls) > 6


def test_names_by_spelling_are_the_name_nodes_a_search_finds_under_a_node():
    module = cst.parse_module(
        textwrap.dedent("""
        pred = model(x)
        def train(pred, loss):
            for step in range(3):
                loss = criterion(pred, y) + pred.mean()
                loss.backward()
            return loss
        print(pred, loss)
    """)
    )
    tree = SyntaxTree(module)
    for root in (module, module.body[1], module.body[1].body):
        for spelled in ({"pred"}, {"loss", "pred"}, {"absent"}):
            searched = [n for n in m.findall(root, m.Name()) if n.value in spelled]
            assert tree.names(root, spelled) == searched
    assert len(tree.names(module.body[1].body, {"pred"})) == 2


@pytest.mark.parametrize(
    ("matcher", "node_type", "where"),
    [
        (m.Attribute(attr=m.Name("grad")), cst.Attribute, lambda a: a.attr.value == "grad"),
        (m.Call(func=m.Attribute(attr=m.Name("detach") | m.Name("detach_"))), cst.Call, is_detach),
        (m.Call(func=m.Attribute()), cst.Call, lambda call: type(call.func) is cst.Attribute),
        (m.Call(func=m.Name()), cst.Call, lambda call: type(call.func) is cst.Name),
        (m.Assign(value=m.Name("False")), cst.Assign, lambda assign: is_name(assign.value, "False")),
        (m.Call(args=[m.Arg(value=m.Name("False"))]), cst.Call, lambda c: len(c.args) == 1 and is_name(c.args[0].value, "False")),
        (m.Name(), cst.Name, None),
    ],
)
def test_a_search_by_type_finds_what_a_libcst_matcher_finds(matcher, node_type, where):
    source = textwrap.dedent("""
        x.grad.zero_()
        y = model(x).detach()
        z = h.detach_().grad
        frozen = False
        vgg.requires_grad_(False)
        def step(a):
            a.grad = None
            return f(g.detach(), False)
    """)
    module = cst.parse_module(source)
    tree = SyntaxTree(module)
    for root in (module, module.body[-1]):
        assert tree.findall(root, node_type, where) == m.findall(root, matcher)
    apart = cst.parse_module(source)  # not part of the module the tree was built from: walked
    assert tree.findall(apart, node_type, where) == find_nodes(apart, node_type, where) == m.findall(apart, matcher)
    assert m.findall(module, matcher)


_FIXTURES = Path(__file__).parent / "fixtures"
_PLACED_ALONE = {
    "decorators, comments, async, semicolons": (
        "# header comment\n\n@decorate\n@(\n    wrap)\nclass Model(nn.Module):  # trailing\n    pass\n\n\n"
        "# a comment before\nasync def f():\n    a = 1; b = 2\n"
    ),
    "continuations and strings": (
        'x = (\n    1 +\n    2)\ny = """a\nmulti-line\nstring"""; z = 3\nif x:\n    loss = model(x) \\\n'
        "        .sum()\n    loss.backward()\nelse:\n    pass\n# footer\n"
    ),
    "CRLF": "a = 1\r\nfor step in range(3):\r\n    b = a\r\n",
    "syntax this Python does not parse": "type Alias = int\nloss.backward()\n",  # the whole module is rendered
    **{str(p.parent.relative_to(_FIXTURES)): p.read_text() for p in sorted(_FIXTURES.glob("*/*/before.py"))},
}


@pytest.mark.parametrize("source", _PLACED_ALONE.values(), ids=_PLACED_ALONE.keys())
def test_nodes_placed_one_statement_at_a_time_are_where_a_whole_module_render_places_them(source):
    module = cst.parse_module(source)
    analysis = FileAnalysis(module, source=source.encode())
    everything = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = [node for node in everything if analysis.tree.span(node) is not None]  # layout is placed by libcst
    assert len(nodes) > 10
    assert [analysis.range(node) for node in nodes] == [everything[node] for node in nodes]


@pytest.mark.parametrize("mode", [FixMode.NONE, FixMode.UNSAFE])
def test_a_checked_files_syntax_tree_is_freed_without_the_cycle_collector(mode):
    """A file's nodes are freed by reference counting when its check is done. A cycle through its
    analysis (a loop and the values that name it, positions and the analysis) would leave every
    tree to the cycle collector, which walks all of it."""
    sources = [path.read_bytes() for path in sorted(_FIXTURES.glob("gf004_carried_state/*/before.py"))[:4]]
    gc.collect()
    gc.disable()
    try:
        reports = [check_source(source, all_rules(), mode) for source in sources]
        left_to_the_collector = gc.collect()
    finally:
        gc.enable()
    assert sum(len(report.findings) + len(report.fixed) for report in reports) > 0
    assert left_to_the_collector == 0


def test_with_reads_replaced_computes_each_read_where_it_stands():
    from gradfix.codemods.analysis import code_of, with_reads_replaced

    expression = cst.parse_expression("criterion(output * 2, target=x.output, output=output)")
    replaced = with_reads_replaced(expression, "output", cst.parse_expression("a + b"))
    assert code_of(replaced) == "criterion((a + b) * 2, target=x.output, output=(a + b))"
    method = cst.parse_statement("def f(self):\n    g = lambda: self.cache\n    def h(self):\n        return self.cache\n    return self.cache.t()\n")
    assert code_of(with_reads_replaced(method, "self.cache", cst.parse_expression("self.table(self.p)"))).count("self.table(self.p)") == 2


def test_a_named_tuple_of_the_file_keeps_its_class_when_detached():
    from gradfix.codemods.analysis import detached
    from gradfix.codemods.analysis.values import RecordOf

    analysis = analyse(
        """
        from typing import NamedTuple

        class State(NamedTuple):
            v: torch.Tensor
            step: int

        cell = nn.Linear(2, 2)
        state = State(v=torch.zeros(1, 2), step=0)
        for i in range(3):
            state = State(cell(state.v), state.step + 1)
            state.v.sum().backward()
        """
    )
    structure = analysis.loops[0].back_edge["state"].structure
    assert structure == RecordOf((TENSOR, NUMBER), "State")  # (``state.step + 1``: a number plus a number)
    assert detached(cst.Name("state"), structure) is None  # (a number has no .detach())
    tensors = RecordOf((TENSOR, TENSOR), "State")
    assert cst.Module([]).code_for_node(detached(cst.Name("state"), tensors)) == "type(state)(*(h.detach() for h in state))"
    assert RecordOf((TENSOR,), "State").join(TupleOf((TENSOR,))) is UNKNOWN  # (a plain tuple rebuilt would lose the fields' names)


def test_an_item_every_return_proves_graphless_is_graphless_at_the_call():
    analysis = analyse(
        """
        model = nn.Linear(2, 2)

        def path_regularize(fake, mean_length):
            lengths = fake.pow(2).sum(1).sqrt()
            mean = mean_length + 0.01 * (lengths.mean() - mean_length)
            return (lengths - mean).pow(2).mean(), mean.detach(), lengths

        mean_length = 0
        for step in range(3):
            penalty, mean_length, lengths = path_regularize(model(torch.ones(2, 2)), mean_length)
            penalty.backward()
        """
    )
    back = analysis.loops[0].back_edge
    assert back["mean_length"].graphless and not back["mean_length"].graph  # (``mean.detach()`` in the only return)
    assert back["penalty"].graph and back["lengths"].graph


def test_a_literal_flag_selects_the_returns_its_path_reaches():
    analysis = analyse(
        """
        class Refiner(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Linear(2, 2)

            def forward(self, x, return_codes=False):
                codes = self.encoder(x)
                if return_codes:
                    return codes.sum(1), codes
                return codes.sum(1)

        model = Refiner()
        both = model(torch.ones(1, 2), return_codes=True)
        one = model(torch.ones(1, 2))
        values, vectors = torch.linalg.eigh(torch.eye(2))
        """
    )
    assigned = {statement.body[0].targets[0].target: analysis.value_assigned(statement.body[0].value) for statement in analysis.module.body[-3:]}
    structures = [value.structure for value in assigned.values()]
    assert structures[:2] == [TupleOf((TENSOR, TENSOR)), TENSOR]  # (by the flag; both returns joined would be unknown)
    assert structures[2] == TupleOf((TENSOR, TENSOR))  # (eigh returns its values and its vectors)


def test_retain_graph_added_to_a_call_written_one_argument_a_line_gets_its_own_line():
    from gradfix.codemods.analysis import with_retained_graph
    from gradfix.codemods.frameworks import AUTOGRAD_GRAD

    call = cst.parse_expression("torch.autograd.grad(\n    outputs,\n    inputs,\n    allow_unused=True,\n)")
    written = cst.Module([]).code_for_node(with_retained_graph(AUTOGRAD_GRAD, call))
    assert written == "torch.autograd.grad(\n    outputs,\n    inputs,\n    allow_unused=True,\n    retain_graph=True,\n)"


def test_a_return_after_both_branches_of_a_flag_may_run_with_either_value():
    analysis = analyse(
        """
        def pick(x, other, flag=False):
            if flag:
                y = x * 2
            else:
                y = x * 3
            if other:
                return y
            if flag:
                return y, y
            return y

        picked = pick(torch.ones(2), torch.rand(1) > 0.5, flag=True)
        """
    )
    call = analysis.module.body[-1].body[0].value
    assert analysis.value_assigned(call).structure is UNKNOWN  # (the first return runs with flag True too: a tensor or a pair)


@pytest.mark.parametrize(
    ("filled", "freed"),
    [
        ("memory.append(model(x))", True),  # graphs left in the module's list by another function
        ("memory.append(model(x).detach())", False),
        ("local = []\n            local.append(model(x))", False),  # the function's own list: the caller never sees it
    ],
)
def test_a_function_sees_the_module_names_other_functions_filled_before_it_is_called(filled, freed):
    site = analyse(
        f"""
        model = nn.Linear(2, 1)
        x = torch.ones(2)
        memory = []

        def remember():
            {filled}

        def update():
            loss = sum(memory).sum()
            loss.backward()

        for step in range(3):
            remember()
            update()
        """
    ).backward_sites[-1]
    assert site.value.graph is freed  # (``memory`` holds graphs only when ``remember`` left them there)
    assert site.value.freed is freed  # the previous step's update freed what the list still holds


def test_autograd_grad_walks_down_to_its_inputs_only():
    analysis = analyse(
        """
        model = nn.Linear(2, 2)
        critic = nn.Linear(2, 1)
        fake = model(torch.ones(2))
        mixed = fake * 0.5
        score = critic(mixed)
        gradients = torch.autograd.grad(score, mixed, create_graph=True)
        """
    )
    site = analysis.backward_sites[-1]
    walked = {analysis.line(origin.statement) for origin in analysis.graph_nodes(site)}
    assert walked == {9}  # critic(mixed), not what built mixed from the generator


def test_a_cache_kept_by_a_submodule_names_the_training_loops_backward_that_walks_it():
    source = textwrap.dedent(
        """
        import torch
        import torch.nn as nn


        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.prefix = nn.Linear(4, 4)
                self.cache = None

            def forward(self, x):
                if self.cache is None:
                    self.cache = self.prefix(torch.ones(1, 4))
                return x + self.cache


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.attention = Attention()

            def forward(self, x):
                return self.attention(x)


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList(Block() for _ in range(2))
                self.head = nn.Linear(4, 1)

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return self.head(x)


        model = Model()
        for step in range(3):
            loss = model(torch.randn(2, 4)).sum()
            loss.backward()
        """
    ).encode()
    analysis = FileAnalysis(cst.parse_module(source))
    call = next(c for c in analysis.tree.findall(analysis.module, cst.Call) if m.matches(c.func, m.Name("model")))
    assert analysis.runs_methods_of(call, "Attention") and analysis.runs_methods_of(call, "Model")
    assert not analysis.runs_methods_of(call, "Missing")
    (finding,) = check_source(source, all_rules()).findings
    assert (finding.code, finding.line) == ("GF004", 14)
    assert 42 in finding.related_lines  # the loop's backward, where the error is raised


def test_the_items_of_a_module_container_are_modules_whose_calls_carry_their_parameters():
    value = backwarded(
        """
        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x

        model = Stack()
        model(torch.randn(2, 4)).sum().backward()
        """
    )
    assert value.graph and value.origins


@pytest.mark.parametrize(
    "expression",
    [
        "x.sum()",
        "(x + w).mean()",
        "torch.cat([x, -w]).view(-1)[1:].sum()",
        "sum(p.sum() for p in [x, w])",
        "(x * w).sum()",
        "(x * 2).sum()",
        "torch.tanh(x).sum()",
        "layer(x).sum()",
    ],
)
def test_a_backward_frees_a_graph_only_where_its_nodes_saved_tensors(expression):
    code = f"""
        layer = nn.Linear(2, 2)
        x = torch.randn(3, 2, requires_grad=True)
        w = torch.randn(3, 2, requires_grad=True)
        y = {expression}
        y.backward()
        y.backward()
        """
    torch = pytest.importorskip("torch")
    site = analyse(code).backward_sites[-1]
    namespace = {"torch": torch, "nn": torch.nn}
    try:
        exec(textwrap.dedent(code), namespace)
        raised = False
    except RuntimeError:
        raised = True
    assert site.value.freed is raised  # as torch itself answers


@pytest.mark.parametrize(
    ("unpacked", "indices_graph"),
    [
        ("values, indices = torch.topk(scores, 2)", False),
        ("values, indices = scores.max(1)", False),
        ("values, indices = scores.sort(dim=1)", False),
        ("values, indices = scores.max(), scores.min()", True),  # two tensors written out: both hold the graph
    ],
)
def test_the_indices_a_reduction_returns_beside_its_values_hold_no_graph(unpacked, indices_graph):
    analysis = analyse(
        f"""
        model = nn.Linear(3, 3)
        scores = model(torch.randn(2, 3))
        {unpacked}
        values.sum().backward()
        indices.sum().backward()
        """
    )
    values, indices = (site.value for site in analysis.backward_sites)
    assert values.graph and indices.graph is indices_graph


def test_a_helper_counting_correct_predictions_returns_no_graph():
    # https://github.com/learnables/learn2learn/blob/db5cee3795490071282bbdfa81179ef732349196/examples/vision/protonet_miniimagenet.py
    value = backwarded(
        """
        def accuracy(predictions, targets):
            predictions = predictions.argmax(dim=1).view(targets.shape)
            return (predictions == targets).sum().float() / targets.size(0)

        model = nn.Linear(4, 3)
        acc = accuracy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,)))
        acc.backward()
        """
    )
    assert not value.graph


def test_the_rows_of_a_tensor_a_loop_iterates_hold_its_graph():
    # https://github.com/kuangliu/pytorch-retinanet/blob/2d7c663350f330a34771a8fa6a4f37a2baa52a1d/retinanet.py
    analysis = analyse(
        """
        trunk = nn.Conv2d(3, 4, 3)
        head = nn.Conv2d(4, 2, 1)
        maps = trunk(torch.randn(2, 3, 8, 8))
        outputs = []
        for feature_map in maps:
            outputs.append(head(feature_map.unsqueeze(0)))
        torch.cat(outputs).sum().backward()
        """
    )
    walked = {analysis.line(origin.statement) for origin in analysis.graph_nodes(analysis.backward_sites[-1])}
    assert 7 in walked  # maps = trunk(...): each feature map is a row of it


@pytest.mark.parametrize(
    "expression",
    ["Variable(model(x))", "Variable(model(x), requires_grad=True)", "Variable(model(x).detach() * 2)"],
)
def test_a_variable_is_a_new_leaf_without_the_history_of_what_it_wraps(expression):
    code = f"""
        from torch.autograd import Variable
        model = nn.Linear(2, 2)
        x = torch.randn(3, 2)
        out = {expression}
        """
    torch = pytest.importorskip("torch")
    analysis = analyse(code)
    namespace = {"torch": torch, "nn": torch.nn}
    exec(textwrap.dedent(code), namespace)
    assert namespace["out"].grad_fn is None  # as torch itself answers: no interior node
    assert not analysis.value_nodes(analysis.value_assigned(find_nodes(analysis.module, cst.Assign)[-1].value))


@pytest.mark.parametrize(
    ("wrapping", "module"),
    [
        ("nn.DataParallel(Net())", ModuleInfo("Net", is_local=True)),
        ("nn.parallel.DistributedDataParallel(Net().to(device))", ModuleInfo("Net", is_local=True)),
        ("torch.nn.DataParallel(nn.LSTM(2, 2))", ModuleInfo("LSTM")),
        ("nn.DataParallel(build_model())", None),  # a module gradfix cannot see: what it returns is unknown
    ],
)
def test_a_module_wrapped_for_parallel_runs_is_the_module_it_wraps(wrapping, module):
    analysis = analyse(
        f"""
        from models import build_model
        class Net(nn.Module):
            def forward(self, x):
                return x
        device = "cpu"
        model = {wrapping}
        """
    )
    assert analysis.names.modules.get("model") == module


def test_a_helper_returning_a_number_librarys_result_returns_no_graph():
    # https://github.com/quantumiracle/Popular-RL-Algorithms/blob/3b814ea159f1fc0b521d6e0e699a7945f770f105/qlearning_sarsa_mc.ipynb
    analysis = analyse(
        """
        import numpy as np
        actions = 2
        net = nn.Linear(4, actions)

        def policy(q_values, epsilon):
            if np.random.rand() < epsilon:
                return np.random.choice(actions)
            return q_values.detach().argmax().item()

        action = policy(net(torch.randn(4)), 0.1)
        picked = np.squeeze(net(torch.randn(4)))
        """
    )
    action, picked = (analysis.value_assigned(a.value) for a in find_nodes(analysis.module, cst.Assign)[-2:])
    assert not action.graph
    assert picked.graph  # (given a graph, numpy may hand the call to the tensor's own method)


def test_a_module_of_the_file_moved_to_a_device_is_an_instance_of_its_class():
    analysis = analyse(
        """
        class Actor(nn.Module):
            def act(self, x):
                return x
        device = "cpu"
        actor = Actor().to(device).train()
        """
    )
    assert analysis.names.instances["actor"] == "Actor"


def test_items_of_a_call_whose_other_return_is_proved_graphless_keep_their_own_graphs():
    # https://github.com/quantumiracle/Popular-RL-Algorithms/blob/3b814ea159f1fc0b521d6e0e699a7945f770f105/ac.py
    analysis = analyse(
        """
        from torch.distributions import Categorical
        class Actor(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = nn.Linear(4, 2)

            def act(self, state, deterministic):
                probs = self.net(state).softmax(-1)
                if deterministic:
                    return probs.detach().cpu().numpy()
                m = Categorical(probs)
                action = m.sample()
                return action.detach().cpu().numpy().squeeze(0), m.log_prob(action)

        actor = Actor()
        action, log_prob = actor.act(torch.randn(4), False)
        kept_action = action
        kept_log_prob = log_prob
        """
    )
    action, log_prob = (analysis.value_assigned(a.value) for a in find_nodes(analysis.module, cst.Assign)[-2:])
    assert not action.graph and action.graphless
    assert log_prob.graph


@pytest.mark.parametrize("receiver", ["accelerator", "optimizer"])
def test_a_method_ending_in_an_underscore_writes_no_graph_into_an_object_that_is_no_tensor(receiver):
    # https://github.com/huggingface/accelerate/blob/16cb6eb80dd9aa8b4df1a63ef57863e455d53b83/examples/by_feature/gradient_accumulation_for_autoregressive_models.py
    analysis = analyse(
        f"""
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.randn(2)).sum()
        {receiver}.clip_grad_norm_(loss, 1.0)
        kept = {receiver}.num_processes
        """
    )
    assert not analysis.value_assigned(find_nodes(analysis.module, cst.Assign)[-1].value).graph


@pytest.mark.parametrize(("rebound", "alias"), [("", "my_loss"), ("loss_fn = other_loss", None)])
def test_a_name_bound_once_to_a_function_of_the_file_calls_that_function(rebound, alias):
    # https://github.com/samuelyu2002/ImVisible/issues/2 (LYTNet's training script: `loss_fn = my_loss`)
    analysis = analyse(
        f"""
        def my_loss(pred, target):
            mse = F.mse_loss(pred, target)
            return mse * 2, mse

        def other_loss(pred, target):
            return (pred - target).abs().mean()

        loss_fn = my_loss
        {rebound}
        model = nn.Linear(2, 2)
        loss, mse = loss_fn(model(torch.randn(2)), torch.randn(2))
        kept = mse
        """
    )
    assert analysis.names.function_aliases.get("loss_fn") == alias
    kept = analysis.value_assigned(find_nodes(analysis.module, cst.Assign)[-1].value)
    assert kept.graph and kept.structure is (TENSOR if alias else UNKNOWN)  # the item as the function returns it


@pytest.mark.parametrize(
    ("call", "graph"),
    [
        ("choice([model(x).sum(), model(x).mean()])", True),  # an item it is given, as it was
        ("random.choice([model(x).sum(), model(x).mean()])", True),
        ("sqrt(4.0) * np.pi", False),
        ("random.random()", False),
    ],
)
def test_a_number_library_given_a_graph_may_hand_it_back_however_it_is_imported(call, graph):
    analysis = analyse(
        f"""
        import random
        from random import choice
        from math import sqrt
        import numpy as np
        model = nn.Linear(2, 2)
        x = torch.randn(2)
        picked = {call}
        """
    )
    assert analysis.value_assigned(find_nodes(analysis.module, cst.Assign)[-1].value).graph is graph


def test_a_method_named_like_a_modules_of_the_files_own_class_is_that_method():
    # JavierAntoran/Bayesian-Neural-Networks (review h78): `net.eval(x, y)` of the notebook's
    # `Net_langevin`, which defines `eval`, does not make `net` an `nn.Module` gradfix did not read.
    program = textwrap.dedent(
        """
        import torch
        {base}

        class Net({parent}):
            def fit(self, x):
                return x * 2
        {method}

        net = Net()
        net.eval(torch.ones(2))
        """
    )
    own = program.format(base="", parent="object", method="    def eval(self, x):\n            return x")
    assert "net" not in FileAnalysis(cst.parse_module(own)).names.modules
    # Hidden fact: `eval` comes from a base gradfix did not read, which may be `nn.Module`'s.
    inherited = program.format(base="from trainers import Evaluating", parent="Evaluating", method="")
    assert FileAnalysis(cst.parse_module(inherited)).names.modules["net"].unread
