"""One test per entry of codemods/analysis/UNKNOWNS.md, in its order: what the analysis does with
what it cannot know. An unknown never licenses a rewrite; at most it lets a rule report."""

import re

from gradfix.codemods.check import check_source
from gradfix.codemods.report import FileReport, FixMode
from gradfix.codemods.registry import all_rules


def checked(source: str) -> FileReport:
    return check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py")


def _safe(source: str) -> FileReport:
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


def codes(report: FileReport) -> list[str]:
    return sorted(f.code for f in [*report.findings, *report.fixed])


def test_backward_gradient_argument_is_not_a_tensor_backwarded():
    source = """\
import torch
def compare(conv1, conv2, x):
    out1 = conv1(x)
    out2 = conv2(x)
    g = torch.rand_like(out1)
    out1.backward(g)
    out2.backward(g)
"""
    report = checked(source)
    assert report.findings == [] and report.rewritten is None  # two graphs, each backwarded once with a gradient


def test_unknown_retain_graph_is_not_freed():
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
def step(x, keep):
    loss = model(x).sum()
    loss.backward(retain_graph=keep)
    loss.backward()
"""
    report = checked(source)
    assert codes(report) == ["GF001"] and report.rewritten is None
    assert "gradfix cannot read" in report.findings[0].message


def test_unknown_call_between_backwards_blocks_the_merge():
    source = """\
import torch
import torch.nn as nn
from tools import inspect_gradients
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(3, 8, 4):
    out = model(x)
    a = out[:, 0].mean()
    b = out[:, 1].mean()
    opt.zero_grad()
    a.backward(retain_graph=True)
    inspect_gradients(model)
    b.backward()
    opt.step()
"""
    report = checked(source)
    assert report.rewritten is None


def test_guessed_wrapper_backward_licenses_no_fix():
    source = """\
import torch
import torch.nn as nn
from mylib import Wrapper
model = nn.Linear(4, 1)
engine = Wrapper(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(3, 8, 4):
    loss = model(x).pow(2).mean()
    engine.backward(loss)
    loss.backward()
    opt.step()
"""
    report = checked(source)
    assert "GF001" in codes(report)  # reported: engine.backward(loss) probably backwards loss
    assert report.rewritten is None and all(f.fix is None for f in report.findings)


def test_imported_function_given_a_loss_is_neither_backward_nor_not():
    source = """\
import torch
import torch.nn as nn
from helpers import maybe_backward
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(3, 8, 4):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    maybe_backward(loss)
    loss.backward()
    opt.step()
"""
    report = checked(source)
    assert report.findings == [] and report.rewritten is None


def test_conditional_backward_in_a_helper_is_not_a_duplicate():
    source = """\
import torch
import torch.nn as nn
def train_step(model, loss, opt, accumulate):
    if accumulate:
        loss.backward()
        return
    opt.zero_grad()
    loss.backward()
    opt.step()
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i, x in enumerate(torch.randn(4, 8, 4)):
    loss = model(x).pow(2).mean()
    train_step(model, loss, opt, i % 2 == 0)
"""
    report = checked(source)
    assert report.findings == [] and report.rewritten is None


def test_a_parameter_called_is_not_proved_a_forward():
    source = """\
import torch
def train(model, optimizer, batches, hidden):
    for x in batches:
        hidden = model(x, hidden)
        loss = hidden.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
    report = checked(source)
    assert report.rewritten is None


def test_a_parameter_every_call_passes_a_module_names_a_module():
    source = """\
import torch
import torch.nn as nn
def backward_twice(net, x):
    out = net(x).sum()
    out.backward()
    out.backward()
"""
    # net may be anything: gradfix sees no graph in `out`, and the finding is a hint
    alone = checked(source)
    assert alone.fixed == [] and [(f.code, f.hint) for f in alone.findings] == [("GF001", True)]
    called = checked(source + "backward_twice(make_net(), torch.randn(3, 2))\nlayer = nn.Linear(2, 1)\nbackward_twice(layer, torch.randn(3, 2))\n")
    assert called.fixed == [] and [(f.code, f.hint) for f in called.findings] == [("GF001", True)]  # one call passes an expression
    modules = checked(source + "layer = nn.Linear(2, 1)\nbackward_twice(layer, torch.randn(3, 2))\n")
    assert [(f.code, f.fix.value) for f in modules.fixed] == [("GF001", "safe")]
    built = checked(source + "backward_twice(nn.Linear(2, 1), torch.randn(3, 2))\n")
    assert [(f.code, f.fix.value) for f in built.fixed] == [("GF001", "safe")]  # a module built in the argument


def test_a_module_handed_to_an_unknown_call_may_be_trained():
    source = """\
import torch
import torch.nn as nn
from mylib import register_for_training
teacher = nn.Linear(4, 4)
student = nn.Linear(4, 4)
opt = torch.optim.SGD(student.parameters(), lr=0.1)
register_for_training(teacher)
x = torch.randn(8, 4)
target = teacher(x)
for step in range(3):
    loss = (student(x) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    handed = checked(source)
    assert codes(handed) == ["GF003"]  # recomputed each step: right whether or not the teacher trains
    assert ".detach()" not in handed.rewritten.decode()
    alone = checked(source.replace("register_for_training(teacher)\n", ""))
    assert codes(alone) == ["GF006"] and "target = teacher(x).detach()" in alone.rewritten.decode()


def test_a_torch_nn_class_not_listed_may_hold_parameters():
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 4)
head = nn.AdaptiveLogSoftmaxWithLoss(4, 10, cutoffs=[5])
opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
x = torch.randn(8, 4)
y = torch.randint(0, 10, (8,))
features = model(x).detach()
out = head(features, y)
for step in range(3):
    opt.zero_grad()
    out.loss.backward()
    opt.step()
"""
    report = checked(source)
    assert codes(report) == ["GF003"]  # the head's layer trains: `out` holds its graph


def test_an_unknown_iterable_gives_no_graph_to_act_on():
    source = """\
import torch
import torch.nn as nn
from mylib import loss_batches
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for loss in loss_batches(model):
    opt.zero_grad()
    loss.backward()
    loss.backward()
    opt.step()
"""
    report = checked(source)
    # A loader's item may be a leaf, or no tensor: gradfix sees no graph in it, and says so in a hint.
    assert report.fixed == [] and [(f.code, f.hint) for f in report.findings] == [("GF001", True)]
    assert "if it holds a graph" in report.findings[0].message


def test_a_stored_loss_stays_a_tensor():
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for x in torch.randn(3, 8, 4):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss)
print(torch.stack(losses).mean())
"""
    report = checked(source)
    assert "losses.append(loss.detach())" in report.rewritten.decode()


def test_an_unknown_function_of_a_graph_keeps_it():
    source = """\
import torch
import torch.nn as nn
from mylib import smooth
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
pred = smooth(model(x))
for step in range(3):
    loss = pred.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    report = checked(source)
    assert [(f.code, f.hint) for f in report.findings] == [("GF003", True)] and report.rewritten is None
    # With the function read (a tensor built from its argument), the bug is proved, and moved.
    read = checked(source.replace("from mylib import smooth\n", "def smooth(t):\n    return t * 0.5\n"))
    assert codes(read) == ["GF003"] and "    pred = smooth(model(x))" in read.rewritten.decode()


def test_a_state_through_an_imported_helper_is_not_rewritten():
    source = """\
import torch
import torch.nn as nn
from lm_utils import repackage_hidden
model = nn.LSTM(3, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
hidden = (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))
for segment in torch.randn(4, 5, 2, 3):
    hidden = repackage_hidden(hidden)
    optimizer.zero_grad()
    output, hidden = model(segment, hidden)
    output.pow(2).mean().backward()
    optimizer.step()
"""
    report = checked(source)
    assert codes(report) == ["GF004"] and report.rewritten is None
    assert report.findings[0].hint and "passes through `repackage_hidden`" in report.findings[0].message
    # The file's own helper that hands each tensor to the imported one: the same guess.
    wrapped = source.replace(
        "from lm_utils import repackage_hidden\n",
        "from lm_utils import detach_tensor\ndef repackage_hidden(h):\n    return tuple(detach_tensor(v) for v in h)\n",
    )
    report = checked(wrapped)
    assert [(f.code, f.hint, f.fix) for f in report.findings] == [("GF004", True, None)] and report.rewritten is None
    # Read to the end and not detaching, it is the bug.
    read = checked(wrapped.replace("from lm_utils import detach_tensor\n", "").replace("detach_tensor(v)", "v * 1"))
    assert [(f.code, f.hint) for f in [*read.findings, *read.fixed]] == [("GF004", False)]


def test_a_graph_carrying_object_is_not_a_tensor():
    # An optimizer of the file's own built from the parameters holds their graph, but its method
    # between two backwards may read the first gradient: no safe merge across it.
    source = """\
import torch
import torch.nn as nn
class Ascent:
    def __init__(self, params):
        self.params = list(params)
    @torch.no_grad()
    def perturb(self):
        for p in self.params:
            p.add_(p.grad)
net = nn.Linear(3, 2)
ascent = Ascent(net.parameters())
out = net(torch.ones(4, 3))
out.sum().backward()
ascent.perturb()
out.pow(2).sum().backward()
"""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert codes(report) == ["GF002"] and report.rewritten is None


def test_a_cached_attribute_is_detached_only_unsafely():
    source = """\
import torch
import torch.nn as nn
class Cached(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, 3))
        self.cache = None
    def forward(self, x):
        if self.cache is not None:
            weights = self.cache
        else:
            weights = self.weight.softmax(-1)
            self.cache = weights
        return x @ weights
model = Cached()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
"""
    safe = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in safe.findings] == ["GF004"] and safe.rewritten is None
    assert codes(checked(source)) == ["GF004"] and b"self.cache = weights.detach()" in checked(source).rewritten


def test_an_item_of_an_output_tuple_is_not_proved_to_hold_its_graph():
    source = """\
import torch
from models import Generator, Discriminator
net_g, net_d = Generator(), Discriminator()
optim_g = torch.optim.AdamW(net_g.parameters())
optim_d = torch.optim.AdamW(net_d.parameters())
for x, y in loader:
    y_hat, ids_slice = net_g(x)
    y = torch.mul(y, ids_slice)
    loss_disc = net_d(y).mean() - net_d(y_hat.detach()).mean()
    optim_d.zero_grad()
    loss_disc.backward()
    optim_d.step()
    loss_gen = -net_d(y_hat).mean() + (net_d(y) - 1).pow(2).mean()
    optim_g.zero_grad()
    loss_gen.backward()
    optim_g.step()
"""
    report = checked(source)
    assert codes(report) == ["GF002"] and report.rewritten is None  # ``y`` may hold no generator graph: reported, no y.detach()
    # The same code with the generator's output read whole, and the networks' classes read.
    proved = source.replace("from models import Generator, Discriminator\n", "").replace(
        "Generator(), Discriminator()", "nn.Linear(4, 4), nn.Linear(4, 1)"
    )
    proved = "import torch.nn as nn\n" + proved.replace("y_hat, ids_slice = net_g(x)", "y_hat = net_g(x)\n    ids_slice = y_hat")
    assert "GF005" in codes(checked(proved))


def test_a_loop_calling_unread_code_may_change_the_parameters():
    source = """\
import torch
import torch.nn as nn
from helpers import accumulate
model = nn.Linear(4, 3)
x = torch.randn(5, 4)
logits = model(x)
for k in range(3):
    logits[:, k].sum().backward(retain_graph=True)
    accumulate(model)
"""
    report = checked(source)
    assert codes(report) == ["GF003"] and report.rewritten is None  # (reported, not rewritten)
    pure = source.replace("    accumulate(model)\n", "    print(k)\n")
    assert codes(checked(pure)) == []  # (nothing changes the parameters: one kept graph is right)
    stepping = source.replace("    accumulate(model)\n", "    optimizer.step()\n").replace(
        "model = nn.Linear(4, 3)\n", "model = nn.Linear(4, 3)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    assert "GF003" in codes(checked(stepping)) and checked(stepping).rewritten is not None  # (the unsafe move)


def test_a_graph_handed_to_another_package_may_be_backwarded():
    # https://github.com/learnables/learn2learn/blob/db5cee3795490071282bbdfa81179ef732349196/examples/rl/maml_trpo.py
    source = """\
import torch
import torch.nn as nn
from cherry.algorithms import trpo
policy = nn.Linear(4, 2)
params = list(policy.parameters())
for step in range(3):
    out = policy(torch.randn(8, 4))
    loss, kl = out.pow(2).mean(), out.exp().mean()
    grads = torch.autograd.grad(loss, params, retain_graph=True)
    Fvp = trpo.hessian_vector_product(kl, params)
"""
    report = checked(source)
    assert report.findings == [] and report.rewritten is None  # the package's function may backward kl through the shared forward
    assert codes(checked(source.replace("trpo.hessian_vector_product(kl, params)", "kl.item()"))) == ["GF009"]


def test_an_import_python_may_resolve_elsewhere_is_unread(tmp_path):
    from gradfix.codemods.check import check_file

    (tmp_path / ".git").mkdir()
    (tmp_path / "pkg").mkdir()
    helper = "import torch.nn.functional as F\ndef compute(model, x, y):\n    loss = F.mse_loss(model(x), y)\n    loss.backward()\n    return loss\n"
    (tmp_path / "pkg" / "losses.py").write_text(helper)
    script = tmp_path / "pkg" / "train.py"
    script.write_text(
        "from losses import compute\nimport torch\nmodel = torch.nn.Linear(2, 1)\n"
        "loss = compute(model, torch.ones(2), torch.zeros(1))\nloss.backward()\n"
    )
    assert codes(check_file(script, all_rules(), FixMode.UNSAFE)) == ["GF001"]  # one file holds it: read
    (tmp_path / "losses.py").write_text(helper.replace("    loss.backward()\n", ""))
    assert codes(check_file(script, all_rules(), FixMode.UNSAFE)) == []  # two roots hold it: unread


def test_a_method_of_self_a_subclass_replaces_is_unread():
    from .test_method_dispatch import QUIET, STEP

    run = "\nStep().train(torch.randn(8, 4))"
    assert codes(checked(STEP.replace("SUBCLASS", "").replace("RUN", run))) == ["GF001"]  # `Step.run` backwards: the second call fails
    assert codes(checked(STEP.replace("SUBCLASS", QUIET).replace("RUN", run))) == []  # `self` may be a `Quiet`, whose `run` does not


def test_a_function_its_name_may_not_hold_is_unread():
    template = """\
import torch
import torch.nn as nn
def step(loss):
    loss.backward()
{bound}
model = nn.Linear(4, 1)
loss = model(torch.randn(8, 4)).sum()
step(loss)
loss.backward()
"""
    assert codes(checked(template.format(bound=""))) == ["GF001"]  # `step` backwards: the second call fails
    assert codes(checked(template.format(bound="step = print"))) == []  # `step` is `print` when it is called


def test_a_name_one_path_binds_to_another_callable_is_unread():
    template = """\
import torch
import torch.nn.functional as F
def step(exact, criterion):
    w = torch.randn(5, requires_grad=True)
    cost = F.mse_loss if exact else {other}
    loss = cost(w + 1.0, torch.ones(5))
    loss.backward()
    loss.backward()
"""
    assert [f.code for f in _safe(template.format(other="F.l1_loss")).fixed] == ["GF001"]  # (both save their inputs)
    for other in ("criterion", "torch.sub"):  # unread; saving nothing
        report = _safe(template.format(other=other))
        assert [f.code for f in report.findings] == ["GF001"] and not report.fixed


def test_a_dict_item_after_the_dict_escapes_is_a_guess():
    template = """\
import torch
from logs import record
w = torch.randn(5, requires_grad=True)
losses = {{"loss": (w * 2).sum()}}
losses["loss"].backward()
{between}
losses["loss"].backward()
"""
    assert [f.code for f in _safe(template.format(between="pass")).fixed] == ["GF001"]
    for between in ("record(losses)", "kept = losses", "losses.update(loss=(w * 3).sum())", "losses[record] = (w * 3).sum()"):
        report = _safe(template.format(between=between))
        assert not report.fixed, between


def test_a_value_stored_into_a_shared_container_escapes():
    template = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
store = []
{alias}
loss = model(torch.randn(8, 4)).sum()
store.append(loss)
loss.backward(retain_graph=True)
"""
    fixes = [f.code for f in check_source(template.format(alias="").encode(), all_rules(), FixMode.SAFE, "train.py").fixed]
    assert fixes == ["GF009"]  # nothing backwards the kept loss again
    aliased = template.format(alias="alias = store") + "alias[0].backward()\n"
    assert check_source(aliased.encode(), all_rules(), FixMode.SAFE, "train.py").fixed == []  # `alias[0]` is the kept loss


def test_a_detaching_helper_returns_no_graph():
    source = """\
import torch
import torch.nn as nn
def detach_all(state):
    return tuple(s.detach() for s in state)
rnn = nn.LSTMCell(4, 4)
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
state = (torch.zeros(2, 4), torch.zeros(2, 4))
for x in torch.randn(5, 2, 4):
    state = detach_all(state)
    state = rnn(x, state)
    loss = state[0].pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    report = checked(source)
    assert report.findings == []
    undetached = checked(source.replace("    state = detach_all(state)\n", ""))
    assert codes(undetached) == ["GF004"]
    # torch-light's repackage_hidden: a new tensor of each one's data, the tuples by calling itself;
    # what makes no graph is read from torch's tables, as the dataflow reads them
    recursive = """\
def detach_all(state):
    if isinstance(state, torch.Tensor):
        return {leaf}
    return tuple(detach_all(s) for s in state)
"""
    for leaf in (
        "Variable(state.data)",
        "state.data",
        "torch.zeros_like(state)",
        "state.detach()",
        "state.data.clone()",
        "Variable(state.data).cuda()",
    ):
        written = source.replace("def detach_all(state):\n    return tuple(s.detach() for s in state)\n", recursive.format(leaf=leaf))
        assert codes(checked("from torch.autograd import Variable\n" + written)) == [], leaf
    for leaf in ("state * 1", "state.clone()"):
        kept = checked(source.replace("def detach_all(state):\n    return tuple(s.detach() for s in state)\n", recursive.format(leaf=leaf)))
        assert [f.code for f in kept.findings] == ["GF004"], leaf  # (its own call is not read to the end: a hint)


def test_a_helper_returning_a_number_returns_no_graph():
    source = """\
import torch
import torch.nn as nn
def accuracy(pred, target):
    return float((pred.argmax(1) == target).sum().item()) / len(pred)
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0
for x, y in [(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 3:
    pred = model(x)
    acc = accuracy(pred, y)
    total += acc
    optimizer.zero_grad()
    nn.functional.cross_entropy(pred, y).backward()
    optimizer.step()
"""
    assert checked(source).findings == [] and checked(source).rewritten is None


def test_requires_grad_makes_a_leaf():
    source = """\
import torch
import torch.nn as nn
x = torch.randn(8, 4)
w = torch.randn(4, 1)
w.requires_grad_()
opt = torch.optim.SGD([w], lr=0.1)
pred = x @ w
for step in range(3):
    loss = pred.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    report = checked(source)
    assert codes(report) == ["GF003"]
    assert codes(checked(source.replace("w.requires_grad_()\n", ""))) == []


def test_indices_and_comparisons_hold_no_graph():
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
correct, picked = 0, []
for x, y in [(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 3:
    logits = model(x)
    _, predicted = logits.max(1)
    correct += torch.eq(predicted, y).sum().float()
    picked.append(torch.multinomial(logits.softmax(-1), 1))
    optimizer.zero_grad()
    nn.functional.cross_entropy(logits, y).backward()
    optimizer.step()
"""
    assert checked(source).findings == [] and checked(source).rewritten is None
    assert codes(checked(source.replace("torch.eq(predicted, y).sum().float()", "logits.sum()"))) == ["GF007"]


def test_numbers_arrays_and_variables_hold_no_graph():
    source = """\
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable
from envs import env
policy = nn.Linear(4, 2)
optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)

def act(logits, epsilon):
    if np.random.rand() < epsilon:
        return np.random.choice(2)
    return logits.detach().numpy().squeeze(0).argmax()

rewards, baselines = [], []
for step in range(3):
    logits = policy(torch.randn(1, 4))
    reward = env.step(act(logits, 0.1))
    rewards.append(reward)
    baselines.append(Variable(logits))
    optimizer.zero_grad()
    logits.sum().backward()
    optimizer.step()
"""
    assert checked(source).findings == [] and checked(source).rewritten is None
    assert codes(checked(source.replace("Variable(logits)", "logits"))) == ["GF007"]
    # An environment's reward given a graph-carrying action may hold its graph, or be a number: a hint, not rewritten.
    report = checked(source.replace("return np.random.choice(2)", "return logits"))
    assert [(f.code, f.hint) for f in report.findings] == [("GF007", True)] and report.rewritten is None
    assert "`reward` may hold no graph" in report.findings[0].message


def test_a_graph_of_sums_of_leaves_is_not_freed():
    source = """\
import torch
weights = [torch.randn(3, requires_grad=True) for _ in range(2)]
total = sum(w.sum() for w in weights)
gradients = torch.autograd.grad(total, weights)
total.backward()
"""
    assert checked(source).findings == []
    assert codes(checked(source.replace("w.sum()", "(w * w).sum()"))) == ["GF001"]


def test_an_exhaustive_if_chain_hides_the_earlier_value():
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.randn(8, 4)).sum()
for step, mode in enumerate(["a", "b", "a"]):
    out = model(torch.randn(8, 4))
    if mode == "a":
        loss = out[:, 0].mean()
    elif mode == "b":
        loss = out[:, 1].mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    report = checked(source)
    assert report.findings == []  # the loss from before the loop is taken to be replaced by the chain


def test_a_hook_in_the_file_makes_the_merge_report_only():
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 2)
for p in model.parameters():
    p.register_hook(lambda g: g.clamp(-0.1, 0.1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(3, 8, 4):
    out = model(x)
    a = out[:, 0].mean()
    b = out[:, 1].mean()
    opt.zero_grad()
    a.backward()
    b.backward()
    opt.step()
"""
    report = checked(source)
    assert codes(report) == ["GF002"] and report.rewritten is None
    assert codes(checked(re.sub(r"for p in .*\n.*\n", "", source))) == ["GF002"]
    assert checked(re.sub(r"for p in .*\n.*\n", "", source)).rewritten is not None


def test_a_frozen_module_adds_no_graph_at_any_call():
    source = """\
import torch
import torch.nn as nn
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)
    def forward(self, x):
        return self.layer(x)
encoder = Encoder()
head = nn.Linear(4, 1)
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
features = encoder(torch.randn(8, 4))
for p in encoder.parameters():
    p.requires_grad = False
for step in range(3):
    loss = head(features).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    assert checked(source).findings == []  # (run as written, the first backward frees the encoder's graph: a miss)
    assert codes(checked(source.replace("for p in encoder.parameters():\n    p.requires_grad = False\n", ""))) == ["GF006"]


def test_unread_code_handed_nothing_of_autograd_leaves_the_fix_safe():
    template = """\
import torch
import torch.nn as nn
import helpers
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
config = helpers.load_config("train.yaml")
for step in range(3):
    optimizer.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward(retain_graph=True)
    {handed}
    optimizer.step()
"""
    alone = check_source(template.format(handed="helpers.log_step(step)").encode(), all_rules(), FixMode.SAFE, "train.py")
    given = check_source(template.format(handed="helpers.log_step(loss)").encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in alone.fixed] == ["GF009"]  # handed a number: nothing of the graph reaches it
    assert given.fixed == [] and not given.changed  # handed the loss: it may backward it


def test_a_detach_is_safe_only_where_the_backward_runs_every_iteration():
    template = """\
import torch
import torch.nn as nn
cell = nn.RNNCell(3, 4)
optimizer = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(2, 4)
for step in range(6):
    h = cell(torch.randn(2, 3), h)
{backward}
"""
    every = "    optimizer.zero_grad()\n    h.pow(2).mean().backward()\n    optimizer.step()"
    some = "    if step % 3 == 2:\n        optimizer.zero_grad()\n        h.pow(2).mean().backward()\n        optimizer.step()"
    assert [f.code for f in check_source(template.format(backward=every).encode(), all_rules(), FixMode.SAFE, "train.py").fixed] == ["GF004"]
    report = check_source(template.format(backward=some).encode(), all_rules(), FixMode.SAFE, "train.py")
    assert report.fixed == [] and [(f.code, f.fix.value) for f in report.findings] == [("GF004", "unsafe")]


def test_a_value_kept_from_unread_code_is_a_hint():
    template = """\
import torch
import torch.nn as nn
{helper}
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for x in torch.randn(3, 4, 3):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    train_loss, val_loss = evaluate_model(model, x)
    history.append(train_loss)
"""
    unread = checked(template.format(helper="from previous_chapters import evaluate_model"))
    read = checked(template.format(helper="def evaluate_model(model, x):\n    return model(x).mean(), model(x).abs().mean()\n"))
    assert [(f.code, f.hint, f.fix) for f in unread.findings] == [("GF007", True, None)]
    assert [(f.code, f.hint) for f in [*read.findings, *read.fixed]] == [("GF007", False)]


def test_items_of_one_call_share_only_what_their_callee_builds_in_common():
    template = """\
import torch
import torch.nn as nn
{helper}
encoder, policy, critic = nn.Linear(3, 3), nn.Linear(3, 1), nn.Linear(3, 1)
optimizer = torch.optim.SGD([*encoder.parameters(), *policy.parameters(), *critic.parameters()], lr=0.1)
for x in torch.randn(3, 4, 3):
    policy_loss, critic_loss = losses(x)
    optimizer.zero_grad()
    policy_loss.backward()
    critic_loss.backward()
    optimizer.step()
"""
    separate = checked(template.format(helper="def losses(x):\n    return policy(x).mean(), critic(x).pow(2).mean()\n"))
    shared = checked(template.format(helper="def losses(x):\n    h = encoder(x)\n    return policy(h).mean(), critic(h).pow(2).mean()\n"))
    unread = checked(template.format(helper="from rl_utils import losses").replace("losses(x)", "losses(encoder(x))"))
    assert codes(separate) == []
    assert codes(shared) == ["GF002"] and not [*shared.findings, *shared.fixed][0].hint
    assert [(f.code, f.hint) for f in unread.findings] == [("GF002", True)] and unread.rewritten is None
    # bentrevett's n-step A2C: an episode's actor and critic outputs returned with its total reward,
    # a number an environment gave (code gradfix did not read, handed no graph): that item holds
    # nothing to share, and the losses stay apart.
    with_a_reward = template.replace("    policy_loss, critic_loss = losses(x)", "    policy_loss, critic_loss, reward = losses(x)")
    reward = (
        "from gym_utils import env_reward\ndef losses(x):\n    h = {input}\n    return policy(h).mean(), critic(h).pow(2).mean(), env_reward(0)\n"
    )
    separate = checked(with_a_reward.format(helper=reward.format(input="x")))
    shared = checked(with_a_reward.format(helper=reward.format(input="encoder(x)")))
    through_the_argument = checked(with_a_reward.format(helper=reward.format(input="x")).replace("= losses(x)", "= losses(encoder(x))"))
    assert codes(separate) == []
    assert codes(shared) == codes(through_the_argument) == ["GF002"]


def test_an_attribute_no_backward_reads_again_is_a_hint():
    template = """\
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)
        self.outputs = []
    def forward(self, x):
        y = self.fc(x).mean()
        self.outputs.append(y)
        return {returned}
model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(3, 4, 3):
    loss = model(x)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    kept = [f for f in checked(template.format(returned="y")).findings if f.code == "GF004"]
    read_again = [f for f in checked(template.format(returned="y + sum(self.outputs)")).findings if f.code == "GF004"]
    assert [f.hint for f in kept] == [True]
    assert [f.hint for f in read_again] == [False]


def test_every_entry_of_the_list_has_its_test_and_every_test_its_entry():
    from pathlib import Path

    listed = re.findall(r"\*Test:\* `(\w+)`", (Path(__file__).parents[1] / "codemods" / "analysis" / "UNKNOWNS.md").read_text())
    defined = [
        name[5:] for name in globals() if name.startswith("test_") and name != "test_every_entry_of_the_list_has_its_test_and_every_test_its_entry"
    ]
    assert listed == defined
