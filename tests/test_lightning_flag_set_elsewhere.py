"""Whether a LightningModule optimizes automatically is proved only where nothing but its own class
body sets ``automatic_optimization``: h86's generator switched it off in a mixin's ``__init__``
(which runs through ``super().__init__()``), and GF001 read the module as automatic, took the
returned loss for one Lightning backwards, and dropped ``self.manual_backward(loss)`` as a safe
fix: the fixed program trained nothing. A mixin, a helper given the module, an assignment after it
is built, a class attribute of a mixin, or a base class gradfix did not read may switch it: no fix,
no finding. Set in the class itself (or a Lightning base of the file), it is read as before."""

import pytest

from gradfix.codemods.report import FixMode

from .one_program import findings_of

PROGRAM = """\
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
IMPORTED

MIXIN


class LitModel(BASES):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(6, 1)
        OWN

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def training_step(self, batch, batch_idx):
        x, y = batch
        opt = self.optimizers()
        opt.zero_grad()
        loss = F.mse_loss(self.net(x), y)
        self.manual_backward(loss)
        opt.step()
        return loss


model = LitModel()
AFTER
"""
MIXIN_INIT = """class ManualOptimMixin:
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False"""
MIXIN_ATTRIBUTE = "class ManualOptimMixin:\n    automatic_optimization = False"
HELPER = "def manual(module):\n    module.automatic_optimization = False\n    return module"


def _program(mixin: str = "", bases: str = "pl.LightningModule", own: str = "pass", after: str = "", imported: str = "") -> str:
    return PROGRAM.replace("MIXIN", mixin).replace("BASES", bases).replace("OWN", own).replace("AFTER", after).replace("IMPORTED", imported)


@pytest.mark.parametrize(
    "source",
    [
        _program(MIXIN_INIT, "ManualOptimMixin, pl.LightningModule"),
        _program(MIXIN_ATTRIBUTE, "ManualOptimMixin, pl.LightningModule"),
        _program(HELPER, own="manual(self)"),
        _program(after="model.automatic_optimization = False"),
        _program(bases="ManualOptimMixin, pl.LightningModule", imported="from mixins import ManualOptimMixin"),
    ],
    ids=["mixin-init", "mixin-attribute", "helper", "after-built", "unread-base"],
)
def test_a_flag_set_where_gradfix_does_not_follow_proves_nothing(source):
    assert findings_of(source, "GF001", mode=FixMode.SAFE) == []


def test_the_flag_in_the_class_itself_is_manual_optimization():
    assert findings_of(_program(own="self.automatic_optimization = False"), "GF001", mode=FixMode.SAFE) == []


def test_a_subclass_that_optimizes_by_hand_runs_its_bases_training_step_by_hand():
    """h86: the flag set in a subclass of the file, the ``training_step`` the base's."""
    subclass = "\n\nclass Manual(LitModel):\n    def __init__(self):\n        super().__init__()\n        self.automatic_optimization = False\n"
    assert findings_of(_program().replace("\n\nmodel = LitModel()", subclass + "\n\nmodel = Manual()"), "GF001", mode=FixMode.SAFE) == []


@pytest.mark.parametrize("mixin", ["", MIXIN_INIT], ids=["no-mixin", "mixin-not-derived"])
def test_without_the_flag_lightning_backwards_the_returned_loss_again(mixin):
    """The variant with every fact in view: automatic optimization, a loss backwarded by hand and
    returned to Lightning, which backwards it again (a mixin that switches it, which the class does
    not derive, changes nothing: h86's generator)."""
    (found,) = findings_of(_program(mixin), "GF001", mode=FixMode.SAFE)
    assert not found.hint
