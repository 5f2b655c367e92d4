"""The repair search's cut at the backward that freed the graph (where its graph reads the graph the
failing backward shares with it), and its oracle for rewrites that remove a gradient path: each
on a script of tests/repairs/ rebuilt from the public report on its first line, and on run results
made by hand."""

import shutil

import pytest

from gradfix.codemods.execution.diagnose import diagnose, gradients_lost
from gradfix.codemods.execution.repair import Repair, repair, write_chosen
from gradfix.codemods.execution.repair_candidates import Candidate, Kind
from gradfix.codemods.execution.repair_judge import Attempt
from gradfix.codemods.execution.runner import RunResult

from .test_repair_vocabulary import BOUNDS, REPAIRS


@pytest.fixture
def searched(runs, tmp_path):
    """The repair search on a script of tests/repairs/, what it chose written; the search, and the
    run of the written script."""

    def search(name: str) -> tuple[Repair, RunResult]:
        script = tmp_path / "train.py"
        shutil.copy(REPAIRS / name, script)
        diagnosis = diagnose(script, runs.runner, BOUNDS)
        assert diagnosis.second_backward, diagnosis.run.describe()
        result = repair(diagnosis, runs.runner, BOUNDS)
        assert result.chosen is not None, [f"{a.candidate.description}: {a.outcome()}" for a in result.attempts]
        write_chosen(result, script)
        return result, runs.runner.run(script, BOUNDS)

    return search


def test_an_auxiliary_loss_backwarded_in_a_forward_stops_short_of_the_shared_encoder(searched):
    result, rerun = searched("codebook_optimized_in_place_inside_forward.py")
    chosen = result.chosen
    # The encoder's output is detached where the codebook loss reads it, not where it is built:
    # the reconstruction loss still trains the encoder.
    assert chosen.candidate.description == "detach z where line 24 reads it"
    assert b"codebook_loss = F.mse_loss(nearest, z.detach())" in chosen.candidate.source
    # The gradient the codebook loss sent into the encoder was zeroed before the encoder's step.
    assert chosen.safe, chosen.outcome()
    assert rerun.status == "ok" and "CHECKSUM" in rerun.stdout, rerun.describe()


def test_a_teachers_outputs_read_by_the_distillation_loss_are_detached_there_and_the_removed_path_is_said(searched):
    result, rerun = searched("teacher_outputs_read_by_distillation_loss.py")
    chosen = result.chosen
    assert chosen.candidate.description == "detach teacher_logits where line 26 reads it"
    assert not chosen.safe
    assert "the backward at `distillation.backward()` no longer reaches teacher.0.weight and 3 more" in chosen.outcome()
    assert "no longer reaches teacher.0.weight" in result.why()
    # Dropping the teacher's own backward also runs clean and keeps every leaf reached (through the
    # distillation loss): a drop ranks after the cut.
    dropped = [a for a in result.attempts if a.candidate.kind is Kind.DROPS and a.accepted]
    assert dropped and dropped[0] is not chosen
    assert rerun.status == "ok" and "CHECKSUM" in rerun.stdout, rerun.describe()


TEACHER, STUDENT = "teacher.weight", "optimizer 0 parameter 0.0"


def test_a_leaf_updated_by_hand_beside_an_optimizer_is_not_one_a_rewrite_must_keep_reaching():
    # A teacher kept as a moving average of its student: updated in place, trained by no optimizer.
    original = RunResult("error", reached_leaves={TEACHER, STUDENT}, updated_leaves={TEACHER})
    detached = RunResult("ok", reached_leaves={STUDENT})
    assert gradients_lost(original, detached) == ""
    # Without an optimizer, what the script updates by hand is what it trains.
    by_hand = RunResult("error", reached_leaves={TEACHER}, updated_leaves={TEACHER})
    assert gradients_lost(by_hand, RunResult("ok")) == "teacher.weight gets no gradient"


def test_a_rewrite_that_keeps_every_gradient_path_ranks_before_a_smaller_one_that_removes_one():
    def attempt(description: str, source: bytes, removed: str) -> Attempt:
        made = Attempt(Candidate(description, source, Kind.CUTS, "changes the maths"), RunResult("ok"), removed=removed)
        assert made.accepted and not made.safe
        return made

    original = b"a\nb\nc\n"
    removing = attempt("cut", b"a\nB\nc\n", "the backward at `loss.backward()` no longer reaches teacher.weight")
    keeping = attempt("keep", b"A\nB\nc\n", "")
    assert Repair(original, [removing, keeping]).chosen is keeping
    assert Repair(original, [removing]).chosen is removing
    assert "no longer reaches teacher.weight" in removing.outcome()
