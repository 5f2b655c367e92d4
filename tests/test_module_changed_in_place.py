"""A module whose parameters the program moves itself is no constant of training: an exponential
moving average of a student (``for t, s in zip(teacher.parameters(), student.parameters()):
t.mul_(0.9).add_(0.1 * s)``, or ``t.data = ...``), or a state loaded into it in the training
loop (a target network's ``load_state_dict``). gradfix counted only optimizers and updates that
read ``.grad``, called a target built once from such a teacher "a constant", and GF006's safe fix
detached it: the program then ran against the first teacher at every step (h89's generator: 100
of 100 such fixes wrong). The target is now what the loop must compute again: GF003 moves it into
the loop, and the fixed program computes what the author meant (the target of the teacher of each
step, as the hand version computes it under ``no_grad``). The variant whose teacher nothing moves
is still a constant, and GF006 detaches it."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
teacher = nn.Linear(4, 4)
student = nn.Linear(4, 4)
teacher.load_state_dict(student.state_dict())
x = torch.randn(16, 4)
target = teacher(x)
opt = torch.optim.SGD(student.parameters(), lr=0.1)
for step in range(3):
    loss = F.mse_loss(student(x + 0.1 * torch.randn(16, 4)), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        MOVE
    print(step, round(loss.item(), 6))
"""
HAND = PROGRAM.replace("target = teacher(x)\n", "").replace(
    "for step in range(3):\n", "for step in range(3):\n    with torch.no_grad():\n        target = teacher(x)\n"
)


def _fixed(source: str) -> tuple[list[str], str]:
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    return [f.code for f in report.fixed], (report.rewritten or b"").decode()


@pytest.mark.parametrize(
    "move",
    [
        "for pt, ps in zip(teacher.parameters(), student.parameters()):\n            pt.mul_(0.9).add_(0.1 * ps)",
        "for pt, ps in zip(teacher.parameters(), student.parameters()):\n            pt.data = 0.9 * pt.data + 0.1 * ps.data",
        "for (name, pt), ps in zip(teacher.named_parameters(), student.parameters()):\n            pt.lerp_(ps, 0.1)",
        "teacher.load_state_dict(student.state_dict())",
    ],
    ids=["mul-add", "data-assigned", "lerp-named", "load-state"],
)
def test_a_target_built_once_from_a_teacher_the_loop_moves_is_computed_in_the_loop(move, runs, tmp_path):
    source = PROGRAM.replace("MOVE", move)
    script = tmp_path / "train.py"
    script.write_text(source)
    assert runs.run(script).status == "error"
    codes, fixed = _fixed(source)
    assert codes == ["GF003"]
    script.write_text(fixed)
    after = runs.run(script)
    script.write_text(HAND.replace("MOVE", move))
    hand = runs.run(script)
    assert after.status == hand.status == "ok"
    assert after.stdout == hand.stdout


def test_a_teacher_nothing_moves_gives_a_constant_target(runs, tmp_path):
    source = PROGRAM.replace("MOVE", "pass")
    codes, fixed = _fixed(source)
    assert codes == ["GF006"]
    assert "target = teacher(x).detach()" in fixed
    script = tmp_path / "train.py"
    script.write_text(fixed)
    assert runs.run(script).status == "ok"


def test_a_teacher_moved_by_code_gradfix_did_not_read_is_not_detached_safely(runs, tmp_path):
    """The variant that hides the move: the average is taken in a module gradfix does not read, which
    may change the teacher; no safe fix rests on the teacher being constant."""
    (tmp_path / "averaging.py").write_text(
        "import torch\n\n\ndef ema_update(teacher, student):\n    with torch.no_grad():\n"
        "        for pt, ps in zip(teacher.parameters(), student.parameters()):\n            pt.mul_(0.9).add_(0.1 * ps)\n"
    )
    source = "from averaging import ema_update\n" + PROGRAM.replace("with torch.no_grad():\n        MOVE", "ema_update(teacher, student)")
    script = tmp_path / "train.py"
    script.write_text(source)
    assert runs.run(script).status == "error"
    codes, fixed = _fixed(source)
    assert codes == [] and fixed == ""
