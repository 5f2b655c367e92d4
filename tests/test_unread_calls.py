"""A call of code gradfix did not read (a method of a module whose class is another file's, a callable
the code holds: a parameter, an item of a list, what a factory built) may hand back a graph built
from parameters gradfix never saw. That graph is only possible (``Value.possible``): what asks
whether a graph *may* be kept, shared or walked again reads it, and no finding of the default
output or safe rewrite rests on it. Each test has the variant where the callee is a module of the
file, which keeps the answer gradfix gave before. Every program here was run with torch."""

import subprocess
import sys

import pytest

import gradfix
from gradfix.codemods.check import check_file
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

HEADER = """\
import torch
import torch.nn as nn
"""


def found(source, **options):
    return [(f.code, f.hint, f.fix and f.fix.value) for f in gradfix.check(HEADER + source, hints=True, **options).findings]


POLICY = """\
from torch.distributions import Normal


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = nn.Linear(3, 2)
        self.log_std = nn.Linear(3, 2)

    def sample(self, state):
        normal = Normal(self.mean(state), self.log_std(state).clamp(-5, 2).exp())
        x = normal.rsample()
        return torch.tanh(x), normal.log_prob(x).sum(1, keepdim=True)
"""

# Reduced from pranz24/pytorch-soft-actor-critic (sac.py), its networks in model.py: both losses
# read log_pi, and the alpha loss is backwarded before any step, so the policy loss's
# retain_graph=True is needed (without it: "Trying to backward through the graph a second time").
SAC_STEP = """\
{policy}
policy, critic = Policy(), nn.Linear(5, 1)
log_alpha = torch.zeros(1, requires_grad=True)
optimizer = torch.optim.Adam([*policy.parameters(), log_alpha], lr=1e-3)
for step in range(3):
    state = torch.randn(16, 3)
    action, log_pi = policy.sample(state)
    policy_loss = (0.2 * log_pi - critic(torch.cat([state, action], 1))).mean()
    alpha_loss = -(log_alpha * ({alpha_reads} + 2.0)).mean()
    optimizer.zero_grad()
    policy_loss.backward(retain_graph=True)
    alpha_loss.backward()
    optimizer.step()
"""


def test_a_method_of_a_module_of_another_file_may_build_the_graph_a_kept_graph_is_kept_for():
    unread = SAC_STEP.format(policy="from model import Policy\n", alpha_reads="log_pi")
    read_here = SAC_STEP.format(policy=POLICY, alpha_reads="log_pi")
    # (b85b31c: a GF009 finding, whose unsafe fix drops a retain_graph the alpha loss needs)
    assert found(unread) == []
    assert found(read_here) == []


def test_a_kept_graph_nothing_walks_again_is_still_needless_where_gradfix_read_the_method():
    # The alpha loss reads no graph of the policy: the retain_graph keeps what nothing walks again
    # (run with torch: the program runs without it). Where the method is unread code, that is
    # not known (it may keep part of the graph for another call), and nothing is reported (b85b31c
    # reported it, with an unsafe fix: a true finding this gives up, a miss costing less than the
    # false one of the test above).
    read_here = SAC_STEP.format(policy=POLICY, alpha_reads="torch.ones(16, 1)")
    unread = SAC_STEP.format(policy="from model import Policy\n", alpha_reads="torch.ones(16, 1)")
    # (torch.distributions' `rsample` is a call gradfix does not model: even read here, that nothing
    # backwards the graph again is a hint)
    assert [(code, hint) for code, hint, _ in found(read_here)] == [("GF009", True)]
    assert found(unread) == []


# Rebuilt from the set-b negative n12 (fusion_bench AdaMerging): a method of the module gradfix did
# not read keeps merged weights with a graph that every later forward reads, so the backward of
# each task's loss walks them again and needs retain_graph=True. The forward is a call of a
# module the function is handed.
MERGED_WEIGHTS = """\
{merged}
def adapt(module, batches, optimizer):
    module.merge_weights()
    for batch in batches:
        loss = module(batch).pow(2).mean()
        loss.backward(retain_graph=True)
    optimizer.step()
"""

MERGED_HERE = """\
class Merged(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Parameter(torch.randn(4, 4))
        self.task_wise_weight = nn.Parameter(torch.ones(1))

    def merge_weights(self):
        self.weight = self.base * self.task_wise_weight

    def forward(self, x):
        return x @ self.weight
"""


def test_what_a_module_of_unread_code_may_keep_for_every_forward_is_no_proof_that_a_kept_graph_is_needless():
    assert found(MERGED_WEIGHTS.format(merged="")) == []
    assert found(MERGED_WEIGHTS.format(merged=MERGED_HERE)) == []


# Reduced from HobbitLong/RepDistiller (train_student.py): the student and the criteria are items
# of lists the function is handed; both losses read the student's logits.
DISTILL = """\
def train_distill(module_list, criterion_list, optimizer, loader):
    model_s = {student}
    criterion_cls = {criteria[0]}
    criterion_div = {criteria[1]}
    for input, target in loader:
        logit_s = model_s(input)
        loss_cls = criterion_cls(logit_s, target)
        loss_div = criterion_div(logit_s, target)
        optimizer.zero_grad()
        loss_cls.backward()
        loss_div.backward()
        optimizer.step()
"""


def test_callables_the_code_is_handed_may_build_the_graph_two_backwards_share():
    handed = ("criterion_list[0]", "criterion_list[1]")
    # (b85b31c: nothing; run with torch: the second backward raises)
    assert [(code, hint) for code, hint, _ in found(DISTILL.format(student="module_list[0]", criteria=handed))] == [("GF002", True)]
    # The student and the criteria modules of the file: the losses share the student's graph, for
    # certain (as at b85b31c). With the criteria handed in, what they return is a guess (a hint, as
    # at b85b31c).
    student = "student = nn.Linear(8, 5)\n"
    torchs = ("nn.CrossEntropyLoss()", "nn.MultiMarginLoss()")
    assert [(code, hint) for code, hint, _ in found(student + DISTILL.format(student="student", criteria=torchs))] == [("GF002", False)]
    assert [(code, hint) for code, hint, _ in found(student + DISTILL.format(student="student", criteria=handed))] == [("GF002", True)]


# Reduced from PetarV-/DGI (execute.py, mutated): the embeddings are taken from the encoder, an
# attribute of the model gradfix cannot name, without .detach(); the probe's loop backwards
# through that one graph at every step.
PROBE = """\
class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, seq, adj):
        return torch.relu(torch.bmm(adj, self.fc(seq)))


class DGI(nn.Module):
    def __init__(self):
        super().__init__()
        self.gcn = GCN()


model = DGI()
{encoder}
features, adj = torch.randn(1, 10, 8), torch.rand(1, 10, 10)
labels = torch.randint(0, 3, (10,))
embeds = {embedded}
train_embs = embeds[0, :6]
probe = nn.Linear(16, 3)
opt = torch.optim.Adam(probe.parameters(), lr=0.01)
for it in range(100):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(probe(train_embs), labels[:6])
    loss.backward()
    opt.step()
"""


def test_a_submodule_gradfix_cannot_name_may_build_a_graph_before_the_loop():
    # (b85b31c: nothing; run with torch: the second iteration's backward raises)
    unread = found(PROBE.format(encoder="", embedded="model.gcn(features, adj)"))
    assert [(code, hint) for code, hint, _ in unread] == [("GF003", True)]
    known = found(PROBE.format(encoder="gcn = GCN()", embedded="gcn(features, adj)"))
    assert [(code, hint, fix) for code, hint, fix in known] == [("GF006", False, "safe")]


def test_a_graph_that_only_may_be_one_is_not_handed_along_the_file_s_calls():
    """A helper is walked again with what its callers pass it only where that holds a graph gradfix
    saw: a graph that only may come out of unread code adds no walk (and no summary round); the
    variant, a module of the file, hands its graph along as before."""
    from gradfix.codemods.analysis.file_analysis import FileAnalysis
    from gradfix.codemods.parse import parse_decoded

    template = "from helpers import make_net\n{net}\ndef loss_of(out):\n    return out.pow(2).mean()\nloss_of(net(torch.ones(3))).backward()\n"
    for net, handed in [("net = make_net()", False), ("net = nn.Linear(3, 1)", True)]:
        data = (HEADER + template.format(net=net)).encode()
        arguments = FileAnalysis(parse_decoded(data, "<test>"), {}, data)._dataflow.arguments
        assert bool(arguments.get("loss_of")) is handed, net


# (augmented-neural-odes' Trainer, reduced: the model and the optimizer are handed to the object's
# constructor, which this file never calls: EmilienDupont/augmented-neural-odes anode/training.py)
HELD_BY_THE_OBJECT = """\
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
{method}
    def train_epoch(self, batches):
        epoch_loss = 0.0
        for x, y in batches:
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            epoch_loss += loss
        return epoch_loss / len(batches)
"""


def test_a_callable_the_object_was_handed_may_build_the_graph_as_a_handed_parameter_does():
    # `loss.backward()` running proves `loss` holds a graph: the sum keeps every step's (GF007),
    # as where `model` is the method's own parameter. Where the class defines a method `model`,
    # gradfix reads it: doubling the batch builds no graph to keep.
    handed = HELD_BY_THE_OBJECT.format(method="")
    assert found(handed) == [("GF007", False, None)]
    as_a_parameter = handed.replace("def train_epoch(self, batches)", "def train_epoch(self, batches, model)").replace("self.model(x)", "model(x)")
    assert found(as_a_parameter) == found(handed)
    own = HELD_BY_THE_OBJECT.format(method="    def model(self, x):\n        return x * 2\n")
    assert found(own) == []
    # Nor is a method the class may inherit from a base gradfix did not read (a test case's
    # `self.get_dummy_inputs()`): what the object holds is what its methods assign it.
    inherited = handed.replace("        self.model = model\n", "")
    assert found(inherited) == []


LEARNER = """\
import torch.nn.functional as F


class Learner:
    def __init__(self, model):
        self.model, self.loss = model, None

    def forward_pass(self, x, y):
        self.loss = F.mse_loss(self.model(x), y)
"""
LEARNING = """\
import torch
import torch.nn as nn
from learner import Learner

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
learner = Learner(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(4, 4), torch.randn(4, 1)
for step in range(3):
    optimizer.zero_grad()
    learner.forward_pass(x[:2], y[:2])
    learner.loss.backward()
    BETWEEN
    learner.loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(("between", "runs", "reported"), [("learner.forward_pass(x[2:], y[2:])", True, False), ("pass", False, True)])
def test_a_method_gradfix_did_not_read_may_set_any_attribute_of_its_object(tmp_path, between, runs, reported):
    """h83's generator: an imported class's method sets `learner.loss` anew, so the second backward walks a new
    graph. The variant calls no method between: the same loss is backwarded twice."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "learner.py").write_text(LEARNER)
    (tmp_path / "train.py").write_text(LEARNING.replace("BETWEEN", between))
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, timeout=300)
    assert (done.returncode == 0) is runs
    findings = check_file(tmp_path / "train.py", all_rules(), FixMode.NONE).findings
    assert [f.code for f in findings if not f.hint] == (["GF001"] if reported else [])
