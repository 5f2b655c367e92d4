"""Safe means proved: a safe fix rests only on code gradfix read and modelled.

Two families of checks. The programs of ``../shared/real-breaks`` (each broken by a safe fix of an
earlier gradfix, through a construct the analysis did not see through) get no safe rewrite. And a
metamorphic check on every fixture that gets a safe rewrite: the same program with one opaque
construct inserted on the fix's path (right after a backward of it) gets no safe fix from that rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gradfix.codemods.analysis.closed_world import SETUP_TORCH_FUNCTIONS
from gradfix.codemods.check import check_source
from gradfix.codemods.execution.verify import fixture_folder
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .opaque_constructs import OPAQUE_CONSTRUCTS, insertable, with_construct

REAL_BREAKS = Path(__file__).resolve().parents[2] / "shared" / "real-breaks"
FIXTURES = Path(__file__).parent / "fixtures"
RULES = {name: rule for rule in all_rules() for name in (fixture_folder(rule), rule.NAME)}


def _programs() -> list[Path]:
    if not REAL_BREAKS.is_dir():
        return []
    return sorted(p for p in REAL_BREAKS.iterdir() if p.suffix == ".py" or (p / "main.py").is_file())


@pytest.mark.skipif(not REAL_BREAKS.is_dir(), reason="../shared/real-breaks is not beside the repository")
@pytest.mark.parametrize("program", _programs(), ids=lambda p: p.name)
def test_a_program_a_safe_fix_once_broke_gets_no_safe_rewrite(program):
    files = sorted(program.glob("*.py")) if program.is_dir() else [program]
    for path in files:
        report = check_source(path.read_bytes(), all_rules(), FixMode.SAFE, str(path))
        assert not report.changed, f"{path.name}: " + "; ".join(f.render() for f in report.fixed)


def _safely_fixed_fixtures() -> list[tuple[type, Path]]:
    cases = []
    for before in sorted(FIXTURES.glob("*/*/before.py")):
        rule = RULES[before.parent.parent.name]
        if before.parent.name.startswith("unsafe_") or rule.FIX is None or rule.FIX.value != "safe":
            continue
        if insertable(before.read_text(encoding="utf-8")):
            cases.append((rule, before))
    return cases


def _sample() -> list[tuple[type, Path, str]]:
    """Two constructs for each fixture, in turn, so that each construct meets a share of every
    rule's fixtures (benchmarks/opacity.py runs every construct on every one)."""
    constructs = list(OPAQUE_CONSTRUCTS)
    return [
        (rule, before, constructs[(2 * index + turn) % len(constructs)])
        for index, (rule, before) in enumerate(_safely_fixed_fixtures())
        for turn in range(2)
    ]


@pytest.mark.parametrize(
    ("rule", "before", "construct"), _sample(), ids=lambda v: getattr(v, "CODE", None) or getattr(v, "parent", None) and v.parent.name or v
)
def test_an_opaque_construct_on_the_path_makes_the_fix_unsafe_where_it_bears_on_an_obligation(rule, before, construct):
    source = before.read_text(encoding="utf-8")
    original = check_source(source.encode(), [rule], FixMode.SAFE, str(before))
    if not original.fixed:
        pytest.skip("the fixture's safe fix is made by its own rule only together with others")
    variant = with_construct(source, construct)
    report = check_source(variant.encode(), [rule], FixMode.SAFE, str(before))
    if OPAQUE_CONSTRUCTS[construct][2] in rule.OBLIGATIONS:
        assert not report.fixed, f"a safe fix despite {construct}: " + "; ".join(f.render() for f in report.fixed)
    else:  # (what the fix rests on is not touched: detaching nothing, it reads no bookkeeping)
        assert report.fixed, f"{construct} bears on none of {rule.CODE}'s obligations, yet its fix is not safe"


def test_a_finding_carries_the_answer_of_each_obligation_into_machine_output():
    from gradfix.cli.render import finding_record

    path = Path(__file__).parent / "proof_example.py"
    source = b"""\
import torch
import torch.nn as nn
import helpers
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward(retain_graph=True)
    optimizer.step()
    helpers.show(model)
"""
    report = check_source(source, all_rules(), FixMode.NONE, str(path))
    (record,) = [finding_record(f) for f in report.findings]
    assert record["fix"] is None and record["hint"] and "at line 11" in record["message"]  # (GF009's claim itself rests on them)
    proof = {step["obligation"]: (step["answer"], step["line"]) for step in record["proof"]}
    assert proof["reads_modelled_code"] == ("unknown", 11) and proof["no_hidden_backward"] == ("unknown", 11)


def test_an_object_built_in_a_tuple_assignment_proves_a_fix_only_when_its_class_was_read():
    # talking-heads builds its three networks in one assignment; the discriminator's `D.W` read
    # between the backwards is a parameter only if `D` is known as the file's `Discriminator`.
    before = FIXTURES / "gf009_needless_retain_graph" / "talking_heads_retain_left_after_detach" / "before.py"
    source = before.read_text(encoding="utf-8")
    rule = RULES["needless_retain_graph"]
    read = check_source(source.encode(), [rule], FixMode.SAFE, str(before))
    unread = source.replace("Discriminator(VIDEOS)\n", "make_discriminator(VIDEOS)\n").replace(
        "from torch.optim import Adam\n", "from torch.optim import Adam\nfrom gans import make_discriminator\n"
    )
    hidden = check_source(unread.encode(), [rule], FixMode.SAFE, str(before))
    assert [f.code for f in read.fixed] == ["GF009"]
    assert hidden.fixed == [] and [(f.code, f.hint) for f in hidden.findings] == [("GF009", True)]


@pytest.mark.parametrize("qualified", sorted(SETUP_TORCH_FUNCTIONS))
def test_a_setup_function_takes_no_tensor_and_returns_none(qualified):
    """Each row of ``SETUP_TORCH_FUNCTIONS``, run as setup code calls it (a seed, or nothing): no
    tensor in, none out (``manual_seed`` hands back the generator)."""
    torch = pytest.importorskip("torch")
    function = torch
    for part in qualified.split(".")[1:]:
        function = getattr(function, part)
    result = function(0) if "seed" in qualified else function()
    assert not isinstance(result, torch.Tensor)


SEEDED_TWO_BACKWARDS = """\
import torch, torch.nn as nn
torch.manual_seed(0)
{setup}
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()
for i in range(3):
    optimizer.zero_grad()
    output = model(torch.randn(5, 4))
    loss = criterion(output, torch.randint(0, 3, (5,)))
    reg = output.pow(2).mean() * 1e-4
    loss.backward()
    reg.backward()
    optimizer.step()
"""


def test_setup_calls_torch_models_leave_a_safe_fix_safe():
    # (H56: a seq2seq notebook's `torch.cuda.manual_seed(seed)` made GF002's merge unsafe, as a torch
    # call outside its operator namespaces; a torch call gradfix does not model still does.)
    def fixes(setup):
        report = check_source(SEEDED_TWO_BACKWARDS.format(setup=setup).encode(), all_rules(), FixMode.UNSAFE, "train.py")
        return [(f.code, f.fix.value if f.fix else None) for f in report.fixed + report.findings]

    assert fixes("torch.cuda.manual_seed(0)") == [("GF002", "safe")]
    assert fixes("torch.backends.mps.is_built()") == [("GF002", "safe")]
    assert fixes("torch.cuda.memory_allocated()") == [("GF002", "unsafe")]
