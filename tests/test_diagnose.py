"""`gradfix diagnose` on the shared cases and on the fixtures: the right lines, the right rule, and
with --fix a script that then runs clean.

Every fixture runs in test_fixtures; here the default run diagnoses the first fixture of each rule
by folder name (the CI budget is minutes), and `python -m pytest -m sweep` every other one."""

import shutil

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods.execution.diagnose import diagnose, fix_and_rerun
from gradfix.codemods.execution.runner import RunOptions
from gradfix.codemods.execution.verify import discover
from gradfix.codemods.registry import all_rules
from gradfix.codemods.symptoms import SECOND_BACKWARD, GraphsKeptAlive, LastBatchOnly, RunsCorrectly

from .conftest import FIXTURES, SHARED_CASES

BOUNDS = RunOptions(timeout=60)
CASES = discover([FIXTURES])  # sorted by rule, then by folder name
# diagnose explains errors, and measures silent bugs (graphs kept alive, batches a backward misses).
SILENT_SYMPTOMS = (GraphsKeptAlive, LastBatchOnly)
RAISING_PAIRS = [case for case in CASES if case.kind == "pair" and case.rule.SYMPTOM is SECOND_BACKWARD]
SILENT_PAIRS = [case for case in CASES if case.kind == "pair" and isinstance(case.rule.SYMPTOM, SILENT_SYMPTOMS)]
OKS = [case for case in CASES if case.kind == "ok"]


def _first_of_each_rule(cases: list) -> list:
    """The default run's selection: each rule's first case that can run here."""
    first = {}
    for case in cases:
        if not case.missing_modules():
            first.setdefault(case.rule, case)
    return list(first.values())


def _swept_beyond_the_first(cases: list) -> list:
    """Every case as a parameter; all but each rule's first are marked to run only under -m sweep."""
    first = _first_of_each_rule(cases)
    return [pytest.param(case, id=case.name, marks=() if case in first else pytest.mark.sweep) for case in cases]


def _skip_unless_runnable(case) -> None:
    if case.missing_modules():
        pytest.skip(f"{case.name} needs {', '.join(case.missing_modules())}, not installed here")


def test_the_default_run_diagnoses_every_rule_and_symptom():
    rules = set(all_rules())
    shown = {rule for rule in rules if rule.SYMPTOM is SECOND_BACKWARD or isinstance(rule.SYMPTOM, SILENT_SYMPTOMS)}
    # The rest only cost memory, which diagnose does not measure: a new kind of symptom must be placed.
    assert {type(rule.SYMPTOM) for rule in rules - shown} <= {RunsCorrectly}
    assert {case.rule for case in _first_of_each_rule(RAISING_PAIRS) + _first_of_each_rule(SILENT_PAIRS)} == shown
    assert {type(case.rule.SYMPTOM) for case in _first_of_each_rule(SILENT_PAIRS)} == set(SILENT_SYMPTOMS)
    assert {case.rule for case in _first_of_each_rule(OKS)} == rules


# script: (line of the failing backward, line that built the freed graph, rule, how they relate)
SHARED = {
    "double_backward.py": (17, 15, "GF001", "same tensor was already backwarded at line 16"),
    "shared_trunk_two_losses.py": (20, 15, "GF002", "the two losses share it"),
    "hoisted_forward.py": (17, 13, "GF003", "built once, before the loop at line 14"),
    "unrolled_buffer.py": (15, 13, "GF004", "previous iteration of the loop at line 11"),
    "stored_hidden_states.py": (32, 19, "GF004", "built in `forward` during an earlier call"),
    "gan_without_detach.py": (24, 15, "GF005", "the two losses share it"),
}


@pytest.mark.skipif(not SHARED_CASES.is_dir(), reason="../shared/cases is not beside this checkout")
@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_raising_cases_name_the_lines_and_rule(name, runs, tmp_path):
    script = tmp_path / name
    shutil.copy(SHARED_CASES / "raises" / name, script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    failing, graph, code, relation = SHARED[name]
    assert diagnosis.second_backward
    assert (diagnosis.failing.line, diagnosis.graph.line, diagnosis.finding.code) == (failing, graph, code)
    assert relation in diagnosis.relation
    assert fix_and_rerun(diagnosis, runs.runner, BOUNDS).succeeded


@pytest.mark.parametrize("case", _swept_beyond_the_first(RAISING_PAIRS))
def test_every_fixture_is_diagnosed_as_its_rule_and_fixed(case, runs, tmp_path):
    _skip_unless_runnable(case)
    script = tmp_path / "before.py"
    shutil.copy(case.file("before.py"), script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward, diagnosis.run.describe()
    assert diagnosis.finding is not None and diagnosis.finding.code == case.rule.CODE
    assert diagnosis.failing is not None  # the backward line, or the script's call into the trainer that backwards
    if case.unsafe and diagnosis.fix is None:
        # refused: it would stop a parameter training (the search then looks for another rewrite)
        assert diagnosis.fix_refused.startswith(f"{case.rule.CODE}'s unsafe fix runs, but ") and "gets no gradient" in diagnosis.fix_refused
        return
    rerun = fix_and_rerun(diagnosis, runs.runner, BOUNDS)
    assert rerun.succeeded, rerun.describe()
    assert script.read_bytes() == case.file("after.py").read_bytes()


@pytest.mark.parametrize("case", _swept_beyond_the_first(OKS))
def test_correct_fixtures_show_no_error(case, runs):
    _skip_unless_runnable(case)
    diagnosis = diagnose(case.file("ok.py"), runs.runner, BOUNDS)
    assert not diagnosis.second_backward and diagnosis.run.succeeded, diagnosis.run.describe()


@pytest.fixture
def cli():
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


def test_cli_diagnose_fix_confirms_the_error_is_gone(cli, warm_cli, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "gf003_forward_outside_loop" / "loss_hoisted" / "before.py", script)
    shown = warm_cli("diagnose", script)
    assert shown.exit_code == 1
    assert "rule: GF003" in shown.stdout and "+    loss = criterion(model(x), y)" in shown.stdout
    assert "retain_graph" not in shown.output
    fixed = cli("diagnose", "--fix", script)
    assert fixed.exit_code == 0, fixed.output
    assert "now run without error" in fixed.stderr
    assert script.read_bytes() == (FIXTURES / "gf003_forward_outside_loop" / "loss_hoisted" / "after.py").read_bytes()


def test_cli_diagnose_says_which_bound_ended_a_run_without_error(warm_cli, tmp_path):
    ok = FIXTURES / "gf004_carried_state" / "ok_truncated_bptt_tuple" / "ok.py"
    result = warm_cli("diagnose", "--steps", "2", ok)
    assert result.exit_code == 0
    assert "(stopped after 2 optimizer step(s), the step bound)" in result.stdout
    assert "(ran to the end)" in warm_cli("diagnose", ok).stdout
    endless = tmp_path / "endless.py"
    endless.write_text(
        "import torch\nw = torch.zeros(2, requires_grad=True)\noptimizer = torch.optim.SGD([w], lr=0.1)\n"
        "while True:\n    optimizer.zero_grad()\n    (w - 1).pow(2).sum().backward()\n    optimizer.step()\n"
    )
    # A run counts as training at its time bound once it has made a step: ten seconds hold one on
    # a loaded machine, where two seconds did not always (the run was then said not to finish).
    result = warm_cli("diagnose", "--timeout", "10", endless)
    assert result.exit_code == 0 and "stopped at the time bound, after" in result.stdout


def test_cli_diagnose_passes_arguments_and_survives_hangs_and_crashes(warm_cli, tmp_path):
    script = tmp_path / "args.py"
    script.write_text("import sys\nif sys.argv[1:] != ['--epochs', '3']:\n    raise SystemExit('bad arguments')\n")
    assert warm_cli("diagnose", script, "--", "--epochs", "3").exit_code == 0
    hang = tmp_path / "hang.py"
    hang.write_text("while True:\n    pass\n")
    result = warm_cli("diagnose", "--timeout", "1", hang)
    assert result.exit_code == 1 and "did not finish in time" in result.stdout
    crash = tmp_path / "crash.py"
    crash.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    result = warm_cli("diagnose", crash)
    assert result.exit_code == 1 and "crashed: killed by signal 11" in result.stdout


def test_cli_diagnose_shows_the_scripts_traceback_without_gradfix_frames(warm_cli, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("def load():\n    raise ValueError('no data')\n\nload()\n")
    result = warm_cli("diagnose", script)
    assert result.exit_code == 1
    assert "ValueError: no data" in result.stdout and f'File "{script}", line 4, in <module>' in result.stdout
    assert "script_child.py" not in result.stdout and "runpy" not in result.stdout


def test_cli_diagnose_bad_input(cli, tmp_path):
    assert cli("diagnose", tmp_path / "missing.py").exit_code == 2
    broken = tmp_path / "broken.py"
    broken.write_text("loss.backward(\n")
    result = cli("diagnose", broken)
    assert result.exit_code == 2 and "cannot parse" in result.stderr


def test_cli_verify_passes_on_a_fixture_and_fails_on_a_wrong_one(warm_cli, tmp_path):
    # One case is enough here: test_fixtures runs every check on every fixture.
    right = tmp_path / "right" / "duplicate_backward" / "for_loop"
    shutil.copytree(FIXTURES / "gf001_duplicate_backward" / "for_loop", right)
    result = warm_cli("verify", right.parent)
    assert result.exit_code == 0, result.output
    assert " 0 failed" in result.stderr
    wrong = tmp_path / "wrong" / "duplicate_backward" / "wrong"
    shutil.copytree(FIXTURES / "gf001_duplicate_backward" / "for_loop", wrong)
    (wrong / "after.py").write_text((wrong / "before.py").read_text())
    result = warm_cli("verify", "--output-format", "json", wrong.parent)
    assert result.exit_code == 1
    assert '"passed": false' in result.stdout
    assert warm_cli("verify", tmp_path / "nothing").exit_code == 2


@pytest.mark.parametrize("case", _swept_beyond_the_first(SILENT_PAIRS))
def test_silent_fixtures_are_measured_matched_and_fixed(case, runs, tmp_path):
    _skip_unless_runnable(case)
    script = tmp_path / "before.py"
    shutil.copy(case.file("before.py"), script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.symptom and not diagnosis.second_backward, diagnosis.run.describe()
    assert diagnosis.finding is not None and diagnosis.finding.code == case.rule.CODE
    confirmed, detail = diagnosis.confirmed_by(fix_and_rerun(diagnosis, runs.runner, BOUNDS))
    assert confirmed, detail
    assert script.read_bytes() == case.file("after.py").read_bytes()


def test_cli_diagnose_shows_a_silent_bug_with_exit_1(warm_cli, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "gf007_graph_kept_for_logging" / "accel_losses_list" / "before.py", script)
    shown = warm_cli("diagnose", script)
    assert shown.exit_code == 1, shown.output
    assert "runs, but live tensors keep more graph nodes at every optimizer step" in shown.stdout
    assert "rule: GF007" in shown.stdout and "+    losses.append(loss.detach())" in shown.stdout


@pytest.mark.skipif(not SHARED_CASES.is_dir(), reason="../shared/cases is not beside this checkout")
@pytest.mark.parametrize(("name", "code"), [("backward_after_batch_loop.py", "GF008"), ("loss_kept_for_logging.py", "GF007")])
def test_shared_silent_cases_are_measured_and_matched(name, code, runs, tmp_path):
    script = tmp_path / name
    shutil.copy(SHARED_CASES / "silent" / name, script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.symptom, diagnosis.run.describe()
    assert diagnosis.finding is not None and diagnosis.finding.code == code


WGAN_GP_PENALTY_IN_A_HELPER = """\
# reduced from compute_gradient_penalty in https://github.com/eriklindernoren/PyTorch-GAN/blob/master/implementations/wgan_gp/wgan_gp.py
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
D = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
opt_g = torch.optim.Adam(G.parameters(), 1e-3)
opt_d = torch.optim.Adam(D.parameters(), 1e-3)


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interp = alpha * real + (1 - alpha) * fake
    grads = torch.autograd.grad(critic(interp).sum(), interp, create_graph=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


for step in range(3):
    real = torch.randn(16, 2)
    fake = G(torch.randn(16, 4))
    opt_d.zero_grad()
    d_loss = D(fake).mean() - D(real).mean() + 10 * gradient_penalty(D, real, fake)
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = -D(fake).mean()
    g_loss.backward()
    opt_g.step()
"""


def test_a_fix_whose_program_still_fails_is_taken_back(warm_cli, tmp_path):
    # Detaching the generator's output everywhere the critic's step reads it also detaches the
    # penalty's interpolation, which autograd.grad differentiates: the fixed program fails anew.
    script = tmp_path / "wgan_gp.py"
    script.write_text(WGAN_GP_PENALTY_IN_A_HELPER)
    result = warm_cli("diagnose", "--fix", "--unsafe-fixes", script)
    assert result.exit_code == 1
    assert "is left as it was" in result.stderr and "fixed " not in result.stderr
    assert script.read_text() == WGAN_GP_PENALTY_IN_A_HELPER
