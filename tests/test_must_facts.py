"""Facts the analysis proves from code it read, each with the variant that hides the fact (the
code moved out of the file, or the fact made false), which changes the answer. A finding in the
default output rests on such facts; what rests on a guess is a hint (tests/test_hints.py)."""

import libcst as cst
import pytest

import gradfix
from gradfix.codemods.analysis import FileAnalysis

HEADER = """\
import torch
import torch.nn as nn
"""


def found(source, **options):
    return [(f.code, f.hint, f.fix and f.fix.value) for f in gradfix.check(HEADER + source, hints=True, **options).findings]


CARRIED_THROUGH_A_HELPER = """\
{helper}
cell = nn.RNNCell(3, 4)
optimizer = torch.optim.SGD(cell.parameters(), lr=0.1)
state = torch.zeros(2, 4)
for step in range(3):
    state = cell(torch.randn(2, 3), refresh(state))
    loss = state.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_helper_of_the_file_that_detaches_what_it_is_given_passes_no_graph_on():
    detaching = CARRIED_THROUGH_A_HELPER.format(helper="def refresh(h):\n    return h.detach() * 1.0\n")
    keeping = CARRIED_THROUGH_A_HELPER.format(helper="def refresh(h):\n    return h * 1.0\n")
    unread = CARRIED_THROUGH_A_HELPER.format(helper="from rnn_utils import refresh\n")
    assert found(detaching) == []
    assert [(code, hint) for code, hint, _ in found(keeping)] == [("GF004", False)]
    assert [(code, hint) for code, hint, _ in found(unread)] == [("GF004", True)]


PRIOR = """\
import sys
with_prior = "--prior" in sys.argv
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    if {first}:
        prior_loss = model(torch.randn(4, 3)).abs().mean()
    if {second}:
        loss = loss + prior_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_value_assigned_and_read_under_the_same_flag_is_this_iterations():
    assert found(PRIOR.format(first="with_prior", second="with_prior")) == []
    assert found(PRIOR.format(first="with_prior", second="with_prior and step > 0")) == []  # (implies the flag)
    # Under a test that changes between iterations, the branch that assigns is not reached every
    # time: the previous iteration's value is read on the others.
    nested = PRIOR.replace("    if {first}:\n        prior_loss", "    if step % 2 == 0:\n      if {first}:\n        prior_loss")
    assert [code for code, *_ in found(nested.format(first="with_prior", second="with_prior"))] in (["GF004"], ["GF010"])
    # Assigned under a test that changes between iterations, the previous iteration's value (its
    # graph freed) is read on the others: reported.
    assert [code for code, *_ in found(PRIOR.format(first="step % 2 == 0", second="with_prior"))] in (["GF004"], ["GF010"])


def test_a_graph_built_before_the_loop_by_unread_code_is_a_hint_and_so_is_what_follows():
    source = """\
from transforms import create_transform
encoder = nn.Linear(3, 3)
optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
transform = create_transform(model=encoder)
for step in range(3):
    loss = (encoder(torch.randn(4, 3)) * transform).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    assert {hint for _, hint, _ in found(source)} == {True}
    read = source.replace("from transforms import create_transform\n", "def create_transform(model):\n    return model(torch.ones(1, 3))\n")
    assert ("GF003", False) in [(code, hint) for code, hint, _ in found(read)]


def test_modules_in_a_plain_list_and_losses_in_a_dict_are_what_they_hold():
    source = """\
trunk = nn.Linear(4, 6)
heads = [nn.Linear(6, 1) for _ in range(2)]
optimizer = torch.optim.SGD([*trunk.parameters(), *heads[0].parameters(), *heads[1].parameters()], lr=0.1)
for step in range(2):
    features = torch.relu(trunk(torch.randn(5, 4)))
    losses = {}
    losses["a"] = heads[0](features).mean()
    losses["b"] = heads[1](features).pow(2).mean()
    optimizer.zero_grad()
    losses["a"].backward()
    losses["b"].backward()
    optimizer.step()
"""
    assert found(source) == [("GF002", False, "safe")]
    # Heads a function gradfix did not read made: calling one may build anything.
    unread = source.replace("heads = [nn.Linear(6, 1) for _ in range(2)]", "from nets import make_heads\nheads = make_heads(2)")
    assert [(code, hint) for code, hint, _ in found(unread)] == [("GF002", True)]


def test_a_deepspeed_engine_runs_the_forward_of_the_model_it_wraps():
    source = """\
import deepspeed


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 6)
        self.a, self.b = nn.Linear(6, 3), nn.Linear(6, 4)

    def forward(self, x):
        h = self.trunk(x)
        return self.a(h), self.b(h)


model = TwoHeads()
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config={})
for step in range(2):
    logits, reconstruction = engine(torch.randn(4, 4))
    engine.backward(logits.mean())
    engine.backward(reconstruction.mean())
    engine.step()
"""
    assert [(code, hint) for code, hint, _ in found(source)] == [("GF002", False)]


def test_a_staticmethod_called_on_self_passes_its_first_argument_first():
    source = """\
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("centre", torch.zeros(2))

    @staticmethod
    def mean_of(features, weights):
        return (features * weights).mean(0)

    def forward(self, x):
        features = self.fc(x)
        centre = 0.9 * self.centre + 0.1 * self.mean_of(features, torch.ones(1))
        self.centre = centre
        return (features - centre).pow(2).mean()


model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 3))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    assert [(code, hint) for code, hint, _ in found(source)] == [("GF004", False)]
    detached = source.replace("self.mean_of(features, torch.ones(1))", "self.mean_of(features.detach(), torch.ones(1))")
    assert found(detached) == []


def test_an_unread_call_handed_an_attribute_that_holds_a_graph_leaves_the_fix_unproved():
    source = """\
import unread_helpers
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


class Output:
    def __init__(self, loss):
        self.loss = loss


for step in range(2):
    out = Output(model(torch.randn(5, 4)).pow(2).mean())
    out.loss.backward()
    {between}
    out.loss.backward()
    optimizer.step()
"""
    assert found(source.format(between="print(step)")) == [("GF001", False, "safe")]
    assert found(source.format(between="unread_helpers.inspect(out.loss)")) == [("GF001", False, "unsafe")]


EMBEDDINGS = """\
import sys
custom_prompts = "--custom" in sys.argv
encoder, model = nn.Linear(3, 3), nn.Linear(3, 1)
optimizer = torch.optim.SGD([*encoder.parameters(), *model.parameters()], lr=0.1)
with torch.no_grad():
    embeddings = encoder(torch.randn(4, 3))
for step in range(3):
    if {test}:
        embeddings = encoder(torch.randn(4, 3))
    loss = model(embeddings).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_value_assigned_under_a_test_that_answers_the_same_every_iteration_is_never_the_previous_ones():
    # True: every iteration assigns it before the read; false: none does, and the read is the
    # value built before the loop (diffusers' DreamBooth prompt embeddings).
    assert found(EMBEDDINGS.format(test="custom_prompts")) == []
    assert [code for code, *_ in found(EMBEDDINGS.format(test="step % 2 == 0"))] in (["GF004"], ["GF010"])


def test_a_module_known_only_by_its_use_runs_a_forward_gradfix_did_not_read():
    template = """\
{built}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for t in range(3):
    out = model(torch.randn(4, 3))
    kept = out.mean()
    history.append(kept)
    loss = out.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    built_here = found(template.format(built="model = nn.Linear(3, 1)"))
    unread = found(template.format(built="from registry import build\nmodel = build('critic')"))
    assert [(code, hint) for code, hint, _ in built_here] == [("GF007", False)]
    assert [(code, hint) for code, hint, _ in unread] == [("GF007", True)]


# Rebuilt from rtqichen/torchdiffeq examples/latent_ode.py: the encoder's output is bound by an inner
# loop over the time steps, in every iteration, before the loss reads it.
INNER_LOOP_OUTPUT = """\
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = nn.Linear(2 + 5, 5)
        self.out = nn.Linear(5, 8)

    def forward(self, x, h):
        h = torch.tanh(self.step(torch.cat((x, h), dim=1)))
        return self.out(h), h


encoder, decoder = Encoder(), nn.Linear(4, 2)
optimizer = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=1e-2)
trajectories = torch.randn(3, 6, 2)
{before}for iteration in range(5):
    optimizer.zero_grad()
    h = torch.zeros(3, 5)
    for t in {steps}:
        out, h = encoder(trajectories[:, t, :], h)
    loss = (decoder(out[:, :4] + out[:, 4:]) - trajectories[:, 0]).pow(2).mean()
    loss.backward()
    optimizer.step()
"""


def test_what_an_inner_loop_assigns_is_this_iterations_when_it_runs_as_often_every_iteration():
    """A fresh range of bounds the outer loop does not change runs in every iteration or in none:
    ``out`` is never the previous iteration's. Over a sequence that may be used up (an iterator
    made once, before the loop) the previous ``out`` reaches the backward only if the inner loop
    runs no time: a guess, so a hint."""
    for steps in ("reversed(range(trajectories.size(1)))", "range(6)", "[0, 1, 2]", "range(len(trajectories[0]))"):
        assert found(INNER_LOOP_OUTPUT.format(before="", steps=steps)) == [], steps
    used_up = INNER_LOOP_OUTPUT.format(before="times = iter(range(6))\n", steps="times")
    assert [(code, hint) for code, hint, _ in found(used_up)] == [("GF004", True)]
    rebound = INNER_LOOP_OUTPUT.format(before="", steps="range(3 - iteration)")  # none from the fourth iteration on
    assert [(code, hint) for code, hint, _ in found(rebound)] == [("GF004", True)]


# https://github.com/WeiChengTseng/Pytorch-PCGrad/blob/e987ac603fa1accd386820a985a6dc2fd92dec5b/pcgrad.py
# (PCGrad's _pack_grad: each task's loss of one forward backwarded in turn from the kept graph)
TASK_GRADIENTS = """\
class Collector:
    def __init__(self, optimizer):
        self._optim = optimizer

    def pack(self, objectives):
        grads = []
        for objective in objectives:
            self._optim.zero_grad(set_to_none=True)
            objective.backward(retain_graph=True)
            grads.append([p.grad.clone() for group in self._optim.param_groups for p in group["params"]])
            {in_the_loop}
        return grads


net = nn.Linear(3, 4)
x, y = torch.randn(2, 3), torch.randn(2, 4)
prediction = net(x)
collector = Collector(torch.optim.Adam(net.parameters()))
collector.pack([nn.L1Loss()(prediction, y), nn.MSELoss()(prediction, y)])
"""


def test_a_kept_graph_backwarded_in_a_loop_is_a_bug_only_where_the_loop_must_change_the_parameters():
    # The forward before the loop is stale only if an iteration changes the parameters; with the
    # graph kept, the program runs either way. Not knowing whether it does is a guess.
    unknown = TASK_GRADIENTS.format(in_the_loop="pass")
    stepping = TASK_GRADIENTS.format(in_the_loop="self._optim.step()").replace(
        "self._optim = optimizer", "self._optim = torch.optim.Adam(net.parameters())"
    )
    assert [(code, hint) for code, hint, _ in found(unknown)] == [("GF003", True)]
    assert [(code, hint) for code, hint, _ in found(stepping)] == [("GF003", False)]
    # Handed in, what ``self._optim`` is gradfix does not know: its step() may be a scheduler's.
    handed_in = TASK_GRADIENTS.format(in_the_loop="self._optim.step()")
    assert [(code, hint) for code, hint, _ in found(handed_in)] == [("GF003", True)]


# https://github.com/karpathy/pytorch-normalizing-flows/blob/b60e119b37be10ce2930ef9fa17e58686aaf2b3d/nflib1.ipynb
# (a flow's inverse is its method `backward(z)`, of a module class another file defines)
INVERSE_FLOW = """\
from flows import {imported}
model = {built}
{use}
xy = torch.randn(8, 2)
zs = model.backward(xy)
for k in range(3):
    loss = torch.randn(8, 2, requires_grad=True).pow(2).sum()
    loss.backward()
    zs = model.backward(xy)
"""


def test_the_backward_method_of_an_object_that_is_no_tensor_is_not_proved_autograds():
    # `model.parameters()` handed to an optimizer and `model(x)` make `model` a module: no tensor,
    # so `model.backward(xy)` is its own method. Not known as an object, it is the tensor backwarded.
    module = INVERSE_FLOW.format(
        imported="Flow", built="Flow()", use="optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)\nout = model(torch.randn(8, 2))"
    )
    unknown = INVERSE_FLOW.format(imported="sample", built="sample()", use="")
    tensor = INVERSE_FLOW.format(imported="sample", built="torch.randn(8, 2, requires_grad=True).exp()", use="")
    assert [(code, hint) for code, hint, _ in found(module) if not hint] == []
    assert ("GF001", True) in [(code, hint) for code, hint, _ in found(unknown)]  # (no graph seen in it: a hint)
    assert ("GF001", False) in [(code, hint) for code, hint, _ in found(tensor)]


# https://github.com/dataflowr/notebooks/blob/043dff0f792a5ae67005ba147f7b9dd5fc66e2a1/Module12/GPT_hist_sol.ipynb
# (labels made once by a model, cast to integers, then trained on every step)
LABELS_FROM_A_MODEL = """\
teacher, student = nn.Linear(4, 1), nn.Linear(4, 5)
optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
inputs = torch.randn(8, 4)
labels = teacher(inputs).squeeze(1).abs().round().clamp(max=4).{cast}
for step in range(3):
    loss = nn.functional.{loss}(student(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_cast_to_an_integer_type_keeps_no_graph():
    # An integer tensor cannot require grad: `.to(torch.long)` and `.type(torch.LongTensor)` end
    # the graph as `.long()` does. A cast to a float type keeps it.
    for cast in ("long()", "type(torch.LongTensor)", "to(torch.int64)", "to(dtype=torch.long)"):
        assert found(LABELS_FROM_A_MODEL.format(cast=cast, loss="cross_entropy")) == [], cast
    kept = found(LABELS_FROM_A_MODEL.format(cast="type(torch.FloatTensor)", loss="l1_loss").replace("nn.Linear(4, 5)", "nn.Linear(4, 1)"))
    assert [code for code, _, _ in kept] == ["GF006"]  # (nothing trains the teacher: a constant of training)


# https://github.com/jayroxis/PINNs/blob/fcc37d2fb2c920eebddd29ea141bf9b3caba4d92/Burgers%20Equation/Burgers%20Identification%20(PyTorch).ipynb
# (collocation points made once with requires_grad=True and cast; derivatives by autograd.grad)
COLLOCATION_POINTS = """\
points = torch.rand(64, 2, dtype=torch.float64)
net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
lift = nn.Linear(1, 1)
optimizer = torch.optim.Adam([*net.parameters(), *lift.parameters()])
x = {x}
t = points[:, 1:].clone().requires_grad_().float()
for step in range(3):
    u = net(torch.cat([x, t], 1))
    u_x = torch.autograd.grad(u, x, torch.ones_like(u), retain_graph=True, create_graph=True)[0]
    loss = (u_x - u).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _runs(program):
    try:
        exec(HEADER + program, {})
    except RuntimeError as error:
        assert "backward through the graph a second time" in str(error)
        return False
    return True


def test_walking_a_freed_graph_again_is_a_bug_only_where_it_saved_a_tensor_and_a_stale_one_only_where_it_reads_what_trains():
    # A cast of a leaf saves nothing: every step walks it again and runs, and recomputed it would
    # be the same. An `exp` saves its result (the second step raises); a layer the optimizer trains
    # makes the points stale (and saves its input).
    cast = COLLOCATION_POINTS.format(x="points[:, :1].clone().requires_grad_().float()")
    saving = COLLOCATION_POINTS.format(x="points[:, :1].clone().requires_grad_().float().exp()")
    trained = COLLOCATION_POINTS.format(x="lift(points[:, :1].clone().requires_grad_().float())")
    assert _runs(cast) and not _runs(saving) and not _runs(trained)
    assert [code for code, hint, _ in found(cast) if not hint] == []
    assert [code for code, hint, _ in found(saving) if not hint] == ["GF010"]
    assert [code for code, hint, _ in found(trained) if not hint] == ["GF003", "GF010"]


# (a loss backwarded twice; what the second backward walks decides whether it raises)
BACKWARDED_TWICE = """\
weight = torch.ones(3, requires_grad=True)
loss = ({operation}).sum()
loss.backward()
loss.backward()
"""


def test_a_second_backward_is_removed_safely_only_where_the_first_certainly_freed_a_saved_tensor():
    # ``torch.roll`` saves no tensor, which gradfix cannot tell (it is no row of the table): the
    # second backward may raise, and removing it may change the maths. A cast, a sum, a view, a
    # repeat, a flip or a narrow certainly saves none: the second backward runs and adds the
    # gradient again, which a lesson on accumulation means (pytorch-book's chapter 2): a hint. A
    # product saves its operand: the second backward raises, and removing it is what the program meant.
    for operation in ("torch.roll(weight, 1)",):
        program = BACKWARDED_TWICE.format(operation=operation)
        assert _runs(program), operation
        assert found(program) == [("GF001", False, "unsafe")], operation
    for operation in ("weight.float()", "weight.view(3, 1)", "weight + weight", "weight.repeat(2)", "weight.flip(0)", "weight.narrow(0, 0, 2)"):
        program = BACKWARDED_TWICE.format(operation=operation)
        assert _runs(program), operation
        assert found(program) == [("GF001", True, None)], operation
    for operation in ("weight * 2", "weight.exp()", "weight / 3"):
        program = BACKWARDED_TWICE.format(operation=operation)
        assert not _runs(program), operation
        assert [(code, fix) for code, hint, fix in found(program) if not hint] == [("GF001", "safe")], operation


# https://github.com/labmlai/annotated_deep_learning_paper_implementations/blob/e6b3c8a6a2cdae4071bcde1abeaaf9a2bc37bd53/labml_nn/gan/stylegan/__init__.py
# (a path-length penalty's running mean and step count, parameters that require no grad)
RUNNING_STATE = """\
class PathLengthPenalty(nn.Module):
    def __init__(self, beta):
        super().__init__()
        self.beta = beta
        self.steps = nn.Parameter(torch.tensor(0.0){frozen})

    def forward(self, x):
        norm = x.pow(2).sum(1).sqrt()
        loss = (norm - self.steps).pow(2).mean()
        self.steps.add_(1.0)
        return loss


generator = nn.Linear(4, 3)
penalty = PathLengthPenalty(0.99)
optimizer = torch.optim.SGD(generator.parameters(), lr=0.01)
for step in range(3):
    loss = penalty(generator(torch.randn(5, 4)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_parameter_made_not_to_require_grad_is_a_constant_of_the_modules_state():
    frozen = RUNNING_STATE.format(frozen=", requires_grad=False")
    assert _runs(frozen) and found(frozen) == []
    assert "GF004" in [code for code, _, _ in found(RUNNING_STATE.format(frozen=""))]


# https://github.com/descriptinc/descript-audio-codec/blob/c7cfc5d2647e26471dc394f95846a0830e7bec34/scripts/train_no_adv.py
# (the optimizer class named once at the module's top, built in a loader and kept in a state object)
STATE_OBJECT = """\
{optimizer_class}


class State:
    def __init__(self, generator, optimizer, criterion):
        self.generator = generator
        self.optimizer = optimizer
        self.criterion = criterion


def load():
    generator = nn.Linear(4, 4)
    return State(generator, AdamW(generator.parameters()), nn.L1Loss())


def train_loop(state, batch):
    output = {{}}
    output["loss"] = state.criterion(state.generator(batch), batch)
    state.optimizer.zero_grad()
    output["loss"].backward()
    state.optimizer.step()
    return output


state = load()
for step in range(3):
    train_loop(state, torch.randn(2, 4))
"""


def test_a_name_bound_once_to_torchs_class_is_torchs_and_an_object_holding_unread_code_holds_a_guess():
    aliased = STATE_OBJECT.format(optimizer_class="AdamW = torch.optim.AdamW")
    assert _runs(aliased) and found(aliased) == []
    # Another package's optimizer, handed the parameters, may hold a graph: what it reaches
    # through the state object is a guess, and what rests on it a hint.
    unread = STATE_OBJECT.format(optimizer_class="from optimizers import AdamW")
    assert [code for code, hint, _ in found(unread) if not hint] == []
    rebound = STATE_OBJECT.format(optimizer_class="AdamW = torch.optim.AdamW\nAdamW = make_optimizer()")
    assert [code for code, hint, _ in found(rebound) if not hint] == []


# https://github.com/yandex-research/tab-ddpm/blob/b476257dd460b778ba09eb97f7a51d6490fa17f8/CTAB-GAN-Plus/model/synthesizer/ctabgan_synthesizer.py
# (a gradient penalty whose helper makes the interpolated input a fresh leaf)
PENALTY_HELPER = """\
def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.shape[0], 1)
    interpolates = alpha * real + (1 - alpha) * fake
    {fresh}
    scores = critic(interpolates)
    gradients = torch.autograd.grad(scores, interpolates, torch.ones_like(scores), create_graph=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


generator, critic = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = torch.optim.Adam(critic.parameters())
for step in range(3):
    real = torch.randn(8, 4)
    fake = torch.tanh(generator(torch.randn(8, 4)))
    optimizer.zero_grad()
    critic_fake = critic(fake).mean()
    critic_fake.backward()
    penalty = gradient_penalty(critic, real, fake)
    penalty.backward()
    optimizer.step()
"""


def test_an_argument_the_helper_never_carries_to_its_return_is_not_in_the_result():
    fresh = PENALTY_HELPER.format(fresh="interpolates = torch.autograd.Variable(interpolates, requires_grad=True)")
    assert _runs(fresh) and found(fresh) == []
    kept = PENALTY_HELPER.format(fresh="interpolates.requires_grad_(True)")
    assert not _runs(kept)
    assert [code for code, hint, _ in found(kept) if not hint] == ["GF005"]  # (the critic's step on the generator's graph)


# https://github.com/DeepLearningDTU/02456-deep-learning-with-PyTorch/blob/9f4f39095387a36c51e110d24d5ac4f9d2f7b6ef/2_Feedforward_Python/2.1-EXE-FNN-AutoDif-Nanograd.ipynb
# (a course's own autodiff class, whose backward is run twice to show gradients accumulate)
OWN_AUTODIFF = """\
class Var:
    def __init__(self, value, grad_fn=lambda: []):
        self.value, self.grad_fn, self.grad = value, grad_fn, 0.0

    def backprop(self, bp):
        self.grad += bp
        for node, grad in self.grad_fn():
            node.backprop(grad * bp)

    def backward(self):
        self.backprop(1.0)

    def __add__(self, other):
        return Var(self.value + other.value, lambda: [(self, 1.0), (other, 1.0)])

    def __mul__(self, other):
        return Var(self.value * other.value, lambda: [(self, other.value), (other, self.value)])


a, b = {a}, {b}
f = a * b + a
f.backward()
f.backward()
"""


def test_a_value_with_no_graph_gradfix_sees_backwarded_twice_is_a_hint():
    own = OWN_AUTODIFF.format(a="Var(3.0)", b="Var(5.0)")
    assert _runs(own) and [(code, hint) for code, hint, _ in found(own)] == [("GF001", True)]
    tensors = OWN_AUTODIFF.format(a="torch.ones(2, requires_grad=True)", b="torch.full((2,), 5.0)").replace("f = a * b + a", "f = (a * b + a).sum()")
    assert not _runs(tensors) and [(code, hint) for code, hint, _ in found(tensors)] == [("GF001", False)]


# https://github.com/JiaxuanYou/graph-generation/blob/3444b8ad2fd7ecb6ade45086b4c75f8e2e9f29d1/model.py
# (a GRU keeping its hidden state on self; the training loops, in train.py, set it afresh per batch)
HIDDEN_ON_SELF = """\
from torch.autograd import Variable
from torch.nn.utils.rnn import pad_packed_sequence


class Recurrent(nn.Module):
    def __init__(self, size, has_input=True):
        super().__init__()
        self.has_input = has_input
        if has_input:
            self.embed = nn.Linear(size, size)
        self.rnn = nn.GRU(size, 4, batch_first=True)
        self.hidden = None
        for name, param in self.rnn.named_parameters():
            nn.init.constant_(param, 0.25)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.weight.data = nn.init.xavier_uniform_(module.weight.data)

    def init_hidden(self, batch_size):
        return Variable(torch.zeros(1, batch_size, 4))

    def forward(self, x, packed=False):
        if self.has_input:
            x = torch.relu(self.embed(x))
        output, self.hidden = self.rnn(x, self.hidden)
        if packed:
            output = pad_packed_sequence(output, batch_first=True)[0]
        return output
{training}"""
TRAINING = """
model = Recurrent(3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(2, 5, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_state_a_module_keeps_on_self_is_carried_for_certain_only_where_the_file_runs_the_steps():
    # The module alone: its callers are in another file and may set `model.hidden` afresh per batch.
    assert [(code, hint) for code, hint, _ in found(HIDDEN_ON_SELF.format(training=""))] == [("GF004", True)]
    trained_here = HIDDEN_ON_SELF.format(training=TRAINING)
    assert not _runs(trained_here) and [(code, hint) for code, hint, _ in found(trained_here)] == [("GF004", False)]


# pytorch-beginner's Jacobian (https://github.com/L1aoXingyu/pytorch-beginner, 11-backward): torch 0.3
# spelled retain_graph `retain_variables`; torch 2 raises TypeError on it.
JACOBIAN_ROWS = """\
x = torch.tensor([[2.0, 1.0]], requires_grad=True)
z = torch.mm(x, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
z.backward(torch.tensor([[1.0, 0.0]]), {keyword}=True)
first_row = x.grad.clone()
x.grad.zero_()
z.backward(torch.tensor([[0.0, 1.0]]))
"""


def test_a_keyword_tensor_backward_does_not_take_leaves_what_the_call_keeps_unknown():
    # `retain_variables` is no keyword of Tensor.backward: whether the first call keeps the graph
    # (torch 0.3), raises (torch 2) or is some object's method, gradfix cannot say: no finding
    # rests on it, and no second backward is removed.
    assert [(code, hint) for code, hint, _ in found(JACOBIAN_ROWS.format(keyword="retain_variables"))] == [("GF001", True)]
    assert found(JACOBIAN_ROWS.format(keyword="retain_graph")) == []
    assert [(code, hint) for code, hint, _ in found(JACOBIAN_ROWS.format(keyword="create_graph"))] == []


# A GAN written with explicit `.forward` calls (GunhoChoi/PyTorch-FastCampus's GAN notebooks,
# https://github.com/GunhoChoi/PyTorch-FastCampus): one prediction on the fake serves both steps.
FORWARD_CALLED_GAN = """\
generator = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
discriminator = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
gen_optim = torch.optim.Adam(generator.parameters(), lr=1e-3)
dis_optim = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
loss_func = nn.MSELoss()
ones, zeros = torch.ones(5, 1), torch.zeros(5, 1)
for step in range(3):
    gen_optim.zero_grad()
    gen_fake = {generate}(torch.randn(5, 4))
    dis_fake = {judge}(gen_fake)
    gen_loss = loss_func(dis_fake, ones)
    gen_loss.backward()
    gen_optim.step()
    dis_optim.zero_grad()
    dis_loss = loss_func(dis_fake, zeros) + loss_func({judge}(torch.randn(5, 3)), ones)
    dis_loss.backward()
    dis_optim.step()
"""


def test_a_gans_discriminator_is_a_module_its_step_trains_and_forward_is_its_call():
    # `discriminator.forward(x)` runs the discriminator as `discriminator(x)` does: its prediction
    # is shared by both steps, which no detach of the fake mends (a finding, no fix). Before,
    # gradfix took `loss_func` (no parameter, trained by no one) for the discriminator and
    # `dis_fake`, the discriminator's own prediction, for the generator's output, and detached it
    # "safely": the discriminator never learnt from fakes.
    for judge in ("discriminator", "discriminator.forward"):
        for generate in ("generator", "generator.forward"):
            findings = found(FORWARD_CALLED_GAN.format(judge=judge, generate=generate))
            assert [(code, hint, fix) for code, hint, fix in findings if code == "GF005"] == [("GF005", False, None)], (judge, generate)


GAN_OF_A_HELPER = """\
{imports}
generator = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
discriminator = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
def make_fake(z):
{body}
gen_optim = torch.optim.Adam(generator.parameters(), lr=1e-3)
dis_optim = torch.optim.Adam({trained}, lr=1e-3)
bce = nn.BCEWithLogitsLoss()
ones, zeros = torch.ones(5, 1), torch.zeros(5, 1)
for step in range(3):
    fake = make_fake(torch.randn(5, 4))
    dis_optim.zero_grad()
    dis_loss = bce(discriminator(torch.randn(5, 3)), ones) + bce(discriminator(fake), zeros)
    dis_loss.backward()
    dis_optim.step()
    gen_optim.zero_grad()
    gen_loss = bce(discriminator(fake), ones)
    gen_loss.backward()
    gen_optim.step()
"""


def test_the_fake_is_detached_safely_only_where_nothing_the_discriminators_optimizer_trains_built_it():
    def gf005(imports="", body="    return generator(z)", trained="discriminator.parameters()"):
        source = GAN_OF_A_HELPER.format(imports=imports, body=body, trained=trained)
        return [(code, hint, fix) for code, hint, fix in found(source) if code == "GF005"]

    assert gf005() == [("GF005", False, "safe")]
    # A fake refined by the discriminator: detached, the discriminator's own gradient through it
    # is lost too (run, its gradient fell from 3.07 to 1.09, and the step still raised).
    assert gf005(body="    fake = generator(z)\n    return fake - 0.1 * discriminator(fake)") == [("GF005", False, None)]
    # The discriminator's optimizer given parameters gradfix cannot name: what it trains is unknown.
    assert gf005(imports="from gan_setup import dis_params", trained="dis_params") == [("GF005", False, None)]


# alpaca_farm's RLHF trainers (https://github.com/tatsu-lab/alpaca_farm, rl/quark_trainer.py), reduced:
# the accelerator is a parameter, the loss comes out of an imported function.
ACCUMULATING_STEP = """\
from mylib import compute_loss


def run(accelerator, policy, optimizer, loader):
    for epoch in range(3):
        for batch in loader:
            with accelerator.accumulate(policy):
                loss = compute_loss(batch)
                accelerator.backward(loss)
                {receiver}.clip_grad_norm_(policy.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
"""


def test_an_in_place_method_carries_a_graph_into_its_receiver_for_certain_only_where_that_is_a_tensor():
    # `accelerator.clip_grad_norm_(...)`: a method with a trailing underscore of an object gradfix
    # does not know is no tensor's in-place operation for certain.
    assert [(code, hint) for code, hint, _ in found(ACCUMULATING_STEP.format(receiver="accelerator"))] == [("GF004", True)]
    assert found(ACCUMULATING_STEP.format(receiver="torch.nn.utils")) == []
    # A tensor's in-place addition does write the graph into it, carried to the next backward.
    on_a_tensor = """\
layer = nn.Linear(3, 4)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
state = torch.zeros(2, 4)
for step in range(3):
    state.add_(layer(torch.randn(2, 3)))
    loss = state.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    assert found(on_a_tensor) == [("GF004", False, "safe")]


# MOSS-RLHF's PPO step (https://github.com/OpenLMLab/MOSS-RLHF, ppo/ppo_trainer.py), reduced: the
# criterion returns the PPO loss and a pretraining loss from a forward of its own.
TWO_LOSSES_OF_A_CRITERION = """\
policy = nn.Linear(4, 3)
optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
def criterion(logits, context):
    ppo_loss = logits.log_softmax(-1).mean()
    pretrain_loss = {second}
    return ppo_loss, pretrain_loss
for step in range(3):
    optimizer.zero_grad()
    logits = policy(torch.randn(2, 4))
    losses = criterion(logits, torch.randn(2, 4))
    losses[0].backward()
    losses[1].backward()
    optimizer.step()
"""


def test_losses_share_a_graph_for_certain_only_where_gradfix_tells_the_items_of_their_tuple_apart():
    # Items of a tuple are told apart by nothing gradfix reads: the pretraining loss may (and here
    # does) come from a forward of its own, and the two backwards then run.
    own_forward = found(TWO_LOSSES_OF_A_CRITERION.format(second="policy(context).pow(2).mean()"))
    assert [(code, hint) for code, hint, _ in own_forward] == [("GF002", True)]
    # Computed in the loop itself, two losses of one forward share its graph for certain.
    told_apart = TWO_LOSSES_OF_A_CRITERION.format(second="logits.pow(2).mean()")
    for old, new in (
        ("losses = criterion(logits, torch.randn(2, 4))", "ppo_loss, pretrain_loss = logits.log_softmax(-1).mean(), logits.pow(2).mean()"),
        ("losses[0].backward()", "ppo_loss.backward()"),
        ("losses[1].backward()", "pretrain_loss.backward()"),
    ):
        told_apart = told_apart.replace(old, new)
    assert found(told_apart) == [("GF002", False, "safe")]


# alpaca_farm's Quark trainer (https://github.com/tatsu-lab/alpaca_farm, rl/quark_trainer.py), reduced:
# the loss function returns the loss and a dict of statistics, which the loop keeps.
STATISTICS_KEPT = """\
policy = nn.Linear(3, 1)
optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
def compute_loss(batch):
    loss = policy(batch).pow(2).mean()
    return loss, {statistics}
stats_list = []
for step in range(3):
    loss, stats = compute_loss(torch.randn(4, 3))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    stats_list.append(stats)
"""


def test_what_is_kept_is_detached_only_where_it_is_one_tensor():
    # A dict of losses kept every step keeps their graphs, but `stats.detach()` would raise
    # AttributeError: reported, not rewritten.
    assert found(STATISTICS_KEPT.format(statistics='{"loss": loss}')) == [("GF007", False, None)]
    assert found(STATISTICS_KEPT.format(statistics='{"loss": loss.detach()}')) == []
    assert found(STATISTICS_KEPT.format(statistics="loss * 1.0")) == [("GF007", False, "safe")]


SPECTRUM_LOSSES = """\
layer = nn.Linear(4, 4)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(3):
    features = layer(torch.randn(6, 4))
    first, second = {decomposition}(features.t() @ features)
    loss_a = first.pow(2).mean()
    loss_b = second.pow(2).mean()
    optimizer.zero_grad()
    loss_a.backward()
    loss_b.backward()
    optimizer.step()
"""


def test_every_output_of_an_eigendecomposition_holds_the_graph_of_what_it_is_given():
    # torch.linalg.eigh's eigenvalues and eigenvectors both hold the graph of `features`: the two
    # losses share it for certain. Out of a function gradfix does not know, the items are a guess.
    assert found(SPECTRUM_LOSSES.format(decomposition="torch.linalg.eigh")) == [("GF002", False, "safe")]
    unknown = "from spectral import decompose\n" + SPECTRUM_LOSSES.format(decomposition="decompose")
    assert [(code, hint) for code, hint, _ in found(unknown)] == [("GF002", True)]


# Reduced from programs of an outside generator (this session's H48): the error a fix ends is one the
# program catches, and a closure backwards what the fix frees.
CAUGHT_SECOND_BACKWARD = """\
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(4, 4), torch.randn(4, 1)
fails = 0
for step in range(2):
    optimizer.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    try:
        loss.backward()
    except {caught}:
        fails += 1
    optimizer.step()
print(fails)
"""


def test_a_fix_that_ends_an_error_is_safe_only_where_the_program_catches_no_such_error():
    # Caught, the second backward's error is part of what the program does (it counts it): removing
    # the call changes `fails`. A handler of an error torch does not raise there proves nothing is caught.
    for caught in ("RuntimeError", "Exception", "(ValueError, RuntimeError)"):
        assert found(CAUGHT_SECOND_BACKWARD.format(caught=caught)) == [("GF001", False, "unsafe")], caught
    assert found(CAUGHT_SECOND_BACKWARD.format(caught="KeyError")) == [("GF001", False, "safe")]


RETAINED_FOR_A_CLOSURE = """\
def main():
    model = nn.Linear(4, 1)
    x, y = torch.randn(4, 4), torch.randn(4, 1)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward(retain_graph=True)

    def again():
        {body}

    again()


main()
"""


def test_a_nested_function_reading_its_enclosing_names_leaves_a_hidden_backward_unknown():
    # `again` backwards the enclosing `loss` when it is called: the retained graph is needed.
    closure = found(RETAINED_FOR_A_CLOSURE.format(body="loss.backward()"))
    assert [(code, fix) for code, _, fix in closure if code == "GF009"] in ([], [("GF009", "unsafe")])
    unrelated = found(RETAINED_FOR_A_CLOSURE.format(body="print('done')"))
    assert [(code, fix) for code, _, fix in unrelated if code == "GF009"] == [("GF009", "safe")]


# A program of tests/test_fuzz_safe_fixes.py (a recurrent cell backwarded in the loop and once more
# after it): the optimizer's parameters, a list of both modules', are named by no module.
STEPPED_BY_AN_OPTIMIZER_OF_UNNAMED_PARAMETERS = """\
inputs, targets = torch.randn(2, 2, 4), torch.randn(2, 2, 1)
cell = nn.GRUCell(4, 6)
head = nn.Linear(6, 1)
criterion = nn.SmoothL1Loss()
parameters = [*cell.parameters(), *head.parameters()]
optimizer = torch.optim.SGD(parameters, lr=0.05)
hidden = torch.zeros(2, 6)
for step in range(2):
    optimizer.zero_grad()
    hidden = cell(inputs[step], hidden)
    loss = criterion(head(hidden), targets[step])
    torch.autograd.backward(loss)
    optimizer.step()
loss.backward()
optimizer.step()
"""


def test_an_optimizer_stepped_after_a_backward_whose_modules_are_unnamed_leaves_the_gans_roles_unknown():
    result = gradfix.check(HEADER + STEPPED_BY_AN_OPTIMIZER_OF_UNNAMED_PARAMETERS, hints=True)
    assert result.errors == ()  # (the analysis raised TypeError: which module the optimizer trains was None)
    assert "GF005" not in [finding.code for finding in result.findings]


GAN_OF_A_TRAINER = """\
class Trainer:
    def __init__(self):
        self.G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.D = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
        self.opt_g = torch.optim.Adam(self.G.parameters(), lr=1e-3)
        self.opt_d = torch.optim.Adam(self.D.parameters(), lr=1e-3)
        self.bce = nn.BCEWithLogitsLoss()

    def sample(self, n):
{body}

    def step(self, real):
        fake = self.sample(len(real))
        self.opt_d.zero_grad()
        d_loss = self.bce(self.D(real), torch.ones(len(real), 1)) + self.bce(self.D(fake), torch.zeros(len(real), 1))
        d_loss.backward()
        self.opt_d.step()
        self.opt_g.zero_grad()
        g_loss = self.bce(self.D(fake), torch.ones(len(real), 1))
        g_loss.backward()
        self.opt_g.step()


trainer = Trainer()
for step in range(3):
    trainer.step(torch.randn(5, 3))
"""


def test_a_fake_made_by_a_method_of_the_trainer_is_read_through_that_method():
    def gf005(body):
        return [(code, hint, fix) for code, hint, fix in found(GAN_OF_A_TRAINER.format(body=body)) if code == "GF005"]

    assert gf005("        return self.G(torch.randn(n, 4))") == [("GF005", False, "safe")]
    # The method refines the fake with the discriminator: detaching it would cut D's own gradient.
    refined = "        fake = self.G(torch.randn(n, 4))\n        return fake - 0.1 * self.D(fake)"
    assert gf005(refined) == [("GF005", False, None)]


LIGHTNING_GAN = """\
import pytorch_lightning as pl


class GAN(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.G = nn.Linear(4, 8)
        self.D = nn.Linear(8, 1)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        {unpacked} = self.optimizers()
        fake = self.G(torch.randn(4, 4))
        d_loss = self.D(fake).mean() - self.D(batch).mean()
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        g_loss = -self.D(fake).mean()
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()

    def configure_optimizers(self):
{configure}
"""
G_AND_D = "torch.optim.Adam(self.G.parameters()), torch.optim.Adam(self.D.parameters())"


def test_lightnings_optimizers_are_those_configure_optimizers_returns_in_their_order():
    def gan(configure, unpacked="g_opt, d_opt", extra=""):
        return found(LIGHTNING_GAN.format(configure=configure, unpacked=unpacked) + extra)

    safe = [("GF005", False, "safe")]
    assert gan(f"        return {G_AND_D}") == safe
    assert gan(f"        return [{G_AND_D}], []") == safe  # (the optimizers, then the schedulers)
    by_dicts = '        return {"optimizer": torch.optim.Adam(self.G.parameters())}, {"optimizer": torch.optim.Adam(self.D.parameters())}'
    assert gan(by_dicts) == safe
    named_otherwise = "        first = torch.optim.Adam(self.G.parameters())\n        second = torch.optim.SGD(self.D.parameters(), lr=0.1)\n        return first, second"
    assert gan(named_otherwise) == safe
    reported = [("GF005", False, None)]
    # By position, the optimizer stepped after the discriminator's loss trains the generator: no
    # discriminator's step, and two backwards of one graph.
    assert gan(f"        return {G_AND_D}", unpacked="d_opt, g_opt") == [("GF002", False, None)]
    assert gan("        return self.build_optimizers()") == reported  # (a method gradfix does not follow)
    flipped = "torch.optim.Adam(self.D.parameters()), torch.optim.Adam(self.G.parameters())"
    two_returns = f"        if self.training:\n            return {G_AND_D}\n        return {flipped}"
    assert gan(two_returns) == reported
    assert gan(f"        return {G_AND_D}, torch.optim.Adam(self.G.parameters())") == reported  # (three for two names)
    # One optimizer is handed back itself: ``(d_opt,) = self.optimizers()`` unpacks nothing gradfix knows.
    one = "        return torch.optim.Adam(self.D.parameters())"
    other = "\ng_opt = torch.optim.Adam(nn.Linear(1, 1).parameters())\n"
    assert gan(one, unpacked="d_opt", extra=other) == safe
    assert gan(one, unpacked="(d_opt,)", extra=other) == reported
    overridden = f"\n\nclass FlippedGAN(GAN):\n    def configure_optimizers(self):\n        return {flipped}\n"
    assert gan(f"        return {G_AND_D}", extra=overridden) == reported  # (``self`` may be a FlippedGAN)


RETAINED_FOR_LATER = """\
model = nn.Linear(3, 1)


def train():
    loss = model(torch.randn(4, 3)).pow(2).mean()
    scale = 2.0
    {later}
    loss.backward(retain_graph=True)
    again()
"""


def test_a_graph_that_code_kept_for_later_reads_may_be_backwarded_again():
    def codes(later):
        return [code for code, _, _ in found(RETAINED_FOR_LATER.format(later=later))]

    assert codes("def again():\n        loss.backward()") == []  # (a closure's free variable)
    assert codes("again = lambda: loss.backward()") == []
    assert codes("again = loss.backward") == []
    assert codes("def again():\n        return scale * 2") == ["GF009"]  # (it reads no graph)
    assert codes("again = lambda: scale * 2") == ["GF009"]


KEPT_BESIDE_A_SCALED_LOSS = """\
from apex import amp

model = nn.Linear(3, 1)
optimizer = torch.optim.Adam(model.parameters())
losses = []
scaled = torch.zeros(())
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    optimizer.zero_grad()
    with amp.scale_loss({scaled_from}, optimizer) as scaled:
        scaled.backward()
    optimizer.step()
    losses.append(loss)
"""


def test_what_a_with_statement_binds_is_made_of_its_item_not_of_the_last_iteration():
    # ``scaled`` is made anew from ``loss`` each step: it carries no graph on, so ``losses`` keeps
    # every step's graph.
    assert [(code, hint) for code, hint, _ in found(KEPT_BESIDE_A_SCALED_LOSS.format(scaled_from="loss"))] == [("GF007", False)]
    # Made from its own last value, it holds every step's graph anyway (carried state, GF004).
    assert [code for code, _, _ in found(KEPT_BESIDE_A_SCALED_LOSS.format(scaled_from="loss + 0 * scaled"))] == ["GF004"]


RETAINED_IN_EITHER_BRANCH = """\
use_amp = False
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    optimizer.zero_grad()
    if use_amp:
        scaler.scale(loss).backward(retain_graph=True)
        scaler.step(optimizer)
        scaler.update()
    {between}
    if not use_amp:
        loss.backward(retain_graph=True)
        optimizer.step()
"""


def test_a_backward_under_the_opposite_test_of_a_fixed_flag_never_walks_the_graph_again():
    def lines(between):
        source = HEADER + RETAINED_IN_EITHER_BRANCH.format(between=between)
        return [f.line - HEADER.count("\n") for f in gradfix.check(source, hints=True).findings]

    assert lines("pass") == [9, 14]  # (nothing assigns ``use_amp``: the two tests never both hold)
    # Flipped between the two, both backwards run in one iteration, the second through the first's graph.
    assert lines("use_amp = not use_amp") == [14]


GAN_WITH_A_CRITIC_HEAD = """\
G = nn.Linear(4, 8)
H = nn.Linear(8, 8)
D = nn.Linear(8, 1)
C = nn.Linear(8, 1)
extra = [torch.zeros(1, requires_grad=True)]
opt_g = torch.optim.Adam(list(G.parameters()) + list(H.parameters()))
opt_d = torch.optim.Adam({trained_with_d})
for real in torch.randn(3, 5, 8):
    fake = H(G(torch.randn(5, 4)))
    d_loss = D(fake).mean() - D(real).mean() + C(real).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = -D(fake).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
"""


def test_an_optimizer_given_the_sum_of_parameter_lists_trains_each_of_their_modules():
    def fixes(trained_with_d):
        return [fix for _, _, fix in found(GAN_WITH_A_CRITIC_HEAD.format(trained_with_d=trained_with_d))]

    assert fixes("list(D.parameters()) + list(C.parameters())") == ["safe"]
    assert fixes("list(D.parameters()) + list(H.parameters())") == [None]  # (H builds the fake)
    assert fixes("list(D.parameters()) + extra") == [None]  # (what ``extra`` holds is read elsewhere)


def test_one_graph_backwarded_twice_is_no_gans_two_steps():
    twice = """\
def backward(loss):
    loss.backward()


def detached(h):
    return h.detach()


model = nn.RNNCell(3, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
h = torch.zeros(2, 4)
for i in range(3):
    h = detached(h)
    h = model(torch.randn(2, 3), h)
    loss = h.sum()
    backward(loss)
    loss.backward()
    opt.step()
"""
    assert [code for code, _, _ in found(twice)] == ["GF001"]


STATE_BUILT_IN_A_BRANCH = """\
model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(3, 4), torch.randn(3, 1)
use_encoder_state = True
mem = torch.zeros(1, 4)
for i in range(3):
    opt.zero_grad()
    out = model(x + mem)
{update}
    loss = ((out - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


def test_a_carried_state_is_detached_safely_only_where_one_path_builds_it():
    from_the_loss = "    mem = torch.tanh(out.mean()).expand(1, 4)"
    assert found(STATE_BUILT_IN_A_BRANCH.format(update=from_the_loss)) == [("GF004", False, "safe")]
    # H51's generator: on the path that runs, the state comes from what this step's loss does not
    # read; no backward frees it, the next step trains model[0] through it, and a detach cuts that.
    in_a_branch = f"    if use_encoder_state:\n        mem = torch.tanh(model[0](x)).mean(0, keepdim=True)\n    else:\n    {from_the_loss}"
    assert found(STATE_BUILT_IN_A_BRANCH.format(update=in_a_branch)) == [("GF004", False, "unsafe")]


TEACHER_TARGET = """\
import torch.nn.functional as F

student = nn.Sequential(nn.Linear(4, 6), nn.Sigmoid(), nn.Linear(6, 2))
teacher = nn.Sequential({teacher_first}, nn.Tanh(), nn.Linear(6, 2))
{shared}
opt = torch.optim.SGD(student.parameters(), lr=0.1)
x = torch.randn(4, 4)
target = teacher(x)
for i in range(3):
    opt.zero_grad()
    loss = F.mse_loss(student(x), target)
    loss.backward()
    opt.step()
"""


def test_a_module_that_holds_a_trained_modules_part_may_train():
    def rules(teacher_first="nn.Linear(4, 6)", shared=""):
        return [(code, fix) for code, _, fix in found(TEACHER_TARGET.format(teacher_first=teacher_first, shared=shared))]

    assert rules() == [("GF006", "safe")]  # (a teacher nothing trains: its target is a constant)
    # H51's generator: the teacher holds the student's first layer, which the optimizer trains; a
    # detach of the target would stop that layer's gradient through it.
    assert rules(shared="teacher[0] = student[0]") == [("GF003", "safe")]
    assert rules(teacher_first="student[0]") == [("GF003", "safe")]
    # H80's generator: the student holds the teacher's weight itself (tied weights), so the
    # optimizer of the student trains it; also through a name for the teacher's layer.
    assert rules(shared="student[0].weight = teacher[0].weight") == [("GF003", "safe")]
    assert rules(shared="first = teacher[0]\nstudent[0].weight = first.weight") == [("GF003", "safe")]
    # h83's generator, the other way: the teacher holds the student's weight, so it trains too.
    assert rules(shared="teacher[0].weight = student[0].weight") == [("GF003", "safe")]
    # The variant: a copy of the teacher's weight, which nothing ties back to it.
    assert rules(shared="student[0].weight = nn.Parameter(teacher[0].weight.detach().clone())") == [("GF006", "safe")]


def test_two_backwards_of_one_loss_with_other_gradients_are_no_duplicate_to_drop():
    twice = """\
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    loss.backward({first})
    loss.backward()
    opt.step()
"""
    assert found(twice.format(first="")) == [("GF001", False, "safe")]
    # H51's generator: which of the two was meant (half the gradient, or all of it) is not clear.
    assert found(twice.format(first="torch.tensor(0.5)")) == [("GF001", False, None)]


PENALTY_DEFINED_AFTER_ITS_CALLER = """\
G = nn.Linear(2, 4)
D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(D.parameters(), lr=0.1)


def train():
    for _ in range(2):
        D.zero_grad()
        fake = G(torch.randn(8, 2))
        d_fake = D(fake).mean()
        d_fake.backward()
        p = penalty(fake)
        p.backward()
        opt.step()


def penalty(fake):
    x = {given}
    return D(x).pow(2).mean()


train()
"""


def test_a_call_before_its_functions_definition_reads_what_the_walk_with_its_arguments_returned():
    # (H55's m06: the caller walked before the helper read a table of the round that had no entry
    # for it yet, so a detaching helper's result took its argument's graph: a false safe GF002.)
    assert found(PENALTY_DEFINED_AFTER_ITS_CALLER.format(given="fake.detach()")) == []
    assert [(code, hint) for code, hint, _ in found(PENALTY_DEFINED_AFTER_ITS_CALLER.format(given="fake"))] == [("GF002", False)]


ACCUMULATED_UNDER_A_CONTEXT = """\
from accelerate import Accelerator
import contextlib
accelerator = Accelerator(cpu=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
batches = iter([torch.randn(8, 4) for _ in range(40)])
for step in range(10):
    for micro in range(4):
        batch = next(batches)
        with {context}:
            loss = model(batch).pow(2).mean() / 4
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_with_whose_context_lets_exceptions_through_assigns_on_every_path_past_it():
    # (H55's flat accumulation loop: `loss` is assigned at each first inner pass, under autocast,
    # so the backward never reads the previous iteration's; it ran, and GF004 was reported. The
    # backward after the micro-batch loop trains on its last micro-batch alone: GF008, as where
    # the assignment is in the loop's own body.)
    plain = ACCUMULATED_UNDER_A_CONTEXT.replace("        with {context}:\n            loss", "        loss")
    assert found(plain) == [("GF008", False, "unsafe")]
    assert found(ACCUMULATED_UNDER_A_CONTEXT.format(context="accelerator.autocast()")) == [("GF008", False, "unsafe")]
    assert found(ACCUMULATED_UNDER_A_CONTEXT.format(context="torch.autocast('cpu')")) == [("GF008", False, "unsafe")]
    # A context that may swallow the body's exception leaves `loss` unassigned on that path, and
    # so does a body that may leave before the assignment.
    assert [code for code, _, _ in found(ACCUMULATED_UNDER_A_CONTEXT.format(context="contextlib.suppress(ValueError)"))] == ["GF004"]
    leaving = ACCUMULATED_UNDER_A_CONTEXT.format(context="accelerator.autocast()").replace(
        "            loss =", "            if batch.sum() > 0:\n                continue\n            loss ="
    )
    assert [code for code, _, _ in found(leaving)] == ["GF004"]


TEACHER_TARGET_BEFORE_THE_LOOP = """\
x = torch.randn(10, 4)
teacher = nn.Linear(4, 2)
student = nn.Linear(4, 2)
optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
for q in teacher.parameters():
    {freezing}
target = teacher(x)
for step in range(3):
    loss = nn.functional.mse_loss(student(x), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_module_whose_parameters_turn_gradients_off_one_by_one_is_frozen():
    # (H57: 40 generated programs froze a teacher with `q.requires_grad_(False)`; GF003 moved its
    # target into the loop as a safe fix of correct code. The assignment was already read.)
    for freezing in ("q.requires_grad = False", "q.requires_grad_(False)", "q.requires_grad_(requires_grad=False)"):
        assert found(TEACHER_TARGET_BEFORE_THE_LOOP.format(freezing=freezing)) == [], freezing
    # Only where every parameter is turned off: not under a test of each, nor past a `continue`.
    some = TEACHER_TARGET_BEFORE_THE_LOOP.format(freezing="if q.dim() > 1:\n        q.requires_grad_(False)")
    assert [hint for _, hint, _ in found(some)] == [False]
    skipping = TEACHER_TARGET_BEFORE_THE_LOOP.format(freezing="if q.dim() == 1:\n        continue\n    q.requires_grad = False")
    assert [hint for _, hint, _ in found(skipping)] == [False]
    for not_freezing in ("q.requires_grad_(True)", "print(q.shape)"):
        # (reported by default: GF003 where the loop turns gradients on, GF006 where nothing does)
        assert [hint for _, hint, _ in found(TEACHER_TARGET_BEFORE_THE_LOOP.format(freezing=not_freezing))] == [False], not_freezing


FULL_BACKPROPAGATION_THROUGH_TIME = """\
xs, ys = torch.randn(4, 5, 4), torch.randn(4, 5, 1)
rnn, head = nn.RNNCell(4, 6), nn.Linear(6, 1)
optimizer = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
h = torch.zeros(5, 6)
optimizer.zero_grad()
for t in range(4):
    h = rnn(xs[t], h)
    loss = nn.functional.mse_loss(head(h), ys[t])
    loss.backward(retain_graph=True)
    {stepping}.step()
optimizer.step()
"""


def test_only_an_optimizers_step_changes_parameters_for_certain():
    # (H57: a scheduler's step() in the loop was taken for a parameter update, so keeping every
    # prefix's graph on purpose, or Jacobian rows of one forward, were default GF004 / GF003.)
    assert found(FULL_BACKPROPAGATION_THROUGH_TIME.format(stepping="scheduler")) == []
    assert [(code, hint) for code, hint, _ in found(FULL_BACKPROPAGATION_THROUGH_TIME.format(stepping="optimizer"))] == [("GF004", False)]
    # A closure handed to the step (LBFGS's `optimizer.step(closure)`) is no optimizer of its own.
    closure = FULL_BACKPROPAGATION_THROUGH_TIME.format(stepping="optimizer").replace("    optimizer.step()\n", "    optimizer.step(None)\n", 1)
    assert [(code, hint) for code, hint, _ in found(closure)] == [("GF004", False)]


TRAINING_STEP_BACKWARDS_WHAT_IT_RETURNS = """\
import pytorch_lightning as pl


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        losses = {{"loss": self.net(batch).pow(2).mean()}}
        losses["loss"].backward()
        {between}
        return losses["loss"]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_a_hook_that_backwards_the_item_it_returns_backwards_it_before_the_trainer():
    # (H55's m18: `train_loss["loss"].backward(); return train_loss["loss"]` was missed, as only a
    # name was compared; the item is the same tensor where nothing after the backward names its dict.)
    # Reported, but removing the backward is unsafe: reading the item again is one tensor only if the
    # container is plain, which gradfix does not prove (`losses` may be any mapping).
    assert [(code, fix) for code, _, fix in found(TRAINING_STEP_BACKWARDS_WHAT_IT_RETURNS.format(between="pass"))] == [("GF001", "unsafe")]
    # A call handed the dict may change what its "loss" holds: the returned tensor may be another.
    assert found(TRAINING_STEP_BACKWARDS_WHAT_IT_RETURNS.format(between="refresh(losses)")) == []


# Reduced from MedicalGPT's reward_modeling.py (h60's r10c): a Trainer subclass's compute_loss
# backwards the loss it returns; a helper elsewhere in the file calls ``.named_parameters()`` on its
# own parameter. What the helper's variable is says nothing of compute_loss's ``model``.
TRAINER_WITH_A_HELPER = """\
from transformers import Trainer


class PairTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        chosen = model(input_ids=inputs["chosen"])[0]
        rejected = model(input_ids=inputs["rejected"])[0]
        loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
        self.accelerator.backward(loss)
        return loss


def count_trainable({name}):
    return sum(p.numel() for _, p in {name}.named_parameters() if p.requires_grad)
"""


def test_what_a_function_learns_of_its_own_variable_holds_only_in_that_function():
    renamed = found(TRAINER_WITH_A_HELPER.format(name="net"))
    same_spelling = found(TRAINER_WITH_A_HELPER.format(name="model"))
    assert [(code, hint, fix) for code, hint, fix in renamed] == [("GF001", False, "safe")]
    assert same_spelling == renamed


GLOBAL_MODULE_READ_IN_A_FUNCTION = """\
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train({parameters}):
    history = []
    for t in range(3):
        out = model(torch.randn(4, 3))
        history.append(out.mean())
        loss = out.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return history
"""


def test_a_function_that_binds_no_name_of_its_own_reads_the_modules_and_one_that_does_does_not():
    # ``model`` read in ``train`` without a binding of its own: the module's ``nn.Linear``, a proved forward.
    reading_the_global = found(GLOBAL_MODULE_READ_IN_A_FUNCTION.format(parameters=""))
    # ``train(model)``, never called in the file: its ``model`` may be anything, whatever the module's
    # is, so no finding rests on it.
    own_parameter = found(GLOBAL_MODULE_READ_IN_A_FUNCTION.format(parameters="model"))
    assert [(code, hint) for code, hint, _ in reading_the_global] == [("GF007", False)]
    assert [code for code, hint, _ in own_parameter if not hint] == []


FABRIC_HANDED_TO_A_FUNCTION = """\
{made}


def train(fabric, generator, discriminator, optimizer_g, optimizer_d, data):
    criterion = nn.BCEWithLogitsLoss()
    for (real,) in data:
        ones, zeros = torch.ones(real.size(0), 1), torch.zeros(real.size(0), 1)
        optimizer_d.zero_grad()
        fake = generator(torch.randn(real.size(0), 4))
        err_d = criterion(discriminator(real), ones) + criterion(discriminator(fake), zeros)
        fabric.backward(err_d)
        optimizer_d.step()
        optimizer_g.zero_grad()
        err_g = criterion(discriminator(fake), ones)
        fabric.backward(err_g)
        optimizer_g.step()


generator, discriminator = nn.Linear(4, 8), nn.Linear(8, 1)
optimizer_g = torch.optim.Adam(generator.parameters())
optimizer_d = torch.optim.Adam(discriminator.parameters())
train({handed}, generator, discriminator, optimizer_g, optimizer_d, [(torch.randn(6, 8),)])
"""


def test_a_framework_object_every_call_hands_a_function_is_its_parameters_not_its_spellings():
    made = "from lightning_fabric import Fabric\nfabric = Fabric(accelerator='cpu')"
    handed = found(FABRIC_HANDED_TO_A_FUNCTION.format(made=made, handed="fabric"))
    # The same object under another name at the call: the parameter is still the framework's.
    renamed = found(FABRIC_HANDED_TO_A_FUNCTION.format(made=made.replace("fabric =", "runner ="), handed="runner"))
    # Built by code gradfix did not read: what ``fabric.backward`` backwards is not known.
    unread = found(FABRIC_HANDED_TO_A_FUNCTION.format(made="from launch import make_fabric\nfabric = make_fabric()", handed="fabric"))
    assert [(code, fix) for code, _, fix in handed] == [("GF005", "safe")]
    assert renamed == handed
    assert [(code, fix) for code, _, fix in unread] != [("GF005", "safe")]


RETURNED_WITH_OUTPUTS = """\
from transformers import Trainer


class PairTrainer(Trainer):
    def compute_loss(self, model: nn.Module, inputs, return_outputs=False, **kwargs):
        chosen = model(input_ids=inputs["chosen"])[0]
        rejected = model(input_ids=inputs["rejected"])[0]
        loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
        self.accelerator.backward(loss)
        return {returned}, {{"chosen": chosen, "rejected": rejected}}
"""


def test_the_backwarded_loss_a_hook_returns_beside_its_outputs_is_one_finding():
    # The trainer backwards the tuple's first item, the very loss backwarded: GF001's bug alone.
    same_loss = found(RETURNED_WITH_OUTPUTS.format(returned="loss"))
    # Another value built on the freed graph: GF010's.
    built_on_it = found(RETURNED_WITH_OUTPUTS.format(returned="loss * 2"))
    assert [code for code, hint, _ in same_loss if not hint] == ["GF001"]
    assert "GF010" in [code for code, hint, _ in built_on_it if not hint]


# Rebuilt from the real failure set-a/07 (fairseq's R-Drop task): the task's method is handed the
# optimizer wrapper of the file under another name; its ``backward`` is the wrapper's own method.
METHOD_HANDED_AN_INSTANCE = """\
class Wrapped:
    def __init__(self, params, lr):
        self._optimizer = torch.optim.SGD(params, lr=lr)

    def backward(self, loss):
        loss.backward()

    def zero_grad(self):
        self._optimizer.zero_grad()

    def step(self):
        self._optimizer.step()


class Task:
    def train_step(self, batch, net, opt):
        loss = net(batch).pow(2).mean()
        opt.backward(loss)
        opt.backward(loss)
        return loss


model = nn.Linear(3, 1)
optimizer = Wrapped(model.parameters(), lr=0.1)
task = Task()
{elsewhere}
for step in range(3):
    optimizer.zero_grad()
    task.train_step(torch.randn(4, 3), model, optimizer)
    optimizer.step()
"""


def test_an_instance_every_call_hands_a_method_is_its_parameters_whatever_it_is_named():
    handed = found(METHOD_HANDED_AN_INSTANCE.format(elsewhere=""))
    # One more call of a ``train_step`` whose receiver gradfix cannot name: what ``opt`` is, is not known.
    unresolved = found(METHOD_HANDED_AN_INSTANCE.format(elsewhere="from elsewhere import runner\nrunner.train_step(None, None, None)"))
    assert [(code, hint, fix) for code, hint, fix in handed] == [("GF001", False, "safe")]
    assert [code for code, hint, _ in unresolved if not hint] == []


FROZEN_AND_HANDED = """\
def encode(encoder, x):
    return encoder(x)


def main():
    encoder = nn.Linear(3, 4)
{frozen}    head = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
    features = None
    for step in range(3):
        if step == 0:
            features = encode(encoder, torch.randn(2, 3))
        loss = head(features).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_module_frozen_by_the_caller_is_handed_on_frozen():
    # The caller's encoder is frozen: what the helper computes with it holds no graph (it runs).
    frozen = found(FROZEN_AND_HANDED.format(frozen="    encoder.requires_grad_(False)\n"))
    # The same encoder trainable: the features of the first step carry its freed graph (it raises).
    trainable = found(FROZEN_AND_HANDED.format(frozen=""))
    assert frozen == []
    assert [(code, hint) for code, hint, _ in trainable] == [("GF004", False)]


# Reduced from locuslab/fast_adversarial (MNIST/train_mnist.py, mutated): the model comes from a
# factory of another file, so its forward is code gradfix did not read; the running loss adds the
# loss tensor, scaled, after the loss was backwarded (run with torch: `train_loss` requires grad
# and keeps every step's graph).
RUNNING_LOSS = """\
import torch.nn.functional as F
from nets import mnist_net
model = mnist_net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [(torch.randn(8, 10), torch.randint(0, 3, (8,))) for _ in range(50)]
for epoch in range(2):
    train_loss = 0
    for X, y in loader:
        loss = F.cross_entropy(model(X), y)
        opt.zero_grad()
        {backward}
        opt.step()
        train_loss += loss * y.size(0)
    print(epoch, float(train_loss) / 400)
"""


def test_arithmetic_on_a_tensor_a_backward_walked_holds_a_graph_whatever_code_built_it():
    # (b85b31c: nothing: the expression's graph came out of code gradfix did not read)
    assert [(code, hint) for code, hint, _ in found(RUNNING_LOSS.format(backward="loss.backward()"))] == [("GF007", False)]
    # Another tensor backwarded: nothing proves `loss` holds a graph, as at b85b31c.
    assert found(RUNNING_LOSS.format(backward="(loss * 1.0).backward()")) == []


# (LTSF-Linear's trainer, reduced, with the backward dedented out of the batch loop; the loss is
# computed under autocast when `use_amp` is set: cure-lab/LTSF-Linear exp/exp_main.py)
LAST_BATCH_UNDER_A_CONTEXT = """\
import contextlib
model = nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters())
loader = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        with {context}:
            loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""


def test_a_value_assigned_in_a_with_body_that_runs_to_its_end_is_the_last_iterations_after_the_loop():
    # autocast lets the body's exceptions through: every iteration assigns `loss`, and the backward
    # after the loop trains on the last batch alone. A context that may swallow one (suppress) may
    # leave `loss` an earlier iteration's: that is not proved.
    kept = LAST_BATCH_UNDER_A_CONTEXT.format(context='torch.autocast("cpu")')
    assert _runs(kept)
    assert [(code, hint) for code, hint, _ in found(kept) if code == "GF008"] == [("GF008", False)]
    swallowed = LAST_BATCH_UNDER_A_CONTEXT.format(context="contextlib.suppress(ValueError)")
    assert [code for code, hint, _ in found(swallowed) if code == "GF008"] == []


def test_a_value_assigned_on_every_path_of_an_if_is_the_last_iterations_after_the_loop():
    # LTSF-Linear's `if use_amp: ... else: ...`: every iteration assigns `loss`, one way or the
    # other. An `if` without an `else` may leave an earlier iteration's.
    both = LAST_BATCH_UNDER_A_CONTEXT.replace(
        "        with {context}:\n            loss = nn.functional.mse_loss(model(x), y)",
        "        if epoch > 5:\n            loss = nn.functional.mse_loss(model(x), y) * 2\n        else:\n            loss = nn.functional.mse_loss(model(x), y)",
    )
    assert _runs(both)
    assert [(code, hint) for code, hint, _ in found(both) if code == "GF008"] == [("GF008", False)]
    alone = both.replace("        else:\n            loss = nn.functional.mse_loss(model(x), y)\n", "")
    assert [code for code, hint, _ in found(alone) if code == "GF008"] == []


# (a teacher and a student of one class that keeps a module-level layer: the student's optimizer
# trains the teacher's first layer too; found by a helper reviewing the project-class exports)
SHARED_LAYER = """\
import torch.nn.functional as F
SHARED = nn.Linear(4, 8)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = {body}
        self.head = nn.Linear(8, 2)
    def forward(self, x):
        return self.head(self.body(x))
X = torch.randn(3, 5, 4)
student = Net()
teacher = Net()
opt = torch.optim.SGD(student.parameters(), lr=0.1)
target = teacher(X)
for i in range(len(X)):
    loss = F.mse_loss(student(X[i]), target[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_network_that_keeps_a_module_bound_elsewhere_is_not_proved_untrained():
    # Each instance of `Net` holds (or calls) the very `SHARED` layer: the student's steps change the
    # teacher's output, so detaching the target once (GF006's fix) would train on a stale one;
    # computed in the loop (GF003), it follows the layer. The loss puts the student's output, a
    # network of the same class, against the target: whether the teacher's outputs before training
    # or at each step are meant is not clear, and the move is not written. A class that builds its
    # own layer is the teacher nothing trains.
    shared, contained, own = (SHARED_LAYER.format(body=body) for body in ("SHARED", "nn.Sequential(SHARED, nn.ReLU())", "nn.Linear(4, 8)"))
    assert not _runs(shared) and not _runs(contained) and not _runs(own)
    assert [(code, fix) for code, hint, fix in found(shared) if not hint] == [("GF003", None)]
    assert [(code, fix) for code, hint, fix in found(contained) if not hint] == [("GF003", None)]
    assert [(code, fix) for code, hint, fix in found(own) if not hint] == [("GF006", "safe")]
    called = SHARED_LAYER.format(body="nn.Identity()").replace("self.head(self.body(x))", "self.head(SHARED(x))")
    assert not _runs(called)
    assert [(code, fix) for code, hint, fix in found(called) if not hint] == [("GF003", None)]
    own_by_name = SHARED_LAYER.format(body="layer").replace("        self.body = layer", "        layer = nn.Linear(4, 8)\n        self.body = layer")
    assert [(code, fix) for code, hint, fix in found(own_by_name) if not hint] == [("GF006", "safe")]


KEPT_UNDER_TWO_NAMES = """\
net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
losses = []
{other}
for step in range(3):
    loss = net(torch.randn(3, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward({retain})
    opt.step()
    losses.append(loss)
opt.zero_grad()
{after}
"""


def test_a_store_whose_object_another_name_holds_may_be_backwarded_through_that_name():
    # The graphs the loop keeps are what the backward after it walks, read through the other name:
    # that they are kept for nothing is a guess.
    alias = KEPT_UNDER_TWO_NAMES.format(other="history = losses", retain="retain_graph=True", after="torch.stack(history).sum().backward()")
    in_a_dict = KEPT_UNDER_TWO_NAMES.format(
        other='logs = {"losses": losses}', retain="retain_graph=True", after='torch.stack(logs["losses"]).sum().backward()'
    )
    assert [(code, hint) for code, hint, _ in found(alias)] == [("GF007", True)]
    assert [(code, hint) for code, hint, _ in found(in_a_dict)] == [("GF007", True)]
    # Hidden fact: the other name holds another list: the graphs the loop keeps are kept for nothing.
    another_list = KEPT_UNDER_TWO_NAMES.format(
        other="history = [torch.ones((), requires_grad=True)]", retain="retain_graph=True", after="torch.stack(history).sum().backward()"
    )
    assert [(code, hint) for code, hint, _ in found(another_list) if code == "GF007"] == [("GF007", False)]
    # Hidden fact: the backward in the loop frees each graph it keeps: no later backward can walk them, through any name.
    freed = KEPT_UNDER_TWO_NAMES.format(other="history = losses", retain="", after="print(torch.stack(history).sum().item())")
    assert [(code, hint) for code, hint, _ in found(freed)] == [("GF007", False)]


BACKWARDS_OF_TWO_HEADS = """\
shared = nn.Linear(4, 4)
head0 = nn.Linear(4, 1)
head1 = nn.Linear(4, 1)
opt = torch.optim.SGD([*shared.parameters(), *head0.parameters(), *head1.parameters()], lr=0.1)
for step in range(3):
    h = torch.tanh(shared(torch.randn(8, 4)))
    losses = [head0(h).pow(2).mean(), head1(h).pow(2).mean()]
    opt.zero_grad()
{backwards}
    opt.step()
"""


def test_a_backward_in_a_comprehension_runs_once_for_each_item():
    # The walk reads a comprehension's element once; each item's backward walks `h`'s graph again
    # (brianlan/pytorch-grad-norm's per-task gradients, written as a comprehension): dropping
    # `retain_graph=True` breaks the second.
    assert found(BACKWARDS_OF_TWO_HEADS.format(backwards="    _ = [loss.backward(retain_graph=True) for loss in losses]")) == []
    per_item = "    _ = [head0(torch.randn(8, 4)).pow(2).mean().backward(retain_graph=True) for _ in range(2)]"
    assert found(BACKWARDS_OF_TWO_HEADS.format(backwards=per_item)) == []  # (nothing tells the items' graphs apart)
    # Hidden fact: written as a `for` loop, each iteration is walked, and a graph built in it is its own.
    per_iteration = "    for _ in range(2):\n        head0(torch.randn(8, 4)).pow(2).mean().backward(retain_graph=True)"
    assert found(BACKWARDS_OF_TWO_HEADS.format(backwards=per_iteration)) == [("GF009", False, "safe")]


def test_no_fix_rests_on_a_backward_in_a_comprehension():
    forward_once = """\
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
out = model(x)
for step in range(3):
    loss = out.pow(2).mean()
    opt.zero_grad()
    {backward}
    opt.step()
"""
    assert found(forward_once.format(backward="_ = [l.backward() for l in [loss]]")) == [("GF003", False, None)]
    assert found(forward_once.format(backward="loss.backward()")) == [("GF003", False, "safe")]  # (the backward runs once)


TASK_BACKWARDS_IN_A_FUNCTION = """\
shared = nn.Linear(4, 4)
head0 = nn.Linear(4, 1)
head1 = nn.Linear(4, 1)
opt = torch.optim.SGD([*shared.parameters(), *head0.parameters(), *head1.parameters()], lr=0.1)
h = torch.tanh(shared(torch.randn(8, 4)))


def task_backward(head):
{body}


opt.zero_grad()
task_backward(head0)
task_backward(head1)
opt.step()
"""

TASK_BACKWARDS_IN_A_METHOD = """\
shared = nn.Linear(4, 4)
head0 = nn.Linear(4, 1)
opt = torch.optim.SGD([*shared.parameters(), *head0.parameters()], lr=0.1)


class Trainer:
    def __init__(self):
        self.h = None

    def forward_shared(self):
        self.h = torch.tanh(shared(torch.randn(8, 4)))

    def task_backward(self):
{body}


trainer = Trainer()
for step in range(3):
    trainer.forward_shared()
    opt.zero_grad()
    trainer.task_backward()
    trainer.task_backward()
    opt.step()
"""


def test_a_graph_built_outside_a_function_is_walked_again_by_each_call():
    # Each call of the function backwards through `h`, which it did not build: the second call
    # needs the graph the first kept.
    from_the_module = TASK_BACKWARDS_IN_A_FUNCTION.format(body="    head(h).pow(2).mean().backward(retain_graph=True)")
    assert found(from_the_module) == []
    from_another_method = TASK_BACKWARDS_IN_A_METHOD.format(body="        head0(self.h).pow(2).mean().backward(retain_graph=True)")
    assert found(from_another_method) == []
    # Hidden fact: each call builds the whole graph it backwards.
    built_in_the_call = "    head(torch.tanh(shared(torch.randn(8, 4)))).pow(2).mean().backward(retain_graph=True)"
    assert found(TASK_BACKWARDS_IN_A_FUNCTION.format(body=built_in_the_call)) == [("GF009", False, "safe")]
    built_in_the_method = "        head0(torch.tanh(shared(torch.randn(8, 4)))).pow(2).mean().backward(retain_graph=True)"
    assert found(TASK_BACKWARDS_IN_A_METHOD.format(body=built_in_the_method)) == [("GF009", False, "safe")]


D_STEP = """\
discriminator = nn.Sequential(nn.Linear(8, 1), nn.Sigmoid())
optimizer = torch.optim.Adam(discriminator.parameters(), 2e-4)
criterion = nn.BCELoss()


def train_discriminator(real, fake):
    optimizer.zero_grad()
    prediction = discriminator(torch.cat([real, fake]))
    error_real = criterion(prediction[:16], torch.ones(16, 1))
    error_real.backward()
    error_fake = criterion(prediction[16:], {zeros})
    error_fake.backward()
    optimizer.step()


for step in range(3):
    train_discriminator(torch.randn(16, 8), torch.randn(16, 8))
"""


def test_a_gf002_left_unrewritten_says_what_stopped_the_merge():
    # The common D step of GAN notebooks (h78: diegoalejogm/gans, mutated): the second loss is computed
    # between the two backwards, by a call gradfix does not read on a parameter of unknown type.
    [finding] = gradfix.check(HEADER + D_STEP.format(zeros="torch.zeros(fake.size(0), 1)"), hints=True).findings
    assert finding.code == "GF002" and finding.fix is None
    assert "(not rewritten: `fake.size(0)` runs between them, and gradfix does not see whether it reads the gradients" in finding.message
    # Hidden fact: what runs between them is all torch's own: merged, safely.
    [finding] = gradfix.check(HEADER + D_STEP.format(zeros="torch.zeros(16, 1)"), hints=True).findings
    assert finding.code == "GF002" and finding.fix is not None and finding.fix.value == "safe"


FEDPROX_TERM_ONCE = """\
import copy


def train_fedprox(net, global_net, batches, mu, device="cpu"):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    global_weights = list({global_parameters})
    proximal = 0.0
    for index, param in enumerate(net.parameters()):
        proximal += (mu / 2) * torch.norm(param - global_weights[index]) ** 2
    for x, target in batches:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(x), target)
        loss += proximal
        loss.backward()
        optimizer.step()


net = nn.Linear(4, 2)
train_fedprox(net, copy.deepcopy(net), [(torch.randn(8, 4), torch.randint(0, 2, (8,)))] * 3, 0.01)
"""


def test_a_module_method_that_returns_the_module_hands_back_that_module():
    # Xtra-Computing/NIID-Bench's FedProx (h79, the term moved before the loop): the global model's
    # weights read through `global_net.to(device)`, the module itself.
    assert [code for code, _, _ in found(FEDPROX_TERM_ONCE.format(global_parameters="global_net.to(device).parameters()"))] == ["GF003"]
    assert [code for code, _, _ in found(FEDPROX_TERM_ONCE.format(global_parameters="global_net.cuda().eval().parameters()"))] == ["GF003"]
    # Hidden fact: a method the table does not say returns the module (it may return anything).
    analysis = FileAnalysis(cst.parse_module("import torch\nnet = torch.nn.Linear(2, 2)\nnet.to('cpu').eval()\nnet.to_device('cpu')\n"))
    returning, other = [cst.ensure_type(cst.ensure_type(line, cst.SimpleStatementLine).body[0], cst.Expr).value for line in analysis.module.body[2:]]
    assert analysis.names.module(returning, None) is analysis.names.modules["net"]
    assert analysis.names.module(other, None) is None


RETAINED_BEFORE_A_LOOP_OVER = """\
shared = nn.Linear(4, 4)
head0 = nn.Linear(4, 1)
head1 = nn.Linear(4, 1)
opt = torch.optim.SGD([*shared.parameters(), *head0.parameters(), *head1.parameters()], lr=0.1)
weights = [0.5]
for step in range(3):
    h = torch.tanh(shared(torch.randn(8, 4)))
    first = head0(h).pow(2).mean()
    opt.zero_grad()
    first.backward(retain_graph=True)
    for {targets} in {iterated}:
        ({scaled}).backward()
    opt.step()
"""


def test_zip_and_enumerate_yield_what_iterating_their_arguments_yields():
    # The loop after the first backward walks `h`'s graph again through the losses it iterates:
    # `retain_graph=True` is needed (it was dropped as a safe fix: zip and enumerate were calls of
    # code gradfix did not read, whose items it took for data).
    zipped = RETAINED_BEFORE_A_LOOP_OVER.format(targets="w, loss", iterated="zip(weights, [head1(h).pow(2).mean()])", scaled="w * loss")
    numbered = RETAINED_BEFORE_A_LOOP_OVER.format(targets="i, loss", iterated="enumerate([head1(h).pow(2).mean()])", scaled="loss")
    assert found(zipped) == []
    assert found(numbered) == []
    # Hidden fact: the iterated losses are built from a graph of their own.
    apart = RETAINED_BEFORE_A_LOOP_OVER.format(targets="w, loss", iterated="zip(weights, [head1(torch.randn(8, 4)).mean()])", scaled="w * loss")
    assert found(apart) == [("GF009", False, "safe")]


BATCHES_NUMBERED = """\
{loader}
generator = nn.Linear(1, 4)
classifier_1 = nn.Linear(4, 1)
classifier_2 = nn.Linear(4, 2)
optimizer = torch.optim.SGD([*generator.parameters(), *classifier_1.parameters(), *classifier_2.parameters()], lr=0.1)
for step, x in enumerate(loader):
    target = (x * 10).long().clamp(max=1).squeeze(1)
    gen = generator(x)
    loss1 = classifier_1(gen).pow(2).mean()
    loss2 = nn.functional.cross_entropy(classifier_2(gen), target)
    optimizer.zero_grad()
    loss1.backward()
    loss2.backward()
    optimizer.step()
"""


def test_a_loop_over_enumerate_of_a_data_loader_runs_only_code_gradfix_models():
    # ../shared/real-failures set-a 06: `enumerate(loader)` was a call of code gradfix did not read, so
    # `x` was no known tensor and `.long()` on it a method gradfix did not read: the GF002 merge was
    # unsafe. The builtin yields the data loader's batches with their index.
    loader = "loader = torch.utils.data.DataLoader(torch.rand(16, 1), batch_size=4)"
    assert found(BATCHES_NUMBERED.format(loader=loader)) == [("GF002", False, "safe")]
    # Hidden fact: `enumerate` is bound to a function gradfix did not read.
    assert found(BATCHES_NUMBERED.format(loader=loader + "\nfrom helpers import enumerate")) == [("GF002", False, "unsafe")]


ONE_LINE_STEP = """\
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    {line}
    optimizer.step()
{after}
"""


def test_each_statement_of_a_line_is_read_for_what_it_keeps():
    # h79 (Lightning-AI/lit-llama's loop, mutated): `fabric.backward(loss); train_losses.append(loss)`.
    kept = ONE_LINE_STEP.format(line="loss.backward(); losses.append(loss)", after="print(len(losses))")
    assert found(kept) == [("GF007", False, "safe")]
    # Hidden fact: a backward after the loop walks what the list keeps (the graphs were retained for it).
    needed = ONE_LINE_STEP.format(line="loss.backward(retain_graph=True); losses.append(loss)", after="torch.stack(losses).sum().backward()")
    assert [code for code, _, _ in found(needed)] == []


# h80's generator: the backward reads something the walk took for no graph, or for one each call builds, that
# may be a graph an earlier call built and kept; GF009 dropped `retain_graph=True` as a safe fix and the next
# step raised. Each program's `{prior}` is what the graph reads besides `head`'s parameters.
KEPT_BY_AN_EARLIER_CALL = {
    "a cache in a module dict": (
        '_cache = {}\n\n\ndef features():\n    if "f" not in _cache:\n        _cache["f"] = enc(x)\n    return _cache["f"]\n',
        "features()",
    ),
    "an lru_cache": ("import functools\n\n\n@functools.lru_cache(maxsize=None)\ndef features():\n    return enc(x)\n", "features()"),
    "a parameter default": ("def features(prior=enc(x)):\n    return prior * 1.0\n", "features()"),
    "a global statement": ("_f = None\n\n\ndef features():\n    global _f\n    if _f is None:\n        _f = enc(x)\n    return _f\n", "features()"),
    "a generator's frame": ("def stream():\n    f = enc(x)\n    while True:\n        yield f\n\n\nfeed = stream()\n", "next(feed)"),
}
FRESH_EACH_CALL = ("def features():\n    return enc(x)\n", "features()")
KEPT_PROGRAM = """\
enc, head = nn.Linear(4, 3), nn.Linear(3, 1)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x = torch.randn(5, 4)
{definition}

for step in range(2):
    opt.zero_grad()
    loss = head({prior}).sum()
    loss.backward(retain_graph=True)
    opt.step()
"""


@pytest.mark.parametrize("kind", sorted(KEPT_BY_AN_EARLIER_CALL))
def test_a_graph_an_earlier_call_may_have_kept_makes_dropping_retain_graph_unsafe(kind):
    definition, prior = KEPT_BY_AN_EARLIER_CALL[kind]
    findings = found(KEPT_PROGRAM.format(definition=definition, prior=prior))
    assert findings and not [finding for finding in findings if finding[2] == "safe"]
    # Hidden fact: each call builds its graph afresh.
    assert found(KEPT_PROGRAM.format(definition=FRESH_EACH_CALL[0], prior=FRESH_EACH_CALL[1])) == [("GF009", False, "safe")]


MAYBE_BACKWARDED_FIRST = """\
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
warm = False
for step in range(2):
    opt.zero_grad()
    loss = model(torch.randn(5, 4)).pow(2).sum()
    {first}
    loss.backward()
    opt.step()
"""


def test_a_backward_in_an_operand_that_may_not_be_evaluated_may_not_run():
    # h80's generator: `warm and loss.backward()` runs the backward only when `warm` is set; GF001
    # removed the next `loss.backward()` as a duplicate (safe), and the program then trained on nothing.
    assert [(code, hint) for code, hint, _ in found(MAYBE_BACKWARDED_FIRST.format(first="warm and loss.backward()"))] == [("GF010", True)]
    assert [(code, hint) for code, hint, _ in found(MAYBE_BACKWARDED_FIRST.format(first="loss.backward() if warm else None"))] == [("GF010", True)]
    # Hidden fact: the first backward runs whenever its statement does.
    assert found(MAYBE_BACKWARDED_FIRST.format(first="loss.backward()")) == [("GF001", False, "safe")]


GRAD_MODE_INSIDE_NO_GRAD = """\
enc, head_a, head_b = nn.Linear(4, 3), nn.Linear(3, 1), nn.Linear(3, 1)
opt = torch.optim.SGD([*enc.parameters(), *head_a.parameters(), *head_b.parameters()], lr=0.1)
x = torch.randn(5, 4)
for step in range(2):
    opt.zero_grad()
    with torch.no_grad():
        with {inner}:
            h = torch.tanh(enc(x))
    head_a(h).sum().backward(retain_graph=True)
    head_b(h).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize("inner", ["torch.enable_grad()", "torch.set_grad_enabled(step >= 0)", "torch.inference_mode(False)"])
def test_a_context_that_turns_gradients_back_on_inside_no_grad_records_graphs(inner):
    # h80's generator: `h` holds enc's graph, which both backwards walk: retain_graph=True is needed.
    assert found(GRAD_MODE_INSIDE_NO_GRAD.format(inner=inner)) == []
    # Hidden fact: gradients stay off, `h` holds no graph, and nothing backwards head_a's again.
    assert found(GRAD_MODE_INSIDE_NO_GRAD.format(inner="torch.no_grad()")) == [("GF009", False, "safe")]


REBOUND_BETWEEN_TWO_BACKWARDS = """\
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
xs = torch.randn(2, 5, 4)
opt.zero_grad()
loss = model(xs[0]).sum()
loss.backward()
{rebinding}
loss.backward()
opt.step()
"""


@pytest.mark.parametrize(
    "rebinding",
    ["match model(xs[1]).sum():\n    case loss:\n        pass", "[loss := model(x).sum() for x in xs[1:]]"],
    ids=["a match capture", "a walrus in a comprehension"],
)
def test_a_name_bound_again_by_a_pattern_or_a_comprehensions_walrus_is_a_new_value(rebinding):
    # h80's generator: GF001 removed the second backward (safe) as a duplicate of the first; it
    # backwards the loss the capture (or the comprehension's walrus, in the scope around it) bound.
    assert [(code, hint) for code, hint, _ in found(REBOUND_BETWEEN_TWO_BACKWARDS.format(rebinding=rebinding)) if not hint] == []
    # Hidden fact: nothing binds it again.
    assert found(REBOUND_BETWEEN_TWO_BACKWARDS.format(rebinding="print(loss.item())")) == [("GF001", False, "safe")]


TEACHER_HELD_ELSEWHERE = """\
teacher, student = nn.Linear(4, 3), nn.Linear(4, 3)
x = torch.randn(5, 4)
{held}
target = {called}(x)
for step in range(3):
    opt.zero_grad()
    loss = (student(x) - target).pow(2).mean()
    loss.backward(retain_graph=True)
    opt.step()
"""
PAIR = "class Pair(nn.Module):\n    def __init__(self, s, t):\n        super().__init__()\n        self.s, self.t = s, t\n\n\n"


@pytest.mark.parametrize(
    ("held", "called"),
    [
        ("net = teacher\nopt = torch.optim.SGD([*student.parameters(), *net.parameters()], lr=0.1)", "teacher"),
        ("net = teacher\nopt = torch.optim.SGD([*student.parameters(), *teacher.parameters()], lr=0.1)", "net"),
        (PAIR + "pair = Pair(student, teacher)\nopt = torch.optim.SGD(pair.parameters(), lr=0.1)", "teacher"),
    ],
    ids=["an alias", "the alias's forward", "a module that keeps it"],
)
def test_a_module_another_name_holds_may_be_trained_through_that_name(held, called):
    # h80's generator: GF006 detached `target` as built by a network nothing trains (safe), but the
    # optimizer trains `teacher` under another name: the detached target stops following it.
    assert "GF006" not in [code for code, _, _ in found(TEACHER_HELD_ELSEWHERE.format(held=held, called=called))]
    # Hidden fact: only the student is trained, and nothing else holds the teacher.
    assert ("GF006", False, "safe") in found(
        TEACHER_HELD_ELSEWHERE.format(held="opt = torch.optim.SGD(student.parameters(), lr=0.1)", called="teacher")
    )


LOSSES_LISTED = """\
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
xs = torch.randn(3, 5, 4)
losses = []
{alias}
for i in range(3):
    opt.zero_grad()
    losses.append(model(xs[i]).pow(2).mean())
    losses[-1].backward()
    opt.step()
"""


def test_a_carried_list_another_name_holds_is_not_rebound_safely():
    # h80's generator: GF004's `losses = [s.detach() for s in losses]` makes a new list, which `history`
    # (the same list, read by a learning-rate rule) no longer sees.
    assert found(LOSSES_LISTED.format(alias="history = losses")) == [("GF004", False, "unsafe")]
    # Hidden fact: no other name holds the list, and `losses[-1]` is then what the step appended: nothing
    # carried reaches the backward (test_list_items_from_the_end).
    assert found(LOSSES_LISTED.format(alias="")) == []


CLASS_ATTRIBUTE_PRIOR = """\
enc, head = nn.Linear(3, 2), nn.Linear(2, 1)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x = torch.randn(7, 3)


class Base:
    prior = {prior}


class Trainer(Base):
    def step(self):
        opt.zero_grad()
        loss = head({read}).sum()
        loss.backward(retain_graph=True)
        opt.step()


trainer = Trainer()
for step in range(3):
    trainer.step()
"""


@pytest.mark.parametrize("read", ["self.prior", "Trainer.prior", "type(self).prior"])
def test_a_class_attribute_is_built_once_for_every_call(read):
    # h80's generator (rerun): the prior, built once in a base class body, is walked by every step:
    # that nothing backwards the graph again is not proved, a hint.
    assert found(CLASS_ATTRIBUTE_PRIOR.format(prior="torch.sigmoid(enc(x))", read=read)) == [("GF009", True, None)]
    # Hidden fact: the step builds what it backwards.
    assert found(CLASS_ATTRIBUTE_PRIOR.format(prior="0.5", read="torch.sigmoid(enc(x))")) == [("GF009", False, "safe")]
