"""What a cold check computes, and how often: counted, never timed (the figures live in
benchmarks/check_speed.py). Each test pins one way the analysis used to pay twice for one fact."""

import collections
import textwrap
from pathlib import Path

import libcst as cst
import pytest

import gradfix

from gradfix.codemods import check
from gradfix.codemods.analysis import FileAnalysis
from gradfix.codemods.analysis.tree import SyntaxTree
from gradfix.codemods.check import check_file
from gradfix.codemods.parse import parse_decoded
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode
from gradfix.codemods.run import check_files

from .conftest import FIXTURES

CASE = FIXTURES / "gf001_duplicate_backward" / "unsafe_loss_helper_in_its_own_module"

# Functions of every kind the analysis reads names of: module functions that read globals, methods
# of a module class, nested helpers, a closure over a loop variable.
SOURCE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def forward(self, x):
            def scaled(y):
                factor = 2
                return y * factor

            return scaled(self.layer(x))


    def step(x, y):
        def loss_of(prediction):
            error = prediction - y
            return (error ** 2).mean()

        loss = loss_of(model(x))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        return loss


    def train(batches):
        for x, y in batches:
            step(x, y)
    """
)


def test_the_analysis_reads_the_names_a_function_binds_from_the_module_s_one_walk(visits):
    """LibCST's walk rebuilds every node it passes: walking each function's body again for the names
    it binds cost a third of a cold check of Lightning."""
    data = SOURCE.encode()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    assert analysis.backward_sites  # the file was analysed, its backward found
    assert visits == []


def test_placing_a_finding_walks_no_node(visits):
    """A finding is placed by rendering the top-level statement that holds it; LibCST's
    ``MetadataWrapper.resolve`` then walked that statement once more for nothing (half of placing
    it, a tenth of checking the shared scripts)."""
    data = SOURCE.encode()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    [site] = analysis.backward_sites
    assert (analysis.start(site.call), analysis.range(site.call).end.line) == ((30, 4), 30)
    assert visits == []


# A module the script imports that imports the helper (its own project is not empty), and one that
# backwards twice itself (its skeleton has a finding).
WRAPPER = """
from rdrop_loss import rdrop_criterion


def criterion(model, inputs, labels):
    return rdrop_criterion(model, inputs, labels, alpha=0.3)
"""
TWICE = """
def backward_twice(loss):
    loss.backward()
    loss.backward()
"""


@pytest.fixture
def project(tmp_path) -> list[Path]:
    """A work tree: the R-Drop script, which imports its criterion's module and two others."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "rdrop_loss.py").write_text((CASE / "rdrop_loss.py").read_text())
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    (tmp_path / "twice.py").write_text(TWICE)
    (tmp_path / "train.py").write_text((CASE / "before.py").read_text() + "import wrapper\nimport twice\n")
    return sorted(tmp_path.glob("*.py"))


@pytest.fixture
def analysed(monkeypatch) -> list[bytes]:
    """The bytes of each file or module the check analyses, once an analysis."""
    analysed = []
    analysis = check.FileAnalysis
    monkeypatch.setattr(
        check,
        "FileAnalysis",
        lambda module, imported, source, python_tree=None: analysed.append(source) or analysis(module, imported, source, python_tree),
    )
    return analysed


def test_a_module_the_run_checks_is_analysed_once_for_its_exports_and_its_check(project, analysed):
    """A module the run checks, whose own imports export no summary, is checked in the job that
    computes its exports, from the same analysis (a fifth of a cold check of Lightning was such
    second analyses); a module that imports a summary (wrapper.py) is checked with it, and every
    report is the file's checked alone."""
    helper = project[0].read_bytes()  # rdrop_loss.py
    reports = check_files(project, all_rules(), FixMode.UNSAFE, jobs=1)
    assert analysed.count(helper) == 1
    assert [[finding.code for finding in report.findings + report.fixed] for report in reports] == [[], ["GF001"], ["GF001"], []]
    analysed.clear()
    for path, report in zip(project, reports):
        alone = check_file(path, all_rules(), FixMode.UNSAFE)
        assert (alone.findings, alone.fixed, alone.rewritten, alone.errors) == (report.findings, report.fixed, report.rewritten, report.errors), path


def test_the_names_a_body_writes_are_walked_once_however_often_they_are_asked(monkeypatch):
    """A loop's body is walked at each of its passes and each round of the summaries (here two: a
    function called before its definition, a statement between them), and an ``if``/``elif`` chain asks what each branch
    binds each time it is walked: the module's tree keeps each answer."""
    source = textwrap.dedent(
        """
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


        def train(batches, mode):
            hidden = torch.zeros(1)
            for x, y in batches:
                for _ in range(2):
                    if mode == "a":
                        loss = helper(model(x) + hidden, y)
                    elif mode == "b":
                        loss = helper(model(x) * hidden, y)
                    hidden = loss.detach()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        STEPS = 2


        def helper(prediction, target):
            return ((prediction - target) ** 2).mean()
        """
    ).encode()
    replayed = []
    replay = SyntaxTree.replay
    monkeypatch.setattr(
        SyntaxTree,
        "replay",
        lambda tree, visitor, root=None: (
            replayed.append((type(visitor), vars(visitor).get("rebinding_only"), id(root))) or replay(tree, visitor, root)
        ),
    )
    analysis = FileAnalysis(parse_decoded(source, "<test>"), {}, source)
    assert analysis.backward_sites and analysis.loops  # analysed: loops passed more than once
    assert len(replayed) == len(set(replayed))


CALLERS_BEFORE_CALLEES = {
    "methods": """
        import torch


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

            def fit(self, batches):
                for x, y in batches:
                    loss = self.loss(x, y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()

            def loss(self, x, y):
                return self.scale() * ((self.model(x) - y) ** 2).mean()

            def scale(self):
                return 0.5


        Trainer(torch.nn.Linear(4, 1)).fit([(torch.randn(2, 4), torch.randn(2, 1))] * 3)
        """,
    "functions": """
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


        def main():
            for x, y in [(torch.randn(2, 4), torch.randn(2, 1))] * 3:
                loss = compute_loss(x, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        def compute_loss(x, y):
            return scale() * ((model(x) - y) ** 2).mean()


        def scale():
            return 0.5


        main()
        """,
    "a class calling a function below it": """
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


        class Pairs:
            def __getitem__(self, index):
                return scaled(torch.randn(2, 4)), torch.randn(2, 1)


        def scaled(x):
            return x * 0.5


        def main():
            pairs = Pairs()
            for index in range(3):
                x, y = pairs[index]
                loss = ((model(x) - y) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        main()
        """,
    "a function defined in the loop's body": """
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):

            def compute_loss(x, y):
                return ((model(x) - y) ** 2).mean()

            loss = compute_loss(torch.randn(2, 4), torch.randn(2, 1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
    # (diffusers' DreamBooth datasets: ``__init__`` picks each image's bucket with a method written below it)
    "a method its constructor calls, written after it": """
        import torch


        class Buckets:
            def __init__(self, sizes):
                self.sizes = sizes
                self.picked = [self._nearest(size) for size in sizes]
                self.images = [self.transform(torch.rand(3, size, size)) for size in self.picked]

            def __getitem__(self, index):
                return self.images[index]

            def _nearest(self, size):
                return min(self.sizes, key=lambda bucket: abs(bucket - size))

            def transform(self, image):
                return image * 2 - 1


        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for image in Buckets([2, 2]).images:
            loss = model(image.mean(0)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
    # (Lightning's strategies: a property with a setter, and methods calling the ones below them)
    "a class with a property setter": """
        import torch


        class Trainer:
            def __init__(self, model):
                self.model = model
                self._lr = 0.1

            @property
            def lr(self):
                return self._lr

            @lr.setter
            def lr(self, value):
                self._lr = value

            def fit(self, batches):
                optimizer = self.optimizer()
                for x, y in batches:
                    loss = ((self.model(x) - y) ** 2).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

            def optimizer(self):
                return torch.optim.SGD(self.model.parameters(), lr=self.lr)


        Trainer(torch.nn.Linear(4, 1)).fit([(torch.randn(2, 4), torch.randn(2, 1))] * 3)
        """,
}


@pytest.mark.parametrize("kind", CALLERS_BEFORE_CALLEES)
def test_functions_written_before_what_they_call_are_walked_in_one_round(monkeypatch, kind):
    """A function walked before one it calls reads no summary of it, and the whole module is
    walked again in a second round; walking each function (each method of a class, each of a
    run of the module's definitions) after those it calls reads every summary final in the
    first."""
    from gradfix.codemods.analysis import dataflow

    rounds = []
    run_module = dataflow.DataflowAnalysis._run_module
    monkeypatch.setattr(dataflow.DataflowAnalysis, "_run_module", lambda self, module: rounds.append(module) or run_module(self, module))
    assert [f.code for f in gradfix.check(textwrap.dedent(CALLERS_BEFORE_CALLEES[kind])).findings] == []
    assert len(rounds) == 1


@pytest.mark.parametrize(
    ("scale", "findings", "rounds"),
    [
        # what the method returns is a graph of the instance's parameter whatever it holds: one round
        ("torch.nn.Parameter(torch.ones(1))", [("GF006", 10)], 1),
        # what it returns depends on what the constructor left (a number: no graph): a second round
        ("2.0", [], 2),
    ],
)
def test_a_method_summarized_ahead_of_its_constructor_is_read_again_where_the_constructor_changes_its_summary(monkeypatch, scale, findings, rounds):
    """A method the constructor calls is summarized before the constructor is walked, from an
    empty instance; where what it returns depends on what the constructor left on the instance
    (``self.scale``), that summary is not the final one, and the module is walked again."""
    from gradfix.codemods.analysis import dataflow

    source = textwrap.dedent(
        f"""
        import torch


        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(4, 1)
                self.scale = {scale}
                self.offset = self.shifted()

            def forward(self, x):
                return self.linear(x) + self.offset

            def shifted(self):
                return self.scale * 2.0


        model = Scaled()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in [torch.randn(2, 4)] * 3:
            loss = model(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """
    )
    analyses: list[int] = []
    run_module = dataflow.DataflowAnalysis._run_module
    monkeypatch.setattr(dataflow.DataflowAnalysis, "_run_module", lambda self, module: analyses.append(id(self)) or run_module(self, module))
    assert [(f.code, f.line) for f in gradfix.check(source).findings] == findings
    assert set(collections.Counter(analyses).values()) == {rounds}


def test_a_function_defined_twice_keeps_its_definitions_walked_as_written(monkeypatch):
    """Walking a run of definitions callee-first must not walk an earlier definition of a name
    last: Python calls the last one, and its summary is the one a caller must read (its earlier
    definitions are walked first, then the callees first)."""
    from gradfix.codemods.analysis import dataflow

    source = textwrap.dedent(
        """
        import torch


        def main():
            return make()


        def make():
            return torch.zeros(1)


        def make():
            return torch.ones(1, requires_grad=True) * 2
        """
    ).encode()
    walked = []
    define = dataflow.DataflowAnalysis._define_function
    monkeypatch.setattr(
        dataflow.DataflowAnalysis, "_define_function", lambda self, node, *rest, **kw: walked.append(node) or define(self, node, *rest, **kw)
    )
    module = parse_decoded(source, "<test>")
    FileAnalysis(module, {}, source)
    main, make, remade = [statement for statement in module.body if isinstance(statement, cst.FunctionDef)]
    assert walked[:3] == [make, remade, main]
