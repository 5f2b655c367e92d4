"""Complete PyTorch training programs built from parts by a seed: the generator of the independent
differential fuzz (tests/independent_oracle.py judges them; tests/test_fuzz_independent.py runs a
sample, benchmarks/fuzz_independent.py hundreds).

It was designed apart from tests/training_programs.py, from the shapes that generator never makes:
a logged loss whose elements are later used as tensors, full or windowed backpropagation through
time kept on purpose, gradient hooks, a gradient penalty, a learned initial state, a teacher
trained through a parameter group, two outputs backwarded by a function, a model that keeps its
hidden state on ``self``, gradient accumulation, one backward after the loop, an LBFGS closure, a
look at the gradients with ``torch.autograd.grad``. A program is one to three sections, each a
training task (a regression, two heads on a shared trunk, a recurrent model, a GAN, distillation,
two networks backwarded by a function) with its own models, optimizer, loop, logging and wrapping
(module level, a function, a step function that the loop calls, a trainer class whose state is on
``self``); sections reuse the names of losses, data and optimizers, as files with several
experiments do.

Every choice is a pick among a part's options (``GRAMMAR``), drawn from the seed or forced, so a
program is rebuilt from its seed and its choices, and a smaller one from simpler choices. Each
option declares what it makes of the program: most are correct code; those in ``RAISING`` raise
"Trying to backward through the graph a second time"; those in ``LEAKING`` keep every step's graph
alive. A program's kind is read from its parts, never from running it or from gradfix; at most
one part of a program raises.

Every section ends by printing checksums of its parameters and the numbers it logged (at full
precision); ``Program.retained_source`` is the same program with ``retain_graph=True`` on every
backward, the run a fix of the error is compared with.
"""

from __future__ import annotations

import ast
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

FEATURES, HIDDEN, BATCH, LATENT = 3, 4, 2, 2
STEPS, SEQUENCES, TIME_STEPS, EPOCHS = 3, 2, 3, 2

CORRECT, RAISING_KIND, LEAKING_KIND = "correct", "raising", "leaking"

# A part's options, simplest first (what a smaller program falls back to).
GRAMMAR: dict[str, tuple[str, ...]] = {
    "program.sections": ("1", "2", "3"),
    "program.dtype": ("float32", "float64"),
    "section.task": ("regression", "two_heads", "recurrent", "gan", "distillation", "function_backwards"),
    "section.loop": ("range", "zip", "epochs", "while"),
    "section.wrap": ("module", "function", "step_function", "trainer_class"),
    "section.optimizer": ("sgd", "adam", "param_groups", "add_param_group", "by_hand"),
    "section.zero_grad": ("top", "after_step"),
    "section.logging": (
        "none",
        "item_total",
        "append_item",
        "append_detached",
        "detached_window",
        "no_grad_stats",
        "print_item",
        "append_stack",
        "append_last_item",
        "append_max_item",
        "append_each_item",
        "append_first_cpu",
        "append_grad_fn",
        "append_float_sum",
        "running_sum",
        "history_dict",
        "extend",
        "cat_history",
        "moving_average",
        "sum_item",
        "comprehension_items",
        "stack_window",
    ),
    "model.kind": ("linear", "mlp", "net_class", "module_dict", "adapters"),
    "regression.loss": ("mse", "l1", "criterion", "manual", "helper"),
    "regression.schedule": ("every_step", "accumulate", "full_batch", "closure"),
    "regression.forward": ("in_loop", "before_loop"),
    "regression.backward": (
        "plain",
        "needless_retain",
        "retain_variable",
        "autograd",
        "helper",
        "grad_check",
        "retain_then_grad",
        "kept_by_helper",
        "branches",
        "twice",
        "helper_backwards_too",
    ),
    "regression.extra": ("none", "clip_norm", "clip_hooks", "data_update", "evaluation", "initial_loss"),
    "two_heads.trunk": ("sequential", "class"),
    "two_heads.heads": ("attributes", "module_dict"),
    "two_heads.backward": (
        "summed",
        "total",
        "autograd_list",
        "first_retained",
        "param_hooks_summed",
        "tensor_hook_summed",
        "sum_of_list",
        "separate",
        "tensor_hook_separate",
        "param_hooks_separate",
        "grad_read_between",
        "second_loss_after_first_backward",
    ),
    "recurrent.form": ("stepwise", "sequences", "full_bptt", "windowed"),
    "recurrent.stepwise_state": (
        "detach_top",
        "detach_all",
        "repackage",
        "learned_h0",
        "reset_stateful",
        "none_start",
        "carried",
        "carried_stateful",
        "carried_none_start",
    ),
    "recurrent.windowed_state": ("zeros", "learned_h0"),
    "recurrent.sequences_state": ("zeros", "learned_h0", "init_hidden", "carried"),
    "recurrent.full_bptt_state": ("zeros", "learned_h0", "stateful"),
    "recurrent.cell": ("rnn", "gru", "lstm", "stateful"),
    "gan.loss": ("standard", "wgan_gp"),
    "gan.detach": ("detached", "undetached", "shared_prediction"),
    "gan.order": ("discriminator_first", "generator_first"),
    "gan.discriminator_loss": ("inline", "helper"),
    "distillation.teacher": ("linear", "mlp"),
    "distillation.target": (
        "per_step_detached",
        "no_grad",
        "cached_requires_grad_false",
        "per_step_joint",
        "cached_frozen",
        "cached_param_group",
        "cached_module_dict",
        "cached_concatenated_list",
        "cached_teacher_optimizer",
    ),
    "function_backwards.layers": ("linear", "conv"),
    "function_backwards.outputs": ("two", "one_twice"),
}

RAISING: frozenset[tuple[str, str]] = frozenset(
    {
        ("regression.forward", "before_loop"),
        ("regression.backward", "twice"),
        ("regression.backward", "helper_backwards_too"),
        ("two_heads.backward", "separate"),
        ("two_heads.backward", "tensor_hook_separate"),
        ("two_heads.backward", "param_hooks_separate"),
        ("two_heads.backward", "grad_read_between"),
        ("two_heads.backward", "second_loss_after_first_backward"),
        ("recurrent.stepwise_state", "carried"),
        ("recurrent.stepwise_state", "carried_stateful"),
        ("recurrent.stepwise_state", "carried_none_start"),
        ("recurrent.sequences_state", "carried"),
        ("gan.detach", "undetached"),
        ("gan.detach", "shared_prediction"),
        ("distillation.target", "cached_frozen"),
        ("distillation.target", "cached_param_group"),
        ("distillation.target", "cached_module_dict"),
        ("distillation.target", "cached_concatenated_list"),
        ("distillation.target", "cached_teacher_optimizer"),
        ("function_backwards.outputs", "one_twice"),
    }
)
LEAKING: frozenset[tuple[str, str]] = frozenset(
    ("section.logging", option)
    for option in (
        "append_stack",
        "append_last_item",
        "append_max_item",
        "append_each_item",
        "append_first_cpu",
        "append_grad_fn",
        "append_float_sum",
        "running_sum",
        "history_dict",
        "extend",
        "cat_history",
        "moving_average",
        "sum_item",
        "comprehension_items",
        "stack_window",
    )
)
# How often a drawn option that raises or leaks is kept (else a correct option of its part is
# drawn instead): enough programs are correct, and each has at most one raising part.
_KEPT = {**{part: 0.6 for part in RAISING}, **{part: 0.4 for part in LEAKING}}
# The part that tells a task's programs apart, for counting by shape.
MAIN_PART = {
    "regression": "regression.backward",
    "two_heads": "two_heads.backward",
    "recurrent": "recurrent.form",
    "gan": "gan.loss",
    "distillation": "distillation.target",
    "function_backwards": "function_backwards.outputs",
}


def all_parts() -> frozenset[tuple[str, str]]:
    return frozenset((part, option) for part, options in GRAMMAR.items() for option in options)


class Choices:
    """The picks of one program: each draws two numbers from the seed's stream (forced or not, so
    that forcing one pick leaves the others' draws where they were)."""

    def __init__(self, seed: int, forced: Mapping[str, str]) -> None:
        self.random = random.Random(seed)
        self.forced = forced
        self.made: dict[str, str] = {}
        self.raising_part: str | None = None  # ``part=option``
        self.raising_slot = ""

    def pick(self, slot: str, part: str, allowed: Sequence[str] | None = None) -> str:
        options = [option for option in GRAMMAR[part] if allowed is None or option in allowed]
        if self.raising_part is not None:
            options = [option for option in options if (part, option) not in RAISING]
        assert options, f"no option left for {slot}"
        first, second = self.random.random(), self.random.random()
        drawn = options[int(first * len(options))]
        if second > _KEPT.get((part, drawn), 1.0):  # drawn less often than a correct option
            plain = [option for option in options if (part, option) not in _KEPT]
            drawn = plain[int(first * len(plain))] if plain else drawn
        chosen = self.forced.get(slot, drawn)
        if chosen not in options:
            chosen = drawn
        self.made[slot] = chosen
        if (part, chosen) in RAISING:
            self.raising_part, self.raising_slot = f"{part}={chosen}", slot
        return chosen


@dataclass(frozen=True)
class Backward:
    """A backward call: the retained rendering passes ``retain_graph=True``."""

    call: str  # what is called: ``loss.backward``, ``torch.autograd.backward``
    arguments: tuple[str, ...] = ()
    retain: bool | str = False  # the program itself keeps the graph (or passes this expression)

    def render(self, retained: bool) -> str:
        retain = "True" if retained or self.retain is True else self.retain or None
        arguments = list(self.arguments) + ([f"retain_graph={retain}"] if retain else [])
        return f"{self.call}({', '.join(arguments)})"


class Block:
    """Lines of code at nesting depths; a backward renders by the variant."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str | Backward]] = []
        self.depth = 0

    def add(self, *lines: str | Backward) -> None:
        self.lines += [(self.depth, line) for line in lines]

    @contextmanager
    def inside(self, head: str) -> Iterator[None]:
        self.add(head)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def include(self, other: Block) -> None:
        self.lines += [(self.depth + depth, line) for depth, line in other.lines]

    def render(self, retained: bool) -> list[str]:
        return ["    " * depth + (line.render(retained) if isinstance(line, Backward) else line) for depth, line in self.lines]


@dataclass
class Model:
    """A model a task trains: how it is built, called, and reached."""

    name: str
    parameters: str  # an iterable of its parameters
    first_layer: str  # a layer with a ``weight``
    call: str  # ``{}`` stands for the input


class Optimizer:
    """One optimizer over some parameter sources, by the section's pick."""

    def __init__(self, section: Section, sources: Sequence[str], name: str = "optimizer", style: str | None = None) -> None:
        self.section, self.name = section, name
        self.style = style or section.pick("section.optimizer")
        self.listed = f"{name.removesuffix('optimizer')}parameters"  # by hand: the list it updates
        setup = section.setup
        together = sources[0] if len(sources) == 1 else "[" + ", ".join(f"*{s}" for s in sources) + "]"
        if self.style == "sgd":
            setup.add(f"{name} = torch.optim.SGD({together}, lr=0.05)")
        elif self.style == "adam":
            setup.add(f"{name} = torch.optim.Adam({together}, lr=0.01)")
        elif self.style == "lbfgs":  # its step calls a closure that backwards, several times
            setup.add(f"{name} = torch.optim.LBFGS({together}, lr=0.1, max_iter=3)")
        elif self.style == "param_groups":
            groups = [f'{{"params": {sources[0]}}}'] + [f'{{"params": {s}, "lr": 0.02}}' for s in sources[1:]]
            setup.add(f"{name} = torch.optim.SGD([{', '.join(groups)}], lr=0.05, momentum=0.9)")
        elif self.style == "add_param_group":
            if len(sources) == 1:  # a group of its own for all but the first tensor
                setup.add(f"{self.listed} = list({sources[0]})")
                setup.add(f"{name} = torch.optim.SGD({self.listed}[:1], lr=0.05)")
                setup.add(f'{name}.add_param_group({{"params": {self.listed}[1:], "lr": 0.02}})')
            else:
                setup.add(f"{name} = torch.optim.SGD({sources[0]}, lr=0.05)")
                setup.add(*(f'{name}.add_param_group({{"params": {s}, "lr": 0.02}})' for s in sources[1:]))
        else:
            setup.add(f"{self.listed} = {together if together.startswith('[') else f'list({together})'}")

    def zero(self, block: Block) -> None:
        if self.style == "by_hand":
            with block.inside(f"for parameter in {self.listed}:"):
                block.add("parameter.grad = None")
        else:
            block.add(f"{self.name}.zero_grad()")

    def step(self, block: Block) -> None:
        if self.style == "by_hand":
            with block.inside("with torch.no_grad():"):
                with block.inside(f"for parameter in {self.listed}:"):
                    with block.inside("if parameter.grad is not None:"):
                        block.add("parameter -= 0.05 * parameter.grad")
        else:
            block.add(f"{self.name}.step()")


class Section:
    """One training task of a program: its setup, the body its loop runs, what follows the loop."""

    def __init__(self, program: ProgramBuilder, index: int) -> None:
        self.program, self.index = program, index
        self.label = f"s{index}"
        self.setup, self.body, self.after = Block(), Block(), Block()
        self.reported: list[str] = []  # iterables of the parameters it trains (and keeps frozen)
        self.logged: list[str] = []  # the numbers it prints at its end
        self.logged_tensor: str | None = None  # the loss each iteration backwards, for the logging parts
        self.task = ""
        self.loop = self.wrap = ""

    def pick(self, part: str, allowed: Sequence[str] | None = None) -> str:
        return self.program.choices.pick(f"{self.label}.{part}", part, allowed)

    def name(self, base: str) -> str:
        """Modules are named apart in each section; losses, data and optimizers reuse names."""
        return base if self.index == 1 else f"{base}_{self.index}"

    def define(self, name: str, *lines: str | Backward) -> None:
        self.program.define(name, self.label, *lines)

    def data(self, *shape: int, name: str = "data_x") -> None:
        self.setup.add(f"{name} = torch.randn({', '.join(map(str, shape))})")


class ProgramBuilder:
    def __init__(self, choices: Choices) -> None:
        self.choices = choices
        self.definitions: dict[str, Block] = {}
        self.users: dict[str, set[str]] = {}  # the sections that use each definition

    def define(self, name: str, user: str, *lines: str | Backward) -> None:
        """A class or function at the top of the program, once however many sections use it; its
        lines carry their own indentation, and a backward is a statement of its function's body."""
        self.users.setdefault(name, set()).add(user)
        if name not in self.definitions:
            block = self.definitions[name] = Block()
            block.lines += [(1 if isinstance(line, Backward) else 0, line) for line in lines]


@dataclass(frozen=True)
class Program:
    seed: int
    choices: Mapping[str, str]  # every pick made, by slot (``s1.section.task``)
    kind: str  # CORRECT, RAISING_KIND or LEAKING_KIND, from the parts
    raising_part: str | None  # ``part=option`` of the part that raises
    raising_section: str | None  # its section's label; that section comes last
    shapes: Mapping[str, str]  # by section label, in the order they run: task, main part's option, logging
    source: str
    retained_source: str = field(repr=False)
    # The sections each line of the source belongs to: its section's, or its definition's users.
    line_sections: tuple[frozenset[str], ...] = field(repr=False, default=())

    @property
    def parts(self) -> frozenset[tuple[str, str]]:
        return frozenset((slot.split(".", 1)[1], option) for slot, option in self.choices.items())

    def sections_at(self, line: int) -> frozenset[str]:
        """The sections that run the source's ``line`` (1-based)."""
        return self.line_sections[line - 1] if 0 < line <= len(self.line_sections) else frozenset()


def generate(seed: int, forced: Mapping[str, str] = {}) -> Program:
    """The program of ``seed``; ``forced`` maps slots to the options to take instead of drawing."""
    choices = Choices(seed, forced)
    builder = ProgramBuilder(choices)
    dtype = choices.pick("p.program.dtype", "program.dtype")
    count = int(choices.pick("p.program.sections", "program.sections"))
    sections = [_section(builder, seed, index) for index in range(1, count + 1)]
    # The raising section runs last, so that every other section has printed its numbers when it fails.
    raising = next((s for s in sections if choices.raising_slot.startswith(f"{s.label}.")), None)
    if raising is not None:
        sections.remove(raising)
        sections.append(raising)
    line_sections: list[frozenset[str]] = []

    def render(retained: bool) -> str:
        lines = ["import torch", "import torch.nn as nn"]
        if dtype == "float64":
            lines.append("torch.set_default_dtype(torch.float64)")
        line_sections[:] = [frozenset()] * len(lines)
        for name, definition in builder.definitions.items():
            code = ["", ""] + definition.render(retained)
            lines += code
            line_sections.extend([frozenset(builder.users[name])] * len(code))
        for section in sections:
            code = ["", ""] + _placed(section, retained)
            lines += code
            line_sections.extend([frozenset({section.label})] * len(code))
        return "\n".join(lines) + "\n"

    parts = {(slot.split(".", 1)[1], option) for slot, option in choices.made.items()}
    kind = RAISING_KIND if choices.raising_part else LEAKING_KIND if parts & LEAKING else CORRECT
    shapes = {s.label: f"{s.task}:{choices.made[f'{s.label}.{MAIN_PART[s.task]}']}+{choices.made[f'{s.label}.section.logging']}" for s in sections}
    source, retained_source = render(False), render(True)
    raising_label = raising.label if raising is not None else None
    return Program(seed, dict(choices.made), kind, choices.raising_part, raising_label, shapes, source, retained_source, tuple(line_sections))


def _section(builder: ProgramBuilder, seed: int, index: int) -> Section:
    section = Section(builder, index)
    # Seeded apart: a fix that changes what one section draws leaves the others' numbers.
    section.setup.add(f"torch.manual_seed({(seed + index) % 1000})")
    section.define(
        "report",
        "def report(section, parameters, logged):",
        "    tensors = [p.detach().double() for p in parameters]",
        "    absolute = sum(t.abs().sum().item() for t in tensors)",
        "    squared = sum(t.pow(2).sum().item() for t in tensors)",
        '    print(section, "parameters", repr(absolute), repr(squared))',
        '    print(section, "logged", *[repr(float(value)) for value in logged])',
    )
    section.task = section.pick("section.task")
    TASKS[section.task](section)
    _logging(section)
    section.loop = section.pick("section.loop")
    section.wrap = section.pick("section.wrap")
    parameters = ", ".join(f"*{source}" for source in section.reported)
    section.after.add(f'report("{section.label}", [{parameters}], [{", ".join(section.logged)}])')
    return section


def _placed(section: Section, retained: bool) -> list[str]:
    """The section's code, wrapped by its pick: at module level; in a function the module calls;
    with its loop body in a step function (the names the body assigns made global, so that it
    means what the module-level loop means); or as a trainer class, whose ``__init__`` runs the
    setup and whose ``fit`` runs the loop, every name the setup assigns made an attribute."""
    loop, wrap = section.loop, section.wrap
    step_function = f"train_step_{section.label}"
    body = section.body
    code = Block()
    if wrap == "trainer_class":
        setup = section.setup.render(retained)
        loop_code = Block()
        _add_loop(loop_code, loop, body)
        loop_code.include(section.after)
        attributes = _assigned_names(setup)
        trainer = f"Trainer{section.label.upper()}"
        return [
            f"class {trainer}:",
            "    def __init__(self):",
            *_as_attributes(setup, attributes),
            "",
            "    def fit(self):",
            *_as_attributes(loop_code.render(retained), attributes),
            "",
            "",
            f"{trainer}().fit()",
        ]
    if wrap == "step_function":
        body = Block()
        body.add(f"{step_function}(step, x, y)")
        assigned = _assigned_names(section.body.render(retained=False)) - {"step", "x", "y"}
        code.add(f"def {step_function}(step, x, y):")
        code.depth += 1
        if assigned:
            code.add(f"global {', '.join(sorted(assigned))}")
        code.include(section.body)
        code.depth -= 1
        code.add("", "")
    if wrap == "function":
        code.add(f"def train_{section.label}():")
        code.depth += 1
    code.include(section.setup)
    _add_loop(code, loop, body)
    code.include(section.after)
    if wrap == "function":
        code.depth -= 1
        code.add("", "", f"train_{section.label}()")
    return code.render(retained)


def _add_loop(code: Block, loop: str, body: Block) -> None:
    """The training loop by its pick; each names ``step`` (the index in the data), ``x`` and ``y``."""
    if loop == "range":
        with code.inside("for step in range(len(data_x)):"):
            code.add("x, y = data_x[step], data_y[step]")
            code.include(body)
    elif loop == "zip":
        with code.inside("for step, (x, y) in enumerate(zip(data_x, data_y)):"):
            code.include(body)
    elif loop == "epochs":
        with code.inside(f"for epoch in range({EPOCHS}):"):
            with code.inside("for step, (x, y) in enumerate(zip(data_x, data_y)):"):
                code.include(body)
    else:
        code.add("step = 0")
        with code.inside("while step < len(data_x):"):
            code.add("x, y = data_x[step], data_y[step]")
            code.include(body)
            code.add("step += 1")


_OWN_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.FunctionDef)


def _assigned_names(lines: list[str]) -> set[str]:
    """Names the lines assign in their own scope (a nested function's name, not its locals)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        if isinstance(node, _OWN_SCOPES):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse("\n".join(lines)))
    return names


class _ToAttributes(ast.NodeTransformer):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in self.names:
            return node
        return ast.copy_location(ast.Attribute(ast.Name("self", ast.Load()), node.id, node.ctx), node)


def _as_attributes(lines: list[str], names: set[str]) -> list[str]:
    """The lines, as a method body (two levels in), with ``names`` read and written on ``self``."""
    tree = _ToAttributes(names).visit(ast.parse("\n".join(lines)))
    return ["        " + line for line in ast.unparse(ast.fix_missing_locations(tree)).splitlines()]


# --- models ---------------------------------------------------------------------------------------


def _model(section: Section, base: str) -> Model:
    kind = section.pick("model.kind")
    name = section.name(base)
    if kind == "linear":
        section.setup.add(f"{name} = nn.Linear({FEATURES}, 1)")
        return Model(name, f"{name}.parameters()", name, f"{name}({{}})")
    if kind == "mlp":
        section.setup.add(f"{name} = nn.Sequential(nn.Linear({FEATURES}, {HIDDEN}), nn.Tanh(), nn.Linear({HIDDEN}, 1))")
        return Model(name, f"{name}.parameters()", f"{name}[0]", f"{name}({{}})")
    if kind == "net_class":
        section.define(
            "Regressor",
            "class Regressor(nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            f"        self.body = nn.Linear({FEATURES}, {HIDDEN})",
            f"        self.head = nn.Linear({HIDDEN}, 1)",
            "",
            "    def forward(self, x):",
            "        return self.head(torch.tanh(self.body(x)))",
        )
        section.setup.add(f"{name} = Regressor()")
        return Model(name, f"{name}.parameters()", f"{name}.body", f"{name}({{}})")
    if kind == "module_dict":
        section.setup.add(f'{name} = nn.ModuleDict({{"body": nn.Linear({FEATURES}, {HIDDEN}), "head": nn.Linear({HIDDEN}, 1)}})')
        return Model(name, f"{name}.parameters()", f'{name}["body"]', f'{name}["head"](torch.tanh({name}["body"]({{}})))')
    section.define(
        "AdaptedRegressor",
        "class AdaptedRegressor(nn.Module):",
        "    def __init__(self, tasks):",
        "        super().__init__()",
        f"        self.body = nn.Linear({FEATURES}, {HIDDEN})",
        f"        self.head = nn.Linear({HIDDEN}, 1)",
        "        self.adapters = nn.ParameterDict()",
        "        for name in tasks:",
        f"            self.adapters[name] = nn.Parameter(torch.zeros({HIDDEN}))",
        "",
        "    def forward(self, x, task):",
        "        return self.head(torch.tanh(self.body(x) + self.adapters[task]))",
    )
    section.setup.add(f'{name} = AdaptedRegressor(("first", "second"))')
    return Model(name, f"{name}.parameters()", f"{name}.body", f'{name}({{}}, "first")')


# --- tasks ----------------------------------------------------------------------------------------


def _regression(section: Section) -> None:
    model = _model(section, "model")
    loss_kind = section.pick("regression.loss")
    schedule = section.pick("regression.schedule")
    # A forward before the loop raises only where every iteration backwards (not one backward of
    # a sum after the loop) and no backward keeps its graph; a second backward of one loss is
    # another raising part.
    forward = section.pick("regression.forward", ("in_loop",) if schedule == "full_batch" else None)
    backward = section.pick("regression.backward", None if forward == "in_loop" else ("plain", "autograd", "helper", "grad_check"))
    extra = section.pick("regression.extra")
    section.data(STEPS, BATCH, FEATURES)
    section.data(STEPS, BATCH, 1, name="data_y")
    section.reported.append(model.parameters)
    if schedule == "closure":
        optimizer = Optimizer(section, [model.parameters], style="lbfgs")
    else:
        optimizer = Optimizer(section, [model.parameters])
    zero_grad = section.pick("section.zero_grad") if schedule == "every_step" else "after_step"
    setup, body, after = section.setup, section.body, section.after
    if loss_kind == "criterion":
        setup.add("criterion = nn.SmoothL1Loss()")
    loss_of = {
        "mse": "nn.functional.mse_loss({prediction}, {target})",
        "l1": "nn.functional.l1_loss({prediction}, {target})",
        "criterion": "criterion({prediction}, {target})",
        "manual": "({prediction} - {target}).pow(2).mean()",
        "helper": "compute_loss({prediction}, {target})",
    }[loss_kind]
    if loss_kind == "helper":
        section.define(
            "compute_loss",
            "def compute_loss(prediction, target):",
            "    return nn.functional.mse_loss(prediction, target) + 0.01 * prediction.abs().mean()",
        )
    if extra == "clip_hooks":
        with setup.inside(f"for parameter in {model.parameters}:"):
            setup.add("parameter.register_hook(lambda grad: grad.clamp(-0.05, 0.05))")
    if extra == "evaluation":
        setup.add("evaluations = []")
    if backward == "retain_variable":
        setup.add("keep_graph = True")
    if forward == "before_loop":
        setup.add(f"prediction = {model.call.format('data_x[0]')}")
    if extra == "initial_loss":
        # A loss of the untrained model, kept with its graph and never backwarded: printed only.
        setup.add(f"initial_loss = {loss_of.format(prediction=model.call.format('data_x[0]'), target='data_y[0]')}")
        section.logged.append("initial_loss.item()")

    def backward_and_clip(block: Block, target: str) -> None:
        if backward == "plain":
            block.add(Backward(f"{target}.backward"))
        elif backward == "needless_retain":
            block.add(Backward(f"{target}.backward", retain=True))
        elif backward == "retain_variable":
            block.add(Backward(f"{target}.backward", retain="keep_graph"))
        elif backward == "autograd":
            block.add(Backward("torch.autograd.backward", (target,)))
        elif backward == "helper":
            section.define("backward_of", "def backward_of(value):", Backward("value.backward"))
            block.add(f"backward_of({target})")
        elif backward == "grad_check":
            # A look at the gradients before the backward that trains, which keeps the graph for it.
            block.add(
                f"gradients = torch.autograd.grad({target}, list({model.parameters}), retain_graph=True, allow_unused=True)",
                "gradient_norm = sum(g.pow(2).sum() for g in gradients if g is not None)",
                Backward(f"{target}.backward"),
            )
        elif backward == "retain_then_grad":
            # The graph kept by the backward is walked again by a look at the gradients.
            block.add(
                Backward(f"{target}.backward", retain=True),
                f"gradients = torch.autograd.grad({target}, list({model.parameters}), allow_unused=True)",
                "gradient_norm = sum(g.pow(2).sum() for g in gradients if g is not None)",
            )
        elif backward == "kept_by_helper":
            # A helper keeps the graph, and a second backward of a scaled loss walks it again.
            section.define("backward_keeping", "def backward_keeping(value):", Backward("value.backward", retain=True))
            block.add(f"backward_keeping({target})", Backward(f"({target} * 0.5).backward"))
        elif backward == "branches":
            # Two backwards of one loss, in branches of which one runs.
            with block.inside("if step % 2 == 0:"):
                block.add(Backward(f"{target}.backward"))
            with block.inside("else:"):
                block.add(Backward(f"({target} * 0.5).backward"))
        elif backward == "twice":
            block.add(Backward(f"{target}.backward"), Backward(f"{target}.backward"))
        else:
            section.define(
                "backward_and_return",
                "def backward_and_return(value):",
                Backward("value.backward"),
                "    return value",
            )
            block.add(f"{target} = backward_and_return({target})", Backward(f"{target}.backward"))
        if extra == "clip_norm":
            block.add(f"torch.nn.utils.clip_grad_norm_({model.parameters}, 0.5)")

    def forward_and_loss(block: Block) -> None:
        if forward == "in_loop":
            block.add(f"prediction = {model.call.format('x')}")
        block.add(f"loss = {loss_of.format(prediction='prediction', target='y')}")

    if schedule == "closure":
        with body.inside("def closure():"):
            optimizer.zero(body)
            forward_and_loss(body)
            backward_and_clip(body, "loss")
            body.add("return loss")
        body.add("loss = optimizer.step(closure)")
    elif schedule == "full_batch":
        # One backward of the sum of every batch's loss, after the loop: full-batch training.
        optimizer.zero(setup)
        setup.add("total_loss = 0")
        forward_and_loss(body)
        body.add("total_loss = total_loss + loss")
        backward_and_clip(after, "total_loss")
        optimizer.step(after)
    else:
        if zero_grad == "top":
            optimizer.zero(body)
        forward_and_loss(body)
        backward_and_clip(body, "loss")
        if schedule == "every_step":
            optimizer.step(body)
            if zero_grad == "after_step":
                optimizer.zero(body)
        else:
            with body.inside("if step % 2 == 1:"):  # gradients of two batches, one step
                optimizer.step(body)
                optimizer.zero(body)
    if extra == "data_update":
        body.add(f"{model.first_layer}.weight.data += 0.001 * torch.ones_like({model.first_layer}.weight)")
    elif extra == "evaluation":
        # Kept without a graph (made under no_grad): a tensor, and no leak.
        with body.inside("with torch.no_grad():"):
            body.add(f"evaluation = {loss_of.format(prediction=model.call.format('data_x[0]'), target='data_y[0]')}")
        body.add("evaluations.append(evaluation)")
        section.logged.append("torch.stack(evaluations).mean()")
    section.logged_tensor = "loss"


def _two_heads(section: Section) -> None:
    trunk_kind = section.pick("two_heads.trunk")
    heads_kind = section.pick("two_heads.heads")
    backward = section.pick("two_heads.backward")
    trunk = section.name("trunk")
    if trunk_kind == "sequential":
        section.setup.add(f"{trunk} = nn.Sequential(nn.Linear({FEATURES}, {HIDDEN}), nn.Tanh())")
        trunk_weight = f"{trunk}[0].weight"
    else:
        trunk_weight = f"{trunk}.layer.weight"
        section.define(
            "Trunk",
            "class Trunk(nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            f"        self.layer = nn.Linear({FEATURES}, {HIDDEN})",
            "",
            "    def forward(self, x):",
            "        return torch.tanh(self.layer(x))",
        )
        section.setup.add(f"{trunk} = Trunk()")
    if heads_kind == "attributes":
        head_a, head_b = section.name("head_a"), section.name("head_b")
        section.setup.add(f"{head_a} = nn.Linear({HIDDEN}, 1)", f"{head_b} = nn.Linear({HIDDEN}, 1)")
        sources = [f"{trunk}.parameters()", f"{head_a}.parameters()", f"{head_b}.parameters()"]
    else:
        heads = section.name("heads")
        section.setup.add(f'{heads} = nn.ModuleDict({{"a": nn.Linear({HIDDEN}, 1), "b": nn.Linear({HIDDEN}, 1)}})')
        head_a, head_b = f'{heads}["a"]', f'{heads}["b"]'
        sources = [f"{trunk}.parameters()", f"{heads}.parameters()"]
    section.data(STEPS, BATCH, FEATURES)
    section.data(STEPS, BATCH, 1, name="data_y")
    section.reported += sources
    optimizer = Optimizer(section, sources)
    zero_grad = section.pick("section.zero_grad")
    if backward.startswith("param_hooks"):
        # A clamp of each backward's gradient is not a clamp of their sum.
        with section.setup.inside(f"for parameter in {trunk}.parameters():"):
            section.setup.add("parameter.register_hook(lambda grad: grad.clamp(-0.02, 0.02))")

    body = section.body
    if zero_grad == "top":
        optimizer.zero(body)
    body.add(f"features = {trunk}(x)")
    if backward.startswith("tensor_hook"):
        body.add("features.register_hook(lambda grad: grad.clamp(-0.02, 0.02))")
    body.add(f"loss_a = nn.functional.mse_loss({head_a}(features), y)")
    second_loss = f"loss_b = {head_b}(features).pow(2).mean() * 0.5"
    if backward != "second_loss_after_first_backward":
        body.add(second_loss)
    if backward == "second_loss_after_first_backward":
        body.add(Backward("loss_a.backward"), second_loss, Backward("loss_b.backward"))
    elif backward in ("summed", "param_hooks_summed", "tensor_hook_summed"):
        body.add(Backward("(loss_a + loss_b).backward"))
    elif backward == "total":
        body.add("total_loss = loss_a + loss_b", Backward("total_loss.backward"))
    elif backward == "autograd_list":
        body.add(Backward("torch.autograd.backward", ("[loss_a, loss_b]",)))
    elif backward == "sum_of_list":
        body.add("losses_of_step = [loss_a, loss_b]", Backward("sum(losses_of_step).backward"))
    elif backward == "first_retained":
        body.add(Backward("loss_a.backward", retain=True), Backward("loss_b.backward"))
    elif backward == "grad_read_between":
        # What the first backward alone wrote is read before the second adds to it.
        section.setup.add("first_gradients = []")
        body.add(
            Backward("loss_a.backward"),
            f"first_gradients.append({trunk_weight}.grad.norm().item())",
            Backward("loss_b.backward"),
        )
        section.logged.append("sum(first_gradients)")
    else:
        body.add(Backward("loss_a.backward"), Backward("loss_b.backward"))
    optimizer.step(body)
    if zero_grad == "after_step":
        optimizer.zero(body)
    section.logged_tensor = "loss_a"


_CELL_OPTIONS = {
    ("stepwise", "detach_top"): ("rnn", "gru", "lstm", "stateful"),
    ("stepwise", "detach_all"): ("lstm",),
    ("stepwise", "repackage"): ("rnn", "gru", "lstm"),
    ("windowed", "zeros"): ("rnn", "gru", "lstm"),
    ("windowed", "learned_h0"): ("rnn", "gru"),
    ("stepwise", "learned_h0"): ("rnn", "gru"),
    ("stepwise", "reset_stateful"): ("stateful",),
    ("stepwise", "carried"): ("rnn", "gru", "lstm"),
    ("stepwise", "carried_stateful"): ("stateful",),
    ("stepwise", "none_start"): ("rnn", "gru"),
    ("stepwise", "carried_none_start"): ("rnn", "gru"),
    ("sequences", "zeros"): ("rnn", "gru", "lstm"),
    ("sequences", "learned_h0"): ("rnn", "gru"),
    ("sequences", "init_hidden"): ("stateful",),
    ("sequences", "carried"): ("rnn", "gru", "lstm"),
    ("full_bptt", "zeros"): ("rnn", "gru", "lstm"),
    ("full_bptt", "learned_h0"): ("rnn", "gru"),
    ("full_bptt", "stateful"): ("stateful",),
}


def _recurrent(section: Section) -> None:
    form = section.pick("recurrent.form")
    state = section.pick(f"recurrent.{form}_state")
    cell_kind = section.pick("recurrent.cell", _CELL_OPTIONS[form, state])
    setup, body = section.setup, section.body
    if form == "sequences":
        section.data(SEQUENCES, TIME_STEPS, BATCH, FEATURES)
        section.data(SEQUENCES, TIME_STEPS, BATCH, 1, name="data_y")
    else:
        section.data(TIME_STEPS, BATCH, FEATURES)
        section.data(TIME_STEPS, BATCH, 1, name="data_y")

    zeros = f"torch.zeros({BATCH}, {HIDDEN})"
    if cell_kind == "stateful":
        model = section.name("model")
        section.define(
            "StatefulRegressor",
            "class StatefulRegressor(nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
            f"        self.cell = nn.GRUCell({FEATURES}, {HIDDEN})",
            f"        self.head = nn.Linear({HIDDEN}, 1)",
            "        self.hidden = None",
            "",
            "    def init_hidden(self):",
            f"        return torch.zeros({BATCH}, {HIDDEN})",
            "",
            "    def forward(self, x):",
            "        self.hidden = self.cell(x, self.hidden)",
            "        return self.head(self.hidden)",
        )
        setup.add(f"{model} = StatefulRegressor()")
        sources = [f"{model}.parameters()"]
        initial, reset = f"{model}.init_hidden()", f"{model}.hidden = {model}.init_hidden()"

        def forward(block: Block, inputs: str) -> str:
            return f"{model}({inputs})"

    else:
        cell, head = section.name("cell"), section.name("head")
        module = {"rnn": "nn.RNNCell", "gru": "nn.GRUCell", "lstm": "nn.LSTMCell"}[cell_kind]
        setup.add(f"{cell} = {module}({FEATURES}, {HIDDEN})", f"{head} = nn.Linear({HIDDEN}, 1)")
        sources = [f"{cell}.parameters()", f"{head}.parameters()"]
        initial = f"({zeros}, {zeros})" if cell_kind == "lstm" else zeros
        if state == "learned_h0":
            h0 = section.name("h0")
            setup.add(f"{h0} = nn.Parameter(torch.zeros(1, {HIDDEN}))")
            sources.append(f"[{h0}]")
            initial = f"{h0}.expand({BATCH}, {HIDDEN})"
        reset = f"hidden = {initial}"

        def forward(block: Block, inputs: str) -> str:
            block.add(f"hidden = {cell}({inputs}, hidden)")
            return f"{head}(hidden[0])" if cell_kind == "lstm" else f"{head}(hidden)"

    section.reported += sources
    optimizer = Optimizer(section, sources)
    if form == "full_bptt":
        # Every iteration's backward walks all earlier ones (their graphs kept on purpose); one
        # step after the loop.
        setup.add(reset)
        optimizer.zero(setup)
        prediction = forward(body, "x")
        body.add(f"loss = nn.functional.mse_loss({prediction}, y)", Backward("loss.backward", retain=True))
        optimizer.step(section.after)
    elif form == "windowed":
        # Truncated backpropagation through windows of two steps: each backward keeps its graph
        # for the next step of its window, which walks it again; the window ends with a step and
        # a detach.
        setup.add(reset)
        optimizer.zero(setup)
        prediction = forward(body, "x")
        body.add(f"loss = nn.functional.mse_loss({prediction}, y)", Backward("loss.backward", retain=True))
        with body.inside("if step % 2 == 1:"):
            optimizer.step(body)
            optimizer.zero(body)
            body.add("hidden = (hidden[0].detach(), hidden[1].detach())" if cell_kind == "lstm" else "hidden = hidden.detach()")
    elif form == "sequences":
        if state == "carried":
            setup.add(reset)
        optimizer.zero(body)
        if state != "carried":
            body.add(reset)
        body.add("loss = 0")
        with body.inside("for x_t, y_t in zip(x, y):"):
            prediction = forward(body, "x_t")
            body.add(f"loss = loss + nn.functional.mse_loss({prediction}, y_t)")
        body.add(Backward("loss.backward"))
        optimizer.step(body)
    else:
        if state in ("none_start", "carried_none_start"):
            setup.add("hidden = None")  # the cell starts from zeros
        elif state != "reset_stateful":
            setup.add(reset)
        optimizer.zero(body)
        if state == "none_start":
            with body.inside("if hidden is not None:"):
                body.add("hidden = hidden.detach()")
        elif state == "detach_top":
            if cell_kind == "stateful":
                body.add(f"{model}.hidden = {model}.hidden.detach()")
            elif cell_kind == "lstm":
                body.add("hidden = (hidden[0].detach(), hidden[1].detach())")
            else:
                body.add("hidden = hidden.detach()")
        elif state == "detach_all":
            section.define(
                "detach_all",
                "def detach_all(state):",
                "    return tuple(map(torch.Tensor.detach, state))",
            )
            body.add("hidden = detach_all(hidden)")
        elif state == "repackage":
            section.define(
                "repackage_hidden",
                "def repackage_hidden(state):",
                "    if isinstance(state, torch.Tensor):",
                "        return state.detach()",
                "    return tuple(repackage_hidden(part) for part in state)",
            )
            body.add("hidden = repackage_hidden(hidden)")
        elif state == "reset_stateful":
            body.add(reset)
        prediction = forward(body, "x")
        body.add(f"loss = nn.functional.mse_loss({prediction}, y)", Backward("loss.backward"))
        optimizer.step(body)
        if state == "learned_h0":
            # The state enters the loop with h0's graph: detached where each iteration ends, so
            # the first iteration still trains h0.
            body.add("hidden = hidden.detach()")
    section.logged_tensor = "loss"


def _gan(section: Section) -> None:
    loss_kind = section.pick("gan.loss")
    detach = section.pick("gan.detach")
    generator, discriminator = section.name("generator"), section.name("discriminator")
    setup, body = section.setup, section.body
    setup.add(
        f"{generator} = nn.Sequential(nn.Linear({LATENT}, {HIDDEN}), nn.ReLU(), nn.Linear({HIDDEN}, {FEATURES}))",
        f"{discriminator} = nn.Sequential(nn.Linear({FEATURES}, {HIDDEN}), nn.LeakyReLU(0.2), nn.Linear({HIDDEN}, 1))",
    )
    section.data(STEPS, BATCH, FEATURES)
    setup.add(f"data_y = torch.zeros({STEPS}, {BATCH}, 1)")
    sources = [f"{generator}.parameters()", f"{discriminator}.parameters()"]
    section.reported += sources
    g_optimizer = Optimizer(section, sources[:1], "g_optimizer")
    d_optimizer = Optimizer(section, sources[1:], "d_optimizer", style=g_optimizer.style)
    if loss_kind == "standard":
        setup.add("criterion = nn.BCEWithLogitsLoss()", f"real_labels = torch.ones({BATCH}, 1)", f"fake_labels = torch.zeros({BATCH}, 1)")

    # The discriminator's loss in a helper, which takes the generator's output as an argument.
    helper = section.pick("gan.discriminator_loss", None if detach != "shared_prediction" else ("inline",))
    if helper == "helper" and loss_kind == "standard":
        section.define(
            "discriminator_loss",
            "def discriminator_loss(discriminator, real, fake, criterion, real_labels, fake_labels):",
            "    return criterion(discriminator(real), real_labels) + criterion(discriminator(fake), fake_labels)",
        )
    elif helper == "helper":
        section.define(
            "critic_loss",
            "def critic_loss(critic, real, fake):",
            "    return critic(fake).mean() - critic(real).mean()",
        )
    body.add(f"noise = torch.randn({BATCH}, {LATENT})", f"fake = {generator}(noise)")
    if detach == "shared_prediction":
        # One prediction on the fake batch, which both losses read: no detach can fix it.
        body.add(f"fake_scores = {discriminator}(fake)")

    def discriminator_step() -> None:
        d_optimizer.zero(body)
        scores_of_fake = {"detached": f"{discriminator}(fake.detach())", "undetached": f"{discriminator}(fake)"}.get(detach, "fake_scores")
        seen = "fake.detach()" if detach == "detached" else "fake"
        if loss_kind == "standard" and helper == "helper":
            body.add(f"d_loss = discriminator_loss({discriminator}, x, {seen}, criterion, real_labels, fake_labels)")
            body.add(Backward("d_loss.backward"))
        elif loss_kind == "standard":
            body.add(f"d_loss = criterion({discriminator}(x), real_labels) + criterion({scores_of_fake}, fake_labels)")
            body.add(Backward("d_loss.backward"))
        else:
            # The critic sees fake.detach(); the penalty's interpolation may still reach the generator.
            if helper == "helper":
                body.add(f"d_loss = critic_loss({discriminator}, x, fake.detach())")
            else:
                critic_of_fake = "fake_scores" if detach == "shared_prediction" else f"{discriminator}(fake.detach())"
                body.add(f"d_loss = {critic_of_fake}.mean() - {discriminator}(x).mean()")
            body.add(f"alpha = torch.rand({BATCH}, 1)")
            if detach == "undetached":
                body.add("mixed = alpha * x + (1 - alpha) * fake")
            else:
                body.add("mixed = (alpha * x + (1 - alpha) * fake.detach()).requires_grad_(True)")
            body.add(
                f"scores = {discriminator}(mixed)",
                "gradients = torch.autograd.grad(scores.sum(), mixed, create_graph=True)[0]",
                "penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean()",
                Backward("(d_loss + 10 * penalty).backward"),
            )
        d_optimizer.step(body)

    def generator_step() -> None:
        g_optimizer.zero(body)
        scores_of_fake = "fake_scores" if detach == "shared_prediction" else f"{discriminator}(fake)"
        if loss_kind == "standard":
            body.add(f"g_loss = criterion({scores_of_fake}, real_labels)")
        else:
            body.add(f"g_loss = -{scores_of_fake}.mean()")
        body.add(Backward("g_loss.backward"))
        g_optimizer.step(body)

    # Either order raises when the discriminator's backward reaches the generator's graph.
    steps = (discriminator_step, generator_step)
    for take_step in steps if section.pick("gan.order") == "discriminator_first" else reversed(steps):
        take_step()
    section.logged_tensor = "g_loss"


def _distillation(section: Section) -> None:
    target = section.pick("distillation.target")
    # A trained teacher is linear: the graph kept of it then holds no weight that its steps change.
    trained = target in (
        "per_step_joint",
        "cached_param_group",
        "cached_module_dict",
        "cached_concatenated_list",
        "cached_teacher_optimizer",
    )
    teacher_kind = section.pick("distillation.teacher", ("linear",) if trained else None)
    student = _model(section, "student")
    teacher = section.name("teacher")
    setup, body = section.setup, section.body
    if teacher_kind == "linear":
        setup.add(f"{teacher} = nn.Linear({FEATURES}, 1)")
    else:
        setup.add(f"{teacher} = nn.Sequential(nn.Linear({FEATURES}, {HIDDEN}), nn.Tanh(), nn.Linear({HIDDEN}, 1))")
    section.data(STEPS, BATCH, FEATURES)
    section.data(STEPS, BATCH, 1, name="data_y")
    section.reported += [student.parameters, f"{teacher}.parameters()"]
    if target in ("per_step_joint", "cached_module_dict"):
        networks = section.name("networks")
        setup.add(f'{networks} = nn.ModuleDict({{"student": {student.name}, "teacher": {teacher}}})')
        optimizer = Optimizer(section, [f"{networks}.parameters()"])
    elif target == "cached_param_group":
        optimizer = Optimizer(section, [student.parameters], style="sgd")
        setup.add(f'optimizer.add_param_group({{"params": {teacher}.parameters(), "lr": 0.05}})')
    elif target == "cached_concatenated_list":
        optimizer = Optimizer(section, [f"list({student.parameters}) + list({teacher}.parameters())"], style="sgd")
    else:
        optimizer = Optimizer(section, [student.parameters])
    teacher_optimizer = None
    if target == "cached_teacher_optimizer":
        teacher_optimizer = Optimizer(section, [f"{teacher}.parameters()"], "teacher_optimizer", style="sgd")
    if target == "no_grad":
        with setup.inside("with torch.no_grad():"):
            setup.add(f"soft_targets = {teacher}(data_x)")
    elif target == "cached_requires_grad_false":
        # A frozen teacher's output built from data carries no graph.
        setup.add(f"{teacher}.requires_grad_(False)", f"soft_targets = {teacher}(data_x)")
    elif target.startswith("cached"):
        setup.add(f"soft_targets = {teacher}(data_x)")

    zero_grad = section.pick("section.zero_grad")
    optimizers = [optimizer] + ([teacher_optimizer] if teacher_optimizer else [])
    if zero_grad == "top":
        for each in optimizers:
            each.zero(body)
    body.add(f"prediction = {student.call.format('x')}")
    if target == "per_step_detached":
        body.add(f"target = {teacher}(x).detach()")
    elif target == "per_step_joint":
        body.add(f"target = {teacher}(x)")
    else:
        body.add("target = soft_targets[step]")
    loss = "nn.functional.mse_loss(prediction, target) + 0.1 * nn.functional.mse_loss(prediction, y)"
    if target == "per_step_joint":
        loss += " + nn.functional.mse_loss(target, y)"
    body.add(f"loss = {loss}", Backward("loss.backward"))
    for each in optimizers:
        each.step(body)
    if zero_grad == "after_step":
        for each in optimizers:
            each.zero(body)
    section.logged_tensor = "loss"


def _function_backwards(section: Section) -> None:
    layers = section.pick("function_backwards.layers")
    outputs = section.pick("function_backwards.outputs")
    first, second = section.name("conv1"), section.name("conv2")
    if layers == "conv":
        section.setup.add(f"{first} = nn.Conv1d(1, 2, 3)", f"{second} = nn.Conv1d(1, 2, 3)")
        section.data(STEPS, BATCH, 1, 6)
    else:
        section.setup.add(f"{first} = nn.Linear({FEATURES}, 2)", f"{second} = nn.Linear({FEATURES}, 2)")
        section.data(STEPS, BATCH, FEATURES)
    section.setup.add(f"data_y = torch.zeros({STEPS})")
    sources = [f"{first}.parameters()", f"{second}.parameters()"]
    section.reported += sources
    optimizer = Optimizer(section, sources)
    if outputs == "two":
        helper = "backward_outputs"
        section.define(
            helper,
            "def backward_outputs(first, second, signal):",
            "    out1 = first(signal)",
            "    out2 = second(signal)",
            "    g = torch.rand_like(out1)",
            Backward("out1.backward", ("g",)),
            Backward("out2.backward", ("g",)),
        )
    else:
        helper = "backward_product_twice"
        section.define(
            helper,
            "def backward_product_twice(first, second, signal):",
            "    out = first(signal) * second(signal)",
            "    g = torch.rand_like(out)",
            Backward("out.backward", ("g",)),
            Backward("out.backward", ("g",)),
        )
    optimizer.zero(section.body)
    section.body.add(f"{helper}({first}, {second}, x)")
    optimizer.step(section.body)


TASKS = {
    "regression": _regression,
    "two_heads": _two_heads,
    "recurrent": _recurrent,
    "gan": _gan,
    "distillation": _distillation,
    "function_backwards": _function_backwards,
}


def _logging(section: Section) -> None:
    """What the section keeps of the loss it backwards, and the numbers it prints of it."""
    loss = section.logged_tensor
    logging = section.pick("section.logging", None if loss is not None else ("none",))
    setup, body, after, logged = section.setup, section.body, section.after, section.logged
    if logging.startswith("append_") or logging == "detached_window":
        setup.add("losses = []")
    if logging == "none":
        return
    if logging == "item_total":
        setup.add("total = 0.0")
        body.add(f"total += {loss}.item()")
        logged.append("total")
    elif logging == "append_item":
        body.add(f"losses.append({loss}.item())")
        logged.append("sum(losses) / len(losses)")
    elif logging == "append_detached":
        body.add(f"losses.append({loss}.detach())")
        logged.append("torch.stack(losses).mean()")
    elif logging == "detached_window":
        body.add(f"{loss} = {loss}.detach()", f"losses.append({loss})")
        after.add("window = sum(losses[-2:]) / 2")
        logged.append("window.item()")
    elif logging == "no_grad_stats":
        setup.add("stats = torch.zeros(len(data_x))")
        with body.inside("with torch.no_grad():"):
            body.add(f"stats[step] = {loss}")
        logged.append("stats.sum()")
    elif logging == "print_item":
        body.add(f'print("{section.label} step", step, repr({loss}.item()))')
    elif logging == "running_sum":
        setup.add("total = 0.0", "count = 0")
        body.add(f"total = total + {loss}", "count += 1")
        logged.append("(total / count).item()")
    elif logging == "history_dict":
        setup.add('history = {"loss": []}')
        body.add(f'history["loss"].append({loss})')
        logged.append('torch.stack(history["loss"]).mean()')
    elif logging == "extend":
        setup.add("losses = []")
        body.add(f"losses += [{loss}]")
        logged.append("torch.stack(losses).sum()")
    elif logging == "cat_history":
        setup.add("history = torch.zeros(0)")
        body.add(f"history = torch.cat([history, {loss}.reshape(1)])")
        logged.append("history.mean()")
    elif logging == "sum_item":
        setup.add("losses = []")
        body.add(f"losses.append({loss})")
        logged.append("sum(losses).item()")
    elif logging == "comprehension_items":
        setup.add("losses = []")
        body.add(f"losses.append({loss})")
        logged.append("sum([value.item() for value in losses])")
    elif logging == "stack_window":
        setup.add("losses = []")
        body.add(f"losses.append({loss})")
        logged.append("torch.stack(losses[-2:]).mean()")
    elif logging == "moving_average":
        setup.add("average = None")
        body.add(f"average = {loss} if average is None else 0.9 * average + 0.1 * {loss}")
        logged.append("average.item()")
    else:
        body.add(f"losses.append({loss})")
        if logging == "append_stack":
            logged.append("torch.stack(losses).mean()")
        elif logging == "append_last_item":
            logged.append("losses[-1].item()")
        elif logging == "append_max_item":
            logged.append("max(losses).item()")
        elif logging == "append_each_item":
            after.add("values = []")
            with after.inside("for value in losses:"):
                after.add("values.append(value.item())")
            logged.append("sum(values)")
        elif logging == "append_first_cpu":
            logged.append("losses[0].cpu()")
        elif logging == "append_grad_fn":
            after.add("kept_graph = losses[-1].grad_fn is not None")
            logged.append("losses[-1]")
        else:
            logged.append("float(sum(losses))")
