"""The repair search's vocabulary, each kind on a script rebuilt from the public report on its
first line (tests/repairs/): the search is run directly (a rule may have a fix of its own for
some of them), and what it chose is written and run again."""

import shutil
from pathlib import Path

import pytest

from gradfix.codemods.execution.diagnose import diagnose
from gradfix.codemods.execution.repair import repair, write_chosen
from gradfix.codemods.execution.runner import RunOptions

REPAIRS = Path(__file__).parent / "repairs"
BOUNDS = RunOptions(timeout=60)


@pytest.fixture
def repaired(runs, tmp_path):
    """Diagnose and repair a script of tests/repairs; write what was chosen and run it again."""

    def search(name: str):
        script = tmp_path / "train.py"
        shutil.copy(REPAIRS / name, script)
        diagnosis = diagnose(script, runs.runner, BOUNDS)
        assert diagnosis.second_backward, diagnosis.run.describe()
        result = repair(diagnosis, runs.runner, BOUNDS)
        chosen = result.chosen
        assert chosen is not None, [f"{a.candidate.description}: {a.outcome()}" for a in result.attempts]
        write_chosen(result, script)
        rerun = runs.runner.run(script, BOUNDS)
        assert rerun.status == "ok", rerun.describe()
        return diagnosis, chosen, script.read_text()

    return search


def test_an_error_after_the_first_epoch_is_reached_and_the_state_holding_its_graph_detached(repaired):
    diagnosis, chosen, fixed = repaired("moving_stats_second_epoch.py")
    # Four backward calls and steps ran clean before the error: a bound of five would have missed it.
    assert diagnosis.run.optimizer_steps == 4 and diagnosis.run.backward_calls == 4
    assert chosen.candidate.description == "detach net[1].moving_mean, net[1].moving_var after the backward at line 47"
    assert not chosen.safe and "truncates backpropagation through net[1].moving_mean" in chosen.outcome()
    assert "        loss.backward()\n        net[1].moving_mean = net[1].moving_mean.detach()\n" in fixed


def test_each_loss_of_a_tuple_is_summed_and_backwarded_once(repaired):
    _, chosen, fixed = repaired("losses_of_a_tuple.py")
    assert chosen.safe, chosen.outcome()
    assert "    loss_sum = 0\n    for loss in losses:\n        loss_sum = loss_sum + loss\n    loss_sum.backward()\n" in fixed


def test_a_backward_in_a_module_is_deferred_to_the_backward_that_failed(repaired):
    _, chosen, fixed = repaired("gate_auxiliary_loss_backwarded_in_forward.py")
    assert chosen.safe, chosen.outcome()
    assert chosen.candidate.description == "defer the backward at line 21 to the one at line 42, which backwards both"
    assert "deferred_losses.append(aux_loss)" in fixed and "(loss + sum(deferred_losses)).backward()" in fixed
    assert "aux_loss.backward()" not in fixed and "deferred_losses.clear()" in fixed


def test_a_backward_in_a_loss_computation_is_added_to_the_loss_it_returns(repaired):
    _, chosen, fixed = repaired("regularizer_backwarded_in_compute_loss.py")
    assert chosen.safe, chosen.outcome()
    assert "regularizer.backward()" not in fixed
    assert "        return F.cross_entropy(logits, labels) + regularizer\n" in fixed


def test_an_optional_loss_is_merged_into_the_earlier_backward_across_its_if(repaired):
    _, chosen, fixed = repaired("optional_style_loss.py")
    assert chosen.safe, chosen.outcome()
    assert (
        "        if self.use_style:\n"
        "            style_loss = F.mse_loss(gram(fake), gram(target))\n"
        "            ((perceptual_loss + gan_loss) + style_loss).backward()\n"
        "        else:\n"
        "            (perceptual_loss + gan_loss).backward()\n"
    ) in fixed


def test_a_call_on_the_stack_of_the_backward_that_freed_the_graph_is_dropped(repaired):
    # The helper backwards each term to record a gradient, then zeroes it: dropping its backward
    # changes nothing the step sees.
    diagnosis, chosen, fixed = repaired("gradients_logged_by_a_helper.py")
    assert [frame.line for frame in diagnosis.run.freeing_frames] == [28, 16]
    assert chosen.safe and chosen.candidate.description == "drop the call at line 28 (`record_alpha_gradients(error_loss, resource_loss)`)"
    assert "    optimizer.zero_grad()\n    loss = error_loss + resource_loss\n    loss.backward()\n" in fixed


def test_a_gradient_that_freed_what_a_later_backward_needs_is_taken_with_create_graph(repaired):
    _, chosen, fixed = repaired("penalty_of_gradients_taken_without_graph.py")
    assert chosen.candidate.description == "take the gradient at line 17 with create_graph=True"
    assert "    mean_grad = torch.autograd.grad(mean_loss, list(network.parameters()), create_graph=True)\n" in fixed


def test_a_state_object_is_detached_by_its_own_detach_and_the_truncation_is_unsafe(repaired):
    # Each window steps the optimizer in place: even retain_graph=True fails, so the original's
    # own backward calls are the reference, and the truncation is said, not proved.
    diagnosis, chosen, fixed = repaired("decoder_state_across_truncation.py")
    assert chosen.candidate.description == "detach state after the backward at line 45"
    assert not chosen.compared and not chosen.safe
    assert "truncates backpropagation through state at each backward at line 45" in chosen.outcome()
    assert "    loss.backward()\n    state.detach()\n    optimizer.step()\n" in fixed


def test_a_cache_is_reset_as_its_constructor_sets_it(repaired):
    _, chosen, fixed = repaired("cached_normalized_adjacency.py")
    assert chosen.candidate.description == "reset model._cached_adjacency where each iteration of the loop at line 29 starts"
    assert "for step in range(3):\n    model._cached_adjacency = None\n" in fixed


def test_a_score_read_again_after_the_backward_that_freed_it_is_detached_there(repaired):
    _, chosen, fixed = repaired("real_score_reused_by_fake_loss.py")
    assert chosen.candidate.description == "detach pred_d_real where the module's code reads it after the backward at line 21"
    assert "pred_d_fake - pred_d_real.detach().mean()" in fixed and "pred_d_real - pred_d_fake.mean()" in fixed


def test_a_value_computed_in_init_is_computed_again_where_it_is_read(repaired):
    # Detaching it where it is stored would stop the length scale training: refused.
    _, chosen, fixed = repaired("scale_exponentiated_in_init.py")
    assert chosen.candidate.description == "compute `self.length_scale` (stored from line 14) again where it is read"
    assert "distances / self.log_length_scale.exp()**2" in fixed


def test_a_global_computed_before_training_is_computed_again_by_the_function_that_reads_it(repaired):
    _, chosen, fixed = repaired("embeddings_computed_before_training.py")
    assert chosen.candidate.description == "compute line 14 again at the start of `train_epoch`, which reads it"
    assert "def train_epoch():\n    frozen_embeddings = embedder(token_ids)\n" in fixed


def test_a_loss_computed_before_the_loop_is_computed_again_in_it_with_its_inputs(repaired):
    _, chosen, fixed = repaired("loss_cell_run_once.py")
    assert chosen.candidate.description.startswith("compute line 12 again at the start of every iteration of the loop at line 14")
    assert (
        "for i in range(5):\n"
        "    predictions = abc[0] * x**2 + abc[1] * x + abc[2]\n"
        "    loss = torch.abs(predictions - y).mean()\n"
        "    loss.backward()\n"
    ) in fixed


def test_a_sum_the_second_pass_adds_onto_is_detached_after_the_first_backward(repaired):
    # The perturbation moves the weights in place: the retain_graph=True run fails too, so the
    # detach is said, not proved; the first pass's sum keeps its value and loses its graph.
    _, chosen, fixed = repaired("second_pass_adds_onto_first_pass_sum.py")
    assert chosen.candidate.description == "detach total after the backward at line 46"
    assert not chosen.compared and "truncates backpropagation through total" in chosen.outcome()
    assert "    total.backward()\n    total = total.detach()\n    optimizer.climb()\n" in fixed


def test_logits_reused_after_a_step_are_computed_again_where_the_if_first_reads_them_not_dropped(repaired):
    # Dropping the estimate's backward also runs clean (the estimate skips a missing gradient),
    # but nothing can be safe here (the step changed the weights in place): the first accepted
    # is chosen, and drops come after the other rewrites.
    _, chosen, fixed = repaired("hessian_estimate_reuses_step_logits.py")
    assert chosen.candidate.description == "compute line 18 again before the backward at line 26"
    assert not chosen.compared
    assert "    if step % 2 == 1:\n        logits = model(inputs)\n        sampled = " in fixed
    assert "        sampled_loss.backward()\n" in fixed
