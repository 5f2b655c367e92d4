"""`diagnose` with a repair search: where the static rules only report, candidate rewrites at the
blamed lines are run, and the one the run proves is kept."""

import shutil

import libcst as cst
import pytest

from gradfix.codemods.execution.diagnose import diagnose
from gradfix.codemods.files import FileChanged
from gradfix.codemods.execution.repair import candidates, repair, write_chosen
from gradfix.codemods.execution.runner import RunOptions

from .conftest import FIXTURES

BOUNDS = RunOptions(timeout=60)


def searched(name: str, runs, tmp_path, rules_fix: tuple[str, ...] = ()):
    """The search's repair of a script; ``rules_fix``: the codes whose unsafe fixes the rules have
    for it too (none: a shape the rules only report)."""
    script = tmp_path / "train.py"
    shutil.copy(name, script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward
    assert [f.code for f in diagnosis.fix.fixed] == list(rules_fix) if diagnosis.fix else not rules_fix
    return script, diagnosis, repair(diagnosis, runs.runner, BOUNDS)


def test_sam_second_pass_gets_its_second_forward(runs, tmp_path):
    # (GF002's unsafe fix computes the forward again too; the search finds it on its own)
    script, diagnosis, result = searched(
        FIXTURES / "gf002_separate_backwards" / "reported_report_sam_reused_output" / "reported.py", runs, tmp_path, ("GF002",)
    )
    chosen = result.chosen
    assert chosen is not None and "again before the backward" in chosen.candidate.description
    assert not chosen.safe  # the second backward now sees the perturbed weights: the maths SAM means
    write_chosen(result, script)
    fixed = script.read_text()
    assert "optimizer.first_step(zero_grad=True)\n    output = model(images)\n" in fixed
    assert "retain_graph" not in fixed
    assert runs.runner.run(script, BOUNDS).succeeded
    assert all(a.candidate.source != result.original for a in result.attempts)


def test_value_cached_in_init_is_detached_with_the_same_gradients(runs, tmp_path):
    script, _, result = searched(FIXTURES / "gf006_cached_graph" / "reported_minigp_length_scale_exp_in_init" / "reported.py", runs, tmp_path)
    chosen = result.chosen
    assert chosen is not None and chosen.safe, [a.outcome() for a in result.attempts]
    assert chosen.candidate.description == "detach the value where it is stored (line 23)"
    assert "torch.log(torch.tensor(length_scale)))).detach()" in chosen.candidate.source.decode()


def test_a_backward_whose_gradients_zero_grad_throws_away_is_dropped_safely(runs, tmp_path):
    # zero_grad between the two backwards discards the first one's gradients: without it the
    # step sees what the author's code (with retain_graph=True) gives it; a merge would not.
    _, _, result = searched(FIXTURES / "gf002_separate_backwards" / "reported_zero_grad_between" / "reported.py", runs, tmp_path)
    chosen = result.chosen
    assert chosen is not None and chosen.safe, [a.outcome() for a in result.attempts]
    assert chosen.candidate.description == "drop the call at line 17 (`sparsity.backward()`)"
    assert "sparsity.backward()" not in chosen.candidate.source.decode() and "fit.backward()" in chosen.candidate.source.decode()


def test_no_candidate_works_and_nothing_is_written(runs, tmp_path):
    # The rebuilt LIF cell feeds its input only into the state the next batch reads: every
    # rewrite that runs stops the input weights training.
    script, _, result = searched(FIXTURES / "gf004_carried_state" / "unsafe_lif_namedtuple_state" / "before.py", runs, tmp_path)
    assert result.attempts and all(not a.accepted for a in result.attempts)
    # Detaching the state after each backward follows its structure (a namedtuple), and runs.
    rebuilt = next(a for a in result.attempts if "state = type(state)(*(part.detach() for part in state))" in a.candidate.source.decode())
    assert rebuilt.run.succeeded and rebuilt.lost and not rebuilt.accepted
    assert result.chosen is None
    assert result.why().startswith("no candidate rewrite is accepted: ")
    assert "run clean but lose a gradient the original computes (cell.input_weights.weight" in result.why()
    assert script.read_bytes() == result.original
    assert not [p for p in tmp_path.iterdir() if p.name != "train.py"], "no candidate file is left behind"


def test_a_detach_that_stops_a_parameter_training_is_refused(runs, tmp_path):
    _, _, result = searched(FIXTURES / "gf002_separate_backwards" / "reported_step_between_loader_loop" / "reported.py", runs, tmp_path)
    detaching = [a for a in result.attempts if a.candidate.description.startswith("detach the value") and a.run.succeeded]
    assert detaching and all(a.lost.endswith("gets no gradient") and not a.accepted for a in detaching)


def test_writing_refuses_a_script_edited_during_the_search(runs, tmp_path):
    script, _, result = searched(FIXTURES / "gf006_cached_graph" / "reported_minigp_length_scale_exp_in_init" / "reported.py", runs, tmp_path)
    script.write_text(script.read_text() + "# edited meanwhile\n")
    with pytest.raises(FileChanged):
        write_chosen(result, script)
    assert script.read_text().endswith("# edited meanwhile\n")


def test_candidates_never_touch_optimizer_updates_nor_retain_graphs(runs, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "gf002_separate_backwards" / "reported_step_between_module_level" / "reported.py", script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    original = script.read_bytes()
    steps = [line for line in original.decode().splitlines() if ".step(" in line or "zero_grad" in line]
    found = candidates(diagnosis)
    assert found
    for candidate in found:
        source = candidate.source.decode()
        cst.parse_module(source)
        assert "retain_graph" not in source
        assert [line for line in source.splitlines() if ".step(" in line or "zero_grad" in line] == steps


def test_cli_diagnose_fix_writes_the_proven_rewrite_and_says_why(warm_cli, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "gf006_cached_graph" / "reported_minigp_length_scale_exp_in_init" / "reported.py", script)
    result = warm_cli("diagnose", "--fix", script)
    assert result.exit_code == 0, result.output
    assert "[chosen] detach the value where it is stored (line 23)" in result.stdout
    assert "chosen because it runs clean and its gradients equal" in result.stdout
    assert "[failed]" in result.stdout  # the candidates that did not work, one line each
    assert ").detach()\n" in script.read_text()


def test_srgan_generator_step_computes_its_fake_and_score_again_and_no_detach_is_accepted(runs, tmp_path):
    # SRGAN: optimizerD.step() changes D in place between the backwards, so even retain_graph=True
    # fails; detaching D's score on the fake runs clean but changes the discriminator's step that
    # worked. Computing G's output and D's score again after D's step keeps it.
    script, diagnosis, result = searched(
        FIXTURES / "gf005_gan_detach" / "reported_srgan_generator_loss_reuses_d_step_score" / "reported.py", runs, tmp_path
    )
    assert diagnosis.kept_in == "`fake_out` (a global variable of the script)"
    assert result.reference is not None and not result.reference.succeeded
    # Detaching the score where it is stored runs, but changes the discriminator's first step.
    detached = next(a for a in result.attempts if a.candidate.description == "detach the value where it is stored (line 64)")
    assert detached.run.succeeded and detached.changed_completed and not detached.accepted
    assert not [a for a in result.attempts if a.accepted and a.candidate.description.startswith("detach")]
    chosen = result.chosen
    assert chosen is not None and chosen.candidate.description == "compute line 64 again before the backward at line 74"
    assert not chosen.safe  # the generator now sees the updated discriminator: what the SRGAN authors did
    write_chosen(result, script)
    assert ("        optimizerD.step()\n        fake_img = netG(z)\n        fake_out = netD(fake_img).mean()\n") in script.read_text()
    assert "optimizerD.step()" in script.read_text()
    assert runs.runner.run(script, BOUNDS).succeeded


def test_a_backward_inside_training_step_is_dropped_for_the_scaled_one(runs, tmp_path):
    _, _, result = searched(
        FIXTURES / "gf001_duplicate_backward" / "reported_report_step_backward_then_scaled_backward" / "reported.py",
        runs,
        tmp_path,
    )
    chosen = result.chosen
    assert chosen is not None and chosen.safe and chosen.candidate.description == "drop the call at line 16 (`loss.backward()`)"
    assert "    loss.backward()\n    return loss" not in chosen.candidate.source.decode()
    assert "scaler.scale(loss).backward()" in chosen.candidate.source.decode()


def test_a_graph_built_in_a_sibling_module_is_detached_in_that_module(runs, tmp_path):
    # The neural style tutorial as users lay it out: the losses in their own module beside the script.
    tutorial = (FIXTURES / "gf006_cached_graph" / "unsafe_tutorial_style_loss_target_in_init" / "before.py").read_text()
    head, rest = tutorial.split("class ContentLoss", 1)
    losses, script_rest = ("class ContentLoss" + rest).split("def get_style_model_and_losses", 1)
    module = tmp_path / "style_losses.py"
    module.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n" + losses)
    script = tmp_path / "train.py"
    script.write_text(head + "from style_losses import ContentLoss, StyleLoss\n\n\ndef get_style_model_and_losses" + script_rest)
    original_script = script.read_bytes()
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert [f.path for f in diagnosis.run.forward_frames if f.path] == [str(module)] * 2
    assert diagnosis.kept_in == "`self.target` (an attribute of the object, kept between calls), in style_losses.py"
    result = repair(diagnosis, runs.runner, BOUNDS)
    chosen = result.chosen
    assert chosen is not None and chosen.safe, [a.outcome() for a in result.attempts]
    assert chosen.candidate.module == module
    assert chosen.candidate.description == "detach the value where it is stored (style_losses.py line 26)"
    write_chosen(result, script)
    assert "        self.target = gram_matrix(target_feature).detach()\n" in module.read_text()
    assert script.read_bytes() == original_script
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["style_losses.py", "train.py"]
    assert runs.runner.run(script, BOUNDS).succeeded


def test_side_by_side_runs_reach_the_same_outcomes(runs, tmp_path):
    script, diagnosis, one_at_a_time = searched(
        FIXTURES / "gf006_cached_graph" / "reported_minigp_length_scale_exp_in_init" / "reported.py", runs, tmp_path
    )
    side_by_side = repair(diagnosis, runs.runner, BOUNDS, jobs=2)
    assert [a.outcome() for a in side_by_side.attempts] == [a.outcome() for a in one_at_a_time.attempts]
    assert side_by_side.chosen.candidate == one_at_a_time.chosen.candidate
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_a_bank_cleared_only_on_sync_is_cleared_every_micro_batch(runs, tmp_path):
    script, _, result = searched(FIXTURES / "gf004_carried_state" / "reported_accel_reference_bank_cleared_on_sync" / "reported.py", runs, tmp_path)
    chosen = result.chosen
    assert chosen is not None and not chosen.safe, [a.outcome() for a in result.attempts]
    # The run names the bank that held the freed graph; it is cleared as each micro-batch starts.
    assert chosen.candidate.description == "clear net.reference_net.bank where each iteration of the loop at line 64 starts"
    write_chosen(result, script)
    assert "in enumerate(batches):\n    net.reference_net.bank.clear()\n" in script.read_text()
    assert runs.runner.run(script, BOUNDS).succeeded


def test_cli_says_when_no_candidate_works_exits_1_and_writes_nothing(warm_cli, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "gf004_carried_state" / "unsafe_lif_namedtuple_state" / "before.py", script)
    original = script.read_bytes()
    result = warm_cli("diagnose", "--fix", "--unsafe-fixes", script)
    assert result.exit_code == 1, result.output
    assert "run clean but lose a gradient the original computes" in result.stderr
    assert result.stderr.rstrip().endswith(f"; {script} is unchanged")
    assert "[chosen]" not in result.stdout and "[failed]" in result.stdout
    assert script.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
