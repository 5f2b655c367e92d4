"""What the runs prove of a candidate rewrite: the repair search's judge. A candidate is accepted
when:

* it runs clean (to the end, or for a few times the original's time to its error);
* it loses no gradient: every leaf an optimizer of the original trains (without one, every leaf
  it updates by hand) that a backward of the original reached (the failing one included) still
  gets one, at every step of the optimizer that owns it. A backward that no longer reaches a leaf
  it reached (a teacher's weights, the encoder under an auxiliary loss) removes that gradient
  path: the rewrite changes the maths, says which path it removes, and ranks after the ones
  that remove none;
* it keeps what worked: the gradients of the optimizer steps the original completed before it
  failed are unchanged.

It is *safe* when its gradients, and its modules' buffers at each step (a forward run once more
updates a batch norm's running statistics), equal those of the original run with
``retain_graph=True``: the maths is what the author wrote. Any other accepted candidate changes the maths (each says how,
e.g. "truncates backpropagation at each iteration") and is written only with ``--unsafe-fixes``.
When the ``retain_graph=True`` run itself fails, nothing can be safe.

Apart from the search, which decides what runs and when to stop: the judge reads runs, never code.
"""

from __future__ import annotations

from dataclasses import dataclass

from .diagnose import gradients_lost, leaves_in_words, trained_leaves
from .gradients import compare_gradients
from .repair_candidates import Candidate
from .runner import RunResult


@dataclass
class Attempt:
    candidate: Candidate
    run: RunResult | None  # None when the time budget ran out before it could run
    compared: bool = False  # there was a retain_graph=True run to compare gradients with
    gradient_difference: str | None = None  # what differs from it, over the steps both reached
    lost: str = ""  # a gradient the original asks for that this rewrite never computes
    changed_completed: str = ""  # how it changes the optimizer steps the original completed
    removed: str = ""  # the gradient paths of the original it removes, in words

    @property
    def accepted(self) -> bool:
        return self.run is not None and self.run.succeeded and not self.lost and not self.changed_completed

    @property
    def safe(self) -> bool:
        return self.accepted and self.compared and self.gradient_difference is None

    def outcome(self) -> str:
        if self.run is None:
            return "not run: the time budget was spent"
        if not self.run.succeeded:
            return self.run.describe().split(". ")[0]
        if self.lost:
            return f"runs, but loses gradients the original computes ({self.lost})"
        if self.changed_completed:
            return f"runs, but changes the steps the original completed before failing ({self.changed_completed})"
        if self.safe:
            return "runs clean; gradients equal the retain_graph=True run"
        difference = f" ({self.gradient_difference})" if self.compared else ""
        if self.removed:
            return f"runs clean and every trained leaf keeps a gradient, but {self.removed}: it {self.candidate.change}{difference}"
        if self.compared:
            return f"runs clean and loses no gradient, but it {self.candidate.change}{difference}"
        return f"runs clean and loses no gradient; it {self.candidate.change}"


def _judge(attempt: Attempt, original: RunResult, retained: RunResult | None) -> None:
    """What the runs show of a candidate: the gradients it loses, whether it changes the steps
    that worked, and how its gradients compare with the run that kept every graph."""
    run = attempt.run
    if run is None or not run.succeeded:
        return
    # Gradients something applies: an optimizer's, or those the original applied by hand (a
    # frozen encoder or a ground-truth tensor may require a gradient no one wants).
    attempt.lost = gradients_lost(original, run)
    if not attempt.lost:
        # An optimizer's parameter the original trains must get a gradient at each of its steps:
        # a cache detached after the first step still trains it once.
        trained = trained_leaves(original)
        lost = sorted({label for label, values in _step_gradients(run) if not values and label in trained})
        if lost:
            attempt.lost = f"{leaves_in_words(original, lost)} gets no gradient"
    attempt.removed = _removed_paths(original, run)
    completed = _compared_gradients(original, original)
    if completed:
        actual = _compared_gradients(run, original)[: len(completed)]
        difference = compare_gradients(completed, actual) if len(actual) == len(completed) else "fewer steps recorded"
        attempt.changed_completed = difference or ""
    if retained is not None:
        expected = _compared_gradients(retained, retained, with_buffers=True)
        actual = _compared_gradients(run, retained, with_buffers=True)
        common = min(len(expected), len(actual))
        attempt.compared = True
        attempt.gradient_difference = compare_gradients(expected[:common], actual[:common]) if common else "no optimizer step recorded"


def _removed_paths(original: RunResult, run: RunResult) -> str:
    """The leaves a backward of the original reached that the same backward of ``run`` (the same
    code) no longer reaches, in words; "" when there are none."""
    removed = []
    for site, reached in original.reached_by_backward.items():
        if site in run.reached_by_backward and reached - run.reached_by_backward[site]:
            removed.append(f"the backward at {site} no longer reaches {leaves_in_words(original, sorted(reached - run.reached_by_backward[site]))}")
    return "; ".join(removed)


def _step_gradients(run: RunResult) -> list[tuple[str, list[float]]]:
    return [(label, values) for label, values in run.gradients if label.startswith("optimizer ")]


def _compared_gradients(run: RunResult, reference: RunResult, with_buffers: bool = False) -> list[tuple[str, list[float]]]:
    """The gradients of ``run`` compared with ``reference``'s: at each optimizer step (``with_buffers``:
    and the buffers of the script's modules there, which a forward run once more changes: a safe
    rewrite keeps them too); without an optimizer, after each backward, of the tensors the reference
    run updated (a gradient nothing applies is not one the rewrite must keep)."""
    if _step_gradients(reference) or reference.optimizer_steps:
        return [(label, values) for label, values in run.gradients if label.startswith("optimizer ") or with_buffers and label.endswith(" buffer")]
    updated = reference.updated_leaves
    return [(label, values) for label, values in run.backward_gradients if label.split(": ", 1)[1] in updated]
