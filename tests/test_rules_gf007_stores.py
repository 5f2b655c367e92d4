"""GF007 through the stores it reads beyond a name: an item of a dict summed with ``+=``, a method
of the file's class that adds what it is given to its object (an ``AverageMeter``), and a list in
an item of a dict."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

# https://github.com/leftthomas/SRGAN/blob/master/train.py (its running results, without `.item()`)
RUNNING_RESULTS = (
    HEADER
    + """\
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
running_results = {"batch_sizes": 0, "g_loss": 0}
for step in range(20):
    x = torch.randn(16, 8)
    g_loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    g_loss.backward()
    optimizer.step()
STORE
print(float(running_results["g_loss"]))
"""
)

# https://github.com/pytorch/examples/blob/main/imagenet/main.py (its AverageMeter, handed the loss)
METER = '''
class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.sum = 0
        self.count = 0
        self.values = []

    def update(self, val, n=1):
{update}
'''
TRAIN = """
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses = AverageMeter()
for i in range(20):
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    loss = F.cross_entropy(model(x), y)
{store}
    optimizer.zero_grad()
    loss.backward(){retain}
    optimizer.step()
print(float(losses.sum) / losses.count)
"""
UPDATE = "        self.val = val\n        self.sum += val * n\n        self.count += n\n"


def _meter(update=UPDATE, store="    losses.update(loss, x.size(0))", retain="", meter=True, extra=""):
    return HEADER + (METER.format(update=update) + extra if meter else "from meters import AverageMeter\n") + TRAIN.format(store=store, retain=retain)


def _verdict(source: str) -> str:
    """ "fixed", "reported" or "silent", for GF007 with the safe fixes."""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    if any(f.code == "GF007" for f in report.fixed):
        return "fixed"
    return "reported" if any(f.code == "GF007" for f in report.findings) else "silent"


@pytest.mark.parametrize(
    ("store", "verdict"),
    [
        ('    running_results["g_loss"] += g_loss * x.size(0)', "fixed"),  # `+=` adds to the item: every step's graph
        ('    running_results["g_loss"] = running_results["g_loss"] + g_loss', "fixed"),  # the same sum, written out
        ('    running_results["g_loss"] = running_results["g_loss"] + g_loss * x.size(0)', "fixed"),
        ('    running_results["g_loss"] = g_loss', "silent"),  # the same key replaces: one step's graph
        ('    running_results["g_loss"] += g_loss.item() * x.size(0)', "silent"),  # a number
        ('    with torch.no_grad():\n        running_results["g_loss"] += g_loss * x.size(0)', "silent"),  # no graph recorded
        # the fact the fix rests on, hidden: code reads autograd's bookkeeping of what the sum holds
        ('    running_results["g_loss"] += g_loss\n    print(running_results["g_loss"].grad_fn)', "reported"),
    ],
)
def test_gf007_an_item_of_a_dict_summed_with_augmented_assignment(store, verdict):
    assert _verdict(RUNNING_RESULTS.replace("STORE", store)) == verdict


@pytest.mark.parametrize(
    ("source", "verdict"),
    [
        (_meter(), "fixed"),  # freed by the backward later in the iteration
        (_meter(store="    losses.update(n=x.size(0), val=loss)"), "fixed"),
        (_meter(store="    losses.update(loss.item(), x.size(0))"), "silent"),  # the common correct spelling
        (_meter(update="        self.values.append(val)\n"), "fixed"),  # appended, not added
        # the facts the proof rests on, each hidden in turn
        (_meter(meter=False), "silent"),  # the meter's class is another package's: its update is not read
        (_meter(extra="\n    def backward(self):\n        self.sum.backward()\n"), "silent"),  # the class may backward its sum
        (_meter(store="    losses.reset()\n    losses.update(loss, x.size(0))"), "silent"),  # emptied every step
        (_meter(store="    losses = AverageMeter()\n    losses.update(loss, x.size(0))"), "silent"),  # made anew every step
        (_meter(update="        if n > 0:\n            self.sum += val * n\n"), "silent"),  # not kept on every call
        (_meter(update="        with torch.no_grad():\n            self.sum += val * n\n"), "silent"),
        (_meter(update="        self.sum += float(val) * n\n"), "silent"),  # a number
        (_meter(update="        val = val.item()\n        self.sum += val * n\n"), "silent"),  # rebound first
        (_meter(update=UPDATE + "        print(val)\n"), "reported"),  # also handed to other code
        (_meter(extra="\n    def kept(self):\n        return self.sum.requires_grad\n"), "reported"),  # bookkeeping read
        (_meter().replace("loss.backward()", "loss.backward(retain_graph=True)"), "reported"),  # nothing freed it
        # the object, or what it keeps, handed to code gradfix does not follow (which may read its bookkeeping)
        (_meter(store="    losses.update(loss, x.size(0))\n    flush(losses)", extra="\nfrom logs import flush\n"), "reported"),
        (_meter(store="    losses.update(loss, x.size(0))\n    flush(losses.val)", extra="\nfrom logs import flush\n"), "reported"),
        (_meter(store="    losses.update(loss, x.size(0))\n    losses.log()", extra="\n    def log(self):\n        flush(self.sum)\n"), "reported"),
        (_meter(store="    losses.update(loss, x.size(0))\n    print(float(losses.val), losses.count)"), "fixed"),  # read by builtins
        # its __dict__ only read (the ImageNet example's __str__, h90's moco), or written: then a stored
        # attribute may hide `update`
        (_meter(extra='\n    def __str__(self):\n        return "{val} ({avg})".format(**self.__dict__)\n'), "fixed"),
        (_meter(extra="\n    def show(self):\n        return dict(self.__dict__.items())\n"), "fixed"),
        (_meter(extra="\n    def load(self, state):\n        self.__dict__.update(state)\n"), "silent"),
        (_meter(extra="\n    def load(self, state):\n        self.__dict__ = state\n"), "silent"),
        (_meter(extra="\n    def state(self):\n        return save(self.__dict__)\n"), "silent"),
    ],
)
def test_gf007_a_loss_a_method_of_the_file_adds_to_its_object(source, verdict):
    assert _verdict(source) == verdict


def test_gf007_the_meter_fix_keeps_the_argument_and_nothing_else():
    report = check_source(_meter().encode(), all_rules(), FixMode.SAFE, "train.py")
    assert b"    losses.update(loss.detach(), x.size(0))\n" in (report.rewritten or b"")
    assert (report.rewritten or b"").count(b".detach()") == 1


def test_gf007_a_meter_whose_methods_are_written_on_one_line_each():
    # (the shape of GT-RIPL/Continual-Learning-Benchmark's utils/metric.py)
    meter = """
class AverageMeter(object):
    def __init__(self): self.reset()
    def reset(self): self.val = 0; self.avg = 0; self.sum = 0; self.count = 0
    def update(self, val, n=1): self.val = val; self.sum += val * n; self.count += n; self.avg = float(self.sum) / self.count
"""
    assert _verdict(HEADER + meter + TRAIN.format(store="    losses.update(loss, x.size(0))", retain="")) == "fixed"


def test_gf007_a_decorated_update_is_not_read():
    # (``@torch.no_grad()`` on the method: what it adds records no graph)
    source = _meter().replace("    def update(", "    @torch.no_grad()\n    def update(")
    assert _verdict(source) == "silent"


# A dict of lists (``history[key].append(loss)``), as loggers keep one list per metric.
HISTORY = (
    HEADER
    + """\
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = {"loss": [], "reg": []}
for step in range(10):
    x = torch.randn(3, 4)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
STORE
print(len(history["loss"]))
"""
)


@pytest.mark.parametrize(
    ("store", "verdict"),
    [
        ('    history["loss"].append(loss)', "reported"),  # every step's graph, in the item's list
        ('    history["loss"].append(loss.item())', "silent"),
        ('    history["loss"] = []\n    history["loss"].append(loss)', "silent"),  # the item emptied every step
        ('    with torch.no_grad():\n        history["loss"].append(loss * 2)', "silent"),
    ],
)
def test_gf007_a_list_in_an_item_of_a_dict(store, verdict):
    assert _verdict(HISTORY.replace("STORE", store)) == verdict


def test_gf007_a_list_in_an_item_of_a_dict_is_rewritten_only_as_unsafe():
    # (the closed world cannot tell the item is a list: its append may be any object's method)
    source = HISTORY.replace("STORE", '    history["loss"].append(loss)')
    report = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py")
    assert b'    history["loss"].append(loss.detach())\n' in (report.rewritten or b"")
