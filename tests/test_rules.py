"""Every rule's declared metadata and documentation example hold: `explain` shows what `fix` does."""

import subprocess
import sys
from pathlib import Path

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods import rule as rule_module
from gradfix.codemods.registry import RULE_MODULES, all_rules, rule_codes, select_rules

RULES = all_rules()
HEADER = b"import torch\nimport torch.nn as nn\n"


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_example_before_is_rewritten_into_example_after(rule):
    before = HEADER + rule.EXAMPLE_BEFORE.encode()
    report = check_source(before, [rule], FixMode.UNSAFE if rule.FIX and rule.FIX.value == "unsafe" else FixMode.SAFE)
    if rule.FIX is None:  # a rule that only reports: its example is reported and left as it is
        assert [f.code for f in report.findings] == [rule.CODE] and rule.EXAMPLE_AFTER == rule.EXAMPLE_BEFORE
        assert not report.changed
        return
    assert [f.code for f in report.fixed] == [rule.CODE]
    assert report.rewritten == HEADER + rule.EXAMPLE_AFTER.encode()


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_metadata(rule):
    assert rule.CODE.startswith("GF") and len(rule.CODE) == 5
    assert rule.__module__.rsplit(".", 1)[1] == f"{rule.CODE.lower()}_{rule.NAME}"
    assert rule.SUMMARY and len(rule.documentation().splitlines()) > 5


def test_codes_are_unique_and_prefix_selection_works():
    codes = [rule.CODE for rule in RULES]
    assert len(codes) == len(set(codes))
    assert [r.CODE for r in select_rules(["gf002"])] == ["GF002"]
    assert [r.CODE for r in select_rules(None, ["GF002"])] == [c for c in codes if c != "GF002"]


def test_the_registry_names_every_rule_class_and_module_under_its_code():
    package = Path(rule_module.__file__).parent / "rules"
    modules = {path.stem for path in package.glob("*.py")} - {"__init__"}
    assert {f"{code.lower()}_{name}" for code, name in RULE_MODULES.items()} == modules
    assert {rule.CODE: rule.NAME for rule in RULES} == RULE_MODULES
    assert rule_codes(select_rules(["GF00"], ["GF002"])) == rule_codes([r for r in RULES if r.CODE.startswith("GF00") and r.CODE != "GF002"])


def test_a_selection_imports_no_rule_until_used():
    probe = "import sys; from gradfix.codemods.registry import select_rules; s = select_rules(['GF001']); "
    probe += "print('libcst' in sys.modules, len(s)); s[0]; print('libcst' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["False", "1", "True"]


def test_the_plain_data_a_cached_run_reads_loads_no_libcst_and_the_analysis_door_does():
    probe = "import sys; import gradfix.codemods.cache, gradfix.codemods.source, gradfix.codemods.frameworks, "
    probe += "gradfix.codemods.summaries; print('libcst' in sys.modules); import gradfix.codemods.analysis; "
    probe += "print('libcst' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["False", "True"]


def _findings(code: str, mode=FixMode.SAFE):
    return check_source(HEADER + code.encode(), all_rules(), mode, "train.py")


def test_a_call_wrapping_an_optimizer_step_between_backwards_is_no_internal_error():
    report = _findings(
        "encoder = nn.Linear(3, 4)\nhead_a, head_b = nn.Linear(4, 1), nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)\nlog = print\n"
        "z = encoder(torch.ones(3))\nloss_a = head_a(z).sum()\nloss_b = head_b(z).sum()\n"
        "loss_a.backward()\nlog(optimizer.step())\nloss_b.backward()\n",
        FixMode.UNSAFE,
    )
    assert report.internal_errors == [] and report.rewritten is None
    assert [f.code for f in report.findings] == ["GF002"]


def test_a_reset_in_an_unrelated_class_does_not_silence_carried_state():
    code = (
        "class Cell(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.rnn = nn.RNNCell(2, 2)\n"
        "        self.state = torch.zeros(1, 2)\n"
        "    def forward(self, x):\n        self.state = self.rnn(x, self.state)\n        return self.state\n"
        "class Logger:\n    def reset(self):\n        self.state = None\n"
        "cell = Cell()\nfor x in torch.ones(3, 1, 2):\n    cell(x).sum().backward()\n"
    )
    assert "GF004" in [f.code for f in _findings(code).findings + _findings(code).fixed]


def test_accelerator_and_fabric_backward_are_never_read_as_a_tensor_backwarded_twice():
    code = (
        "from accelerate import Accelerator\naccelerator = Accelerator()\n"
        "gen, disc = nn.Linear(2, 2), nn.Linear(2, 1)\n"
        "for x in torch.ones(3, 2):\n"
        "    d_loss = disc(gen(x).detach()).sum()\n    accelerator.backward(d_loss)\n"
        "    g_loss = -disc(gen(x)).sum()\n    accelerator.backward(g_loss)\n"
    )
    report = _findings(code, FixMode.UNSAFE)
    assert report.findings == [] and report.rewritten is None


_PRIOR_LOSS_LOOP = """
model = nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    out = model(batch)
    if {first}:
        prior = out.pow(2).mean()
    loss = out.mean()
    if {second}:
        loss = loss + prior
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    ("first", "second", "reported"),
    [
        ("args.with_prior", "args.with_prior", False),  # the same flag both times: always this step's
        # The first false, no iteration assigns it: the read is never a previous iteration's value.
        ("args.with_prior", "args.other_flag", False),
        ("batch.sum() > 0", "args.with_prior", True),  # the loop's own variable: a test answered anew each time
        ("random.random() < 0.5", "random.random() < 0.5", True),  # a call answers anew each time
        ("out.sum() > 0", "out.sum() > 0", True),  # reads what the loop writes
    ],
)
def test_gf004_a_value_read_only_under_the_test_that_assigned_it_is_not_carried(first, second, reported):
    report = _findings(_PRIOR_LOSS_LOOP.format(first=first, second=second), FixMode.NONE)
    assert ("GF004" in [f.code for f in report.findings]) is reported


@pytest.mark.parametrize(
    "before_the_loop",
    [
        # diffusers' train_dreambooth_colossalai.py: an optimizer class built around the model
        "optimizer = GeminiAdamOptimizer(unet, lr=1e-3)",
        # diffusers' train_cm_ct_unconditional.py: a number from the model's configuration
        "huber_c = 0.00054 * math.sqrt(unwrap_model(unet).config.in_channels)",
    ],
)
def test_gf003_objects_and_numbers_made_from_a_model_before_the_loop_carry_no_graph(before_the_loop):
    code = f"""import math
unet = nn.Linear(4, 4)
optimizer, huber_c = torch.optim.SGD(unet.parameters(), lr=0.1), 0.1
{before_the_loop}
for batch in loader:
    pred = unet(batch)
    loss = ((pred - batch) ** 2 + huber_c**2).mean()
    optimizer.backward(loss)
    optimizer.step()
"""
    report = _findings(code, FixMode.NONE)
    assert [f.code for f in report.findings] == []


@pytest.mark.parametrize(
    ("step", "fixed"),
    [
        ("state = state * decay", False),  # issue 13: the detach would leave nothing that requires grad
        ("state = cell(torch.randn(1, 2)) + state * decay", True),  # the cell's parameters are left
    ],
)
def test_gf004_detaches_only_where_the_iteration_leaves_something_to_backward(step, fixed):
    code = f"""cell = nn.Linear(2, 2)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
decay = 0.5
state = cell(torch.randn(1, 2))
for i in range(3):
    {step}
    state.sum().backward()
    opt.step()
    opt.zero_grad()
"""
    report = check_source(HEADER + code.encode(), select_rules(["GF004"]), FixMode.SAFE, "train.py")
    assert [f.code for f in report.fixed + report.findings] == ["GF004"]
    assert bool(report.fixed) is fixed
    if not fixed:
        assert "not rewritten: once detached, nothing the iteration computes would require grad" in report.findings[0].message


@pytest.mark.parametrize(
    ("after_each_backward", "finding"),
    [
        ("", None),  # full backpropagation through time, one step after the loop: left alone
        ("opt.step()", "unsafe"),  # every step walks graphs built with parameters it has changed since
    ],
)
def test_gf004_on_graphs_kept_by_retain_graph(after_each_backward, finding):
    code = f"""cell = nn.RNNCell(2, 2)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(1, 2)
opt.zero_grad()
for x in torch.randn(3, 1, 2):
    h = cell(x, h)
    h.sum().backward(retain_graph=True)
    {after_each_backward}
opt.step()
"""
    report = check_source(HEADER + code.encode(), select_rules(["GF004"]), FixMode.SAFE, "train.py")
    assert not report.changed
    assert [f.fix.value if f.fix else None for f in report.findings] == ([finding] if finding else [])


def test_gf004_says_what_detaching_the_last_call_output_changes():
    """`self.prev = y_hat`, read by the next call's loss, is no cache: the message says what
    detaching it stops training, not that the value is stored once (a review of pytorch_tabular)."""
    code = """class Smooth(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.prev = None

    def forward(self, x):
        y_hat = self.net(x)
        loss = y_hat.pow(2).mean()
        if self.prev is not None:
            loss = loss + (y_hat - self.prev).pow(2).mean()
        self.prev = y_hat
        return loss


model = Smooth()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(2, 4))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    report = check_source(HEADER + code.encode(), select_rules(["GF004"]), FixMode.SAFE, "train.py")
    [finding] = report.findings
    assert "the last call's output kept for the next): detached, the loss that reads it no longer trains what built it" in finding.message
    assert "after the first call" not in finding.message


def test_gf004_says_why_a_state_the_call_returns_is_not_detached_where_stored():
    code = """class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.RNNCell(3, 4)
        self.h = torch.zeros(2, 4)

    def forward(self, x):
        self.h = self.cell(x, self.h)
        return self.h


model = Stateful()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(2, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    report = check_source(HEADER + code.encode(), select_rules(["GF004"]), FixMode.UNSAFE, "train.py")
    [finding] = report.findings
    assert not report.fixed
    assert "(not rewritten: this call reads `self.h` after storing it" in finding.message


def test_gf002_does_not_merge_across_a_method_of_the_files_own_optimizer_that_reads_gradients():
    """An object built from parameters holds their graph, but is no tensor: its method between
    the backwards (SAM's ascent step reads every .grad) is code that reads the first gradient."""
    import gradfix

    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Perturbing:\n"
        "    def __init__(self, params):\n"
        "        self.params = list(params)\n"
        "        self.base = torch.optim.SGD(self.params, lr=0.1)\n"
        "    @torch.no_grad()\n"
        "    def ascend(self):\n"
        "        for p in self.params:\n"
        "            p.add_(p.grad)\n"
        "        self.base.zero_grad()\n\n"
        "net = nn.Linear(3, 2)\noptimizer = Perturbing(net.parameters())\n"
        "out = net(torch.ones(4, 3))\nloss = out.sum()\nloss.backward()\noptimizer.ascend()\nout.pow(2).sum().backward()\n"
    )
    safe = gradfix.fix(source)
    assert not safe.changed and [f.code for f in safe.findings] == ["GF002"]
    unsafe = gradfix.fix(source, unsafe_fixes=True)
    assert unsafe.source.endswith("optimizer.ascend()\nnet(torch.ones(4, 3)).pow(2).sum().backward()\n")


def test_gf006_does_not_compute_again_an_expression_that_makes_a_parameter():
    """``self.scale = torch.exp(nn.Parameter(...))`` computed in ``forward`` would be a new,
    untrained parameter at every call: only a value built from existing state moves."""
    import gradfix

    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class ScaledLinear(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.linear = nn.Linear(4, 1)\n"
        "        self.scale = torch.exp(nn.Parameter(torch.zeros(1)))\n\n"
        "    def forward(self, x):\n"
        "        return self.linear(x) * self.scale\n\n"
        "model = ScaledLinear()\noptimizer = torch.optim.Adam(model.parameters(), lr=0.1)\n"
        "for epoch in range(3):\n"
        "    optimizer.zero_grad()\n"
        "    model(torch.randn(16, 4)).sum().backward()\n"
        "    optimizer.step()\n"
    )
    result = gradfix.fix(source, unsafe_fixes=True)
    assert not result.changed and [f.code for f in result.findings] == ["GF006"]


@pytest.mark.parametrize("adding", ["loss += part", "loss = loss + part"])
def test_a_sum_kept_adding_to_after_its_backward_starts_afresh_whichever_way_it_is_written(adding):
    source = f"""\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
loss = 0
for t in range(2):
    part = model(x).pow(2).mean()
    {adding}
loss.backward()
optimizer.step()
for t in range(2):
    part = model(x).abs().mean()
    {adding}
loss.backward()
"""
    report = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py")
    assert b"loss.backward()\nloss = loss.detach()\noptimizer.step()" in report.rewritten


@pytest.mark.parametrize(
    ("writer", "reported"),
    [
        ("from torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter('runs')", True),  # a logger only reads
        ("from logs import Writer\nwriter = Writer('runs')", False),  # an object gradfix cannot read may keep the loss
    ],
)
def test_gf009_a_loss_logged_to_a_tensorboard_writer_is_not_kept(writer, reported):
    # https://github.com/sweetice/Deep-reinforcement-learning-with-pytorch/blob/7b9fac7e5e40ffdc6f7ccb8b0a81e7841370a996/Char09%20SAC/SAC.py
    source = f"""\
import torch
import torch.nn as nn
{writer}
value, critic = nn.Linear(3, 1), nn.Linear(3, 1)
optimizer = torch.optim.Adam([*value.parameters(), *critic.parameters()])
for step in range(3):
    state = torch.randn(4, 3)
    value_loss = value(state).pow(2).mean()
    critic_loss = critic(state).pow(2).mean()
    writer.add_scalar("loss/value", value_loss, global_step=step)
    optimizer.zero_grad()
    value_loss.backward(retain_graph=True)
    critic_loss.backward()
    optimizer.step()
"""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in (*report.fixed, *report.findings)] == (["GF009"] if reported else [])
    assert (b"value_loss.backward()\n" in (report.rewritten or b"")) is reported


@pytest.mark.parametrize(("stored", "reported"), [("sum(rewards)", False), ("policy(state).sum() / len(rewards)", True)])
def test_gf007_an_expression_stored_is_reported_only_when_its_graph_is_proved(stored, reported):
    # https://github.com/udacity/deep-reinforcement-learning/blob/561eec3ae8678a23a4557f1a15414a9b076fdfff/reinforce/REINFORCE.ipynb
    source = f"""\
import torch
import torch.nn as nn
from agents import act, env
policy = nn.Linear(4, 2)
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
scores = []
for episode in range(3):
    log_probs, rewards = [], []
    state = torch.randn(4)
    for t in range(5):
        action, log_prob = act(policy, state)  # (an imported helper: which item holds the graph is a guess)
        log_probs.append(log_prob)
        state, reward, done, _ = env.step(action)
        rewards.append(reward)
    loss = -torch.stack(log_probs).sum() * sum(rewards)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scores.append({stored})
"""
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert [f.code for f in report.findings] == (["GF007"] if reported else [])


@pytest.mark.parametrize(
    ("update", "reported"),
    [
        ("fast = [w - 0.1 * g for w, g in zip(fast, grads)]", False),  # the fast weights hold every step's loss anyway
        ("fast = [(w - 0.1 * g).detach().requires_grad_() for w, g in zip(fast, grads)]", True),  # cut: only the list keeps them
    ],
)
def test_gf007_a_loss_the_carried_fast_weights_hold_anyway_is_not_reported(update, reported):
    # https://github.com/facebookresearch/higher/blob/15a247ac06cac0d22601322677daff0dcfff062e/tests/test_higher.py
    source = f"""\
import torch
import torch.nn.functional as F
weights = [torch.randn(4, 3, requires_grad=True)]
probe = torch.nn.Linear(4, 3)
probe_optimizer = torch.optim.SGD(probe.parameters(), lr=0.1)
fast = list(weights)
inner_losses = []
for step in range(4):
    x, y = torch.randn(8, 4), torch.randn(8, 3)
    loss = F.mse_loss(x @ fast[0], y)
    grads = torch.autograd.grad(loss, fast, create_graph=True)
    inner_losses.append(loss)
    {update}
    probe_optimizer.zero_grad()
    F.mse_loss(probe(x), y).backward()
    probe_optimizer.step()
F.mse_loss(torch.randn(8, 4) @ fast[0], torch.randn(8, 3)).backward()
"""
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert [f.code for f in report.findings] == (["GF007"] if reported else [])


def test_gf007_leaves_a_store_that_the_iterations_own_loss_is_computed_from():
    # (the shape of tests/fixtures/gf004_carried_state/stored_states_list: `states.append(h.detach())`
    # would stop the loss, computed from the stack of states, from training the cell at all)
    source = """\
import torch
import torch.nn as nn
cell = nn.Linear(3, 4)
head = nn.Linear(4, 1)
optimizer = torch.optim.SGD([*cell.parameters(), *head.parameters()], lr=0.1)
states = []
for step in range(5):
    h = cell(torch.randn(1, 3))
    states.append(h)
    loss = head(torch.stack(states).mean(0)).pow(2).sum()
    optimizer.zero_grad()
    loss.backward(retain_graph=True)
    optimizer.step()
"""
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert [f.code for f in report.findings] == ["GF004"]


def test_gf010_names_a_freeing_backward_that_can_run_before_not_one_in_the_other_branch():
    # https://github.com/NVIDIA/pix2pixHD/blob/14b3b3c7fff413086e3b58df52096f16b6891172/train.py
    source = """\
import torch
import torch.nn as nn
model = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
fp16 = False
for step in range(3):
    out = model(torch.randn(2, 4))
    loss_g, loss_d = out.pow(2).mean(), out.abs().mean()
    if fp16:
        (loss_g * 2).backward()
    else:
        loss_g.backward()
    if fp16:
        (loss_d * 2).backward()
    else:
        loss_d.backward()
    opt.step()
"""
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert [(f.code, f.line) for f in report.findings] == [("GF010", 14), ("GF010", 16)]
    assert ["line 10" in report.findings[0].message, "line 12" in report.findings[1].message] == [True, True]


def test_gf004_reports_a_kept_buffer_a_helper_method_writes_graph_carrying_items_into():
    # https://github.com/facebookresearch/moco/blob/132aea9da9bb995a411c915c0420be3db62052f3/moco/builder.py
    # (with the keys computed outside torch.no_grad(): the queue keeps every step's graph)
    source = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class MoCo(nn.Module):
    def __init__(self, dim=8, K=8):
        super().__init__()
        self.encoder = nn.Linear(4, dim)
        self.K = K
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))
        self.ptr = 0

    def _dequeue_and_enqueue(self, keys):
        self.queue[:, self.ptr : self.ptr + keys.shape[0]] = keys.T
        self.ptr = (self.ptr + keys.shape[0]) % self.K

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder(im_q), dim=1)
        k = F.normalize(self.encoder(im_k), dim=1)
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ self.queue.clone()], dim=1)
        self._dequeue_and_enqueue(k)
        return logits
model = MoCo()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    logits = model(torch.randn(4, 4), torch.randn(4, 4))
    loss = F.cross_entropy(logits, torch.zeros(4, dtype=torch.long))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert [(f.code, f.line) for f in report.findings] == [("GF004", 13)]
    fixed = source.replace(
        "k = F.normalize(self.encoder(im_k), dim=1)", "with torch.no_grad():\n            k = F.normalize(self.encoder(im_k), dim=1)"
    )
    assert check_source(fixed.encode(), all_rules(), FixMode.NONE, "train.py").findings == []


LEARNED_INITIAL_STATE = """\
import torch
import torch.nn as nn
rnn = nn.GRUCell(3, 4)
head = nn.Linear(4, 1)
h0 = nn.Parameter(torch.zeros(1, 4))
opt = torch.optim.SGD([*rnn.parameters(), *head.parameters(), h0], lr=0.1)
xs, ys = torch.randn(6, 2, 3), torch.randn(6, 2, 1)
h = h0.expand(2, 4)
for t in range(6):
    h = rnn(xs[t], h)
    loss = (head(h) - ys[t]).pow(2).mean()
{backward}
"""


@pytest.mark.parametrize(
    ("backward", "safe"),
    [
        ("    opt.zero_grad()\n    loss.backward()\n    opt.step()", True),  # every iteration frees what it carries
        # Every other iteration: the detach would cut the graph the next backward walks (h0 and the window).
        ("    if t % 2 == 1:\n        opt.zero_grad()\n        loss.backward()\n        opt.step()", False),
    ],
)
def test_gf004_detaches_safely_only_where_the_backward_runs_every_iteration(backward, safe):
    source = LEARNED_INITIAL_STATE.format(backward=backward).encode()
    report = check_source(source, all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in report.fixed] == (["GF004"] if safe else [])
    assert [f.fix.value for f in report.findings] == ([] if safe else ["unsafe"])


# https://github.com/dataflowr/notebooks/blob/043dff0f792a5ae67005ba147f7b9dd5fc66e2a1/Module12/GPT_hist_sol.ipynb
# (a forward of the module's code read by a function's training loop, in a later cell)
_FORWARD_READ_BY_A_FUNCTIONS_LOOP = """model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 3)
{forward}


def train(steps):
{inside}    for step in range(steps):
        loss = pred.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


train(3)
"""


@pytest.mark.parametrize(
    ("forward", "inside", "after", "moved"),
    [
        ("pred = model(x)", "", "", True),  # read by the loop alone: it moves into the function's loop
        ("pred = model(x)", "", "print(pred.shape)\n", False),  # moved, the module's later read of it fails
        ("pred = model(x)", "    x = torch.randn(4, 3)\n", "", False),  # moved, it would read the function's own `x`
        ("pred = model(x)", "", "def reset():\n    global pred\n", False),  # another function's `global`
        ("pred = x", "    pred = model(x)\n", "print(pred.shape)\n", True),  # built in the function: moved within it
    ],
)
def test_gf003_moves_a_forward_into_a_functions_loop_only_where_no_other_code_reads_what_it_binds(forward, inside, after, moved):
    report = _findings(_FORWARD_READ_BY_A_FUNCTIONS_LOOP.format(forward=forward, inside=inside) + after, FixMode.UNSAFE)
    if moved:
        assert [f.code for f in report.fixed] == ["GF003"] and b"        pred = model(x)\n        loss" in report.rewritten
    else:
        assert [(f.code, f.fix) for f in report.findings] == [("GF003", None)] and report.rewritten is None


@pytest.mark.parametrize(
    ("between", "said"),
    [
        ("optimizer.zero_grad(set_to_none=True)\n", "line 11 clears the gradients between them"),
        ("optimizer.step()\n", "an optimizer steps between them"),
        ("optimizer.step()\noptimizer.zero_grad()\n", "an optimizer steps between them"),
    ],
)
def test_gf002_names_what_happens_to_gradients_between_the_backwards(between, said):
    """mdistiller's DOT without retain_graph (review h60): only the gradients are cleared between
    the two backwards, no optimizer steps; the message says which."""
    report = _findings(
        "student, teacher = nn.Linear(4, 3), nn.Linear(4, 3)\noptimizer = torch.optim.SGD(student.parameters(), lr=0.1)\n"
        "x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))\nlogits = student(x)\n"
        "loss_ce = nn.functional.cross_entropy(logits, y)\nloss_kd = logits.pow(2).mean()\n"
        "optimizer.zero_grad()\nloss_kd.backward()\n" + between + "loss_ce.backward()\noptimizer.step()\n"
    )
    [finding] = report.findings
    assert finding.code == "GF002" and said in finding.message


@pytest.mark.parametrize(
    ("first", "hint"),
    [
        ('la.backward(retain_graph=os.environ.get("KEEP", "1") == "1")', True),
        ("backward_loss(la, retain=True)", True),
        ("la.backward()", False),  # the variant: the graph is freed, the second backward raises
    ],
)
def test_gf002_is_a_hint_where_the_first_backward_may_keep_the_graph(first, hint):
    """Review h62's generator: a helper's ``retain`` parameter, or a flag, that gradfix cannot
    evaluate may keep the graph, and the program runs."""
    report = _findings(
        "import os\ndef backward_loss(loss, retain=False):\n    loss.backward(retain_graph=retain)\n"
        "trunk, head_a, head_b = nn.Linear(4, 8), nn.Linear(8, 2), nn.Linear(8, 2)\n"
        "h = trunk(torch.randn(5, 4))\nla = nn.functional.mse_loss(head_a(h), torch.zeros(5, 2))\nlb = head_b(h).abs().mean()\n"
        + first
        + "\nlb.backward()\n"
    )
    assert [(f.code, f.hint) for f in [*report.findings, *report.fixed]] == [("GF002", hint)]


_GAN_STEP = (
    "G, D = nn.Linear(3, 4), nn.Linear(4, 1)\nopt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())\n"
    "for x in torch.randn(3, 6, 4):\n    fake = G(torch.randn(6, 3))\n    opt_d.zero_grad()\n    ld = DISCRIMINATOR_LOSS\n"
    "    ld.backward()\n    opt_d.step()\n    opt_g.zero_grad()\n    lg = D(fake).mean()\n    lg.backward()\n    opt_g.step()\n"
)
_TEACHER = (
    "from helpers import make_targets\nX = torch.randn(3, 5, 4)\n"
    "class Trainer:\n    def __init__(self):\n        self.student, self.teacher = nn.Linear(4, 2), nn.Linear(4, 2)\n"
    "        self.opt = torch.optim.SGD(self.student.parameters(), lr=0.1)\n        self.targets = TARGETS\n"
    "    def train_epoch(self):\n        for i in range(len(X)):\n"
    "            loss = nn.functional.mse_loss(self.student(X[i]), self.targets[i])\n"
    "            self.opt.zero_grad()\n            loss.backward()\n            self.opt.step()\n"
    "trainer = Trainer()\nfor epoch in range(2):\n    trainer.train_epoch()\n"
)


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        # review h62: a helper of another file that detaches what it is given, or hands back detached targets
        (_GAN_STEP.replace("DISCRIMINATOR_LOSS", "d_loss(D, x, fake)"), True),
        (_GAN_STEP.replace("DISCRIMINATOR_LOSS", "D(x).mean() - D(fake).mean()"), False),
        (_TEACHER.replace("TARGETS", "make_targets(self.teacher, X)"), True),
        (_TEACHER.replace("TARGETS", "[self.teacher(b) for b in X]"), False),
    ],
)
def test_gan_and_cached_graph_findings_through_unread_code_are_hints(code, hint):
    report = _findings("from helpers import d_loss\n" + code, FixMode.NONE)
    assert [f.hint for f in report.findings if f.code in ("GF005", "GF006")] == [hint]


@pytest.mark.parametrize(
    ("in_the_loop", "fixed"),
    [
        ("pass", True),
        ("optimizer.zero_grad()", False),  # the next iteration clears what the moved backward added
        ("model.zero_grad()", False),
        ("for p in model.parameters():\n        p.grad = None", False),
        ("reset(optimizer)", False),  # a call gradfix does not read, handed the optimizer
        ("reset(params)", False),  # handed a name bound from the parameters
        ("trainer.clear()", False),  # the file's own method: its body zeroes
        ("reset(x)", True),  # handed data only: it cannot reach a parameter
        ("meter.update(len(x))", True),
    ],
)
def test_gf008_moves_no_backward_into_a_loop_whose_body_may_clear_the_gradients(in_the_loop, fixed):
    source = f"""\
import torch
import torch.nn as nn
from helpers import reset, Meter
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
params = list(model.parameters())
meter = Meter()
class Trainer:
    def __init__(self, opt):
        self.opt = opt
    def clear(self):
        self.opt.zero_grad()
trainer = Trainer(optimizer)
batches = [torch.randn(8, 4) for _ in range(3)]
optimizer.zero_grad()
for x in batches:
    {in_the_loop}
    loss = model(x).pow(2).mean()
loss.backward()
optimizer.step()
"""
    report = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py")
    messages = [f.message for f in report.findings if f.code == "GF008"]  # (a finding fixed is gone)
    moved = b"    loss = model(x).pow(2).mean()\n    loss.backward()\noptimizer.step()" in (report.rewritten or b"")
    assert moved == fixed and report.changed == fixed, messages
    assert fixed or len(messages) == 1 and "may clear the gradients" in messages[0]


@pytest.mark.parametrize(
    ("cleared_before", "update", "fixed"),
    [
        (True, "loss.backward()\noptimizer.step()", True),  # cleared before the loop: every batch's gradient, one step
        (False, "optimizer.zero_grad()\nloss.backward()\noptimizer.step()", False),  # the whole update after the loop
        (True, "optimizer.zero_grad()\nloss.backward()\noptimizer.step()", False),  # (the clear after the loop wipes it)
        (False, "loss.backward()\noptimizer.step()\noptimizer.zero_grad()", True),  # cleared after the step, for the next loop
    ],
)
def test_gf008_leaves_an_update_dedented_whole_after_the_loop_reported(cleared_before, update, fixed):
    source = f"""\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [torch.randn(8, 4) for _ in range(3)]
{"optimizer.zero_grad()" if cleared_before else ""}
for x in batches:
    loss = model(x).pow(2).mean()
{update}
"""
    report = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py")
    messages = [f.message for f in report.findings if f.code == "GF008"]  # (a finding fixed is gone)
    moved = b"    loss = model(x).pow(2).mean()\n    loss.backward()\n" in (report.rewritten or b"")
    assert moved == fixed and report.changed == fixed, messages
    assert fixed or len(messages) == 1 and "the whole update" in messages[0]


def test_gf008_an_update_after_the_loop_cleared_before_it_too_is_still_rewritten():
    """A clear before the loop says the gradient is gathered over it, whatever follows the step."""
    source = b"""\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [torch.randn(8, 4) for _ in range(3)]
for epoch in range(2):
    optimizer.zero_grad()
    for x in batches:
        loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""
    report = check_source(source, all_rules(), FixMode.UNSAFE, "train.py")
    assert b"        loss = model(x).pow(2).mean()\n        loss.backward()\n    optimizer.step()" in report.rewritten


@pytest.mark.parametrize(
    ("microbatch", "reported"),
    [
        ("microbatch = batch[i * 4:(i + 1) * 4]", True),  # computed from the loop's target: the last one's alone
        ("microbatch = batch[0:4]", False),  # the same every iteration: nothing is lost
        ("microbatch = previous\n        previous = batch[i * 4:(i + 1) * 4]", False),  # what the last iteration left
    ],
)
def test_gf008_reads_a_backwarded_expression_through_names_the_iteration_computed(microbatch, reported):
    source = f"""\
import torch
import torch.nn as nn
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 4
previous = torch.randn(4, 4)
for batch in [torch.randn(16, 4) for _ in range(3)]:
    for i in range(steps):
        {microbatch}
        loss = model(microbatch).pow(2).mean()
    (loss / steps).backward()
    optimizer.step()
    optimizer.zero_grad()
"""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert ("GF008" in {f.code for f in report.findings}) == reported, [f.render() for f in report.findings]


@pytest.mark.parametrize(
    ("criterion", "safe"),
    [
        ("nn.L1Loss()", True),  # review h61 (LSTNet): a torch module built where it is called
        ("losses.L1Loss()", False),  # the variant: a class of code gradfix did not read
    ],
)
def test_a_module_built_where_it_is_called_is_read_as_its_class(criterion, safe):
    report = _findings(
        "import losses\nmodel = nn.Linear(4, 2)\nx, y = torch.randn(8, 4), torch.randn(8, 2)\noutput = model(x)\n"
        f"loss = nn.functional.mse_loss(output, y)\nloss_l1 = {criterion}(output, y)\nloss.backward()\nloss_l1.backward()\n",
        FixMode.SAFE,
    )
    assert [(f.code, f.fix is not None and f.fix.value == "safe") for f in [*report.fixed, *report.findings]] == [("GF002", safe)]
