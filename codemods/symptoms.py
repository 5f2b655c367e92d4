"""What a bug does when its program runs, and how a run shows that a fix removed it.

A rule declares its symptom; ``execution.verify`` runs a fixture's ``before.py`` and ``after.py`` and
asks the symptom to judge the two runs. Most bugs raise an error. Silent ones do not: a graph kept
alive for logging shows as a count of live graph nodes that grows with every optimizer step; a
backward placed after the batch loop shows as fewer backward calls than the fixed program makes.
A symptom only reads a run's recorded facts; it never runs anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


class Run(Protocol):
    """The facts of one run that symptoms read (``execution.runner.RunResult``)."""

    status: str
    error_message: str
    backward_calls: int
    live_graph_nodes: list[int]

    def describe(self) -> str: ...


Judgement = tuple[bool, str]


class Symptom:
    measures_graphs: bool = False  # the runner counts live graph nodes at every optimizer step

    @property
    def description(self) -> str:
        raise NotImplementedError

    def shown_by(self, run: Run) -> Judgement:
        """Whether a run of the buggy program shows the bug."""
        raise NotImplementedError

    def gone(self, before: Run, after: Run) -> Judgement:
        """Whether the fixed program runs without it."""
        return after.status == "ok", after.describe()

    def absent_from(self, run: Run) -> Judgement:
        """Whether correct code runs without it."""
        return run.status == "ok", run.describe()


@dataclass(frozen=True)
class RaisesError(Symptom):
    text: str

    @property
    def description(self) -> str:
        return f"raises '{self.text}'"

    def shown_by(self, run: Run) -> Judgement:
        return run.status == "error" and self.text in run.error_message, run.describe()


SECOND_BACKWARD = RaisesError("Trying to backward through the graph a second time")


@dataclass(frozen=True)
class GraphsKeptAlive(Symptom):
    """More graph nodes stay alive after every step: memory grows without bound."""

    description: str = "live graph nodes grow with every optimizer step"
    measures_graphs: bool = True
    min_steps: int = 3

    def shown_by(self, run: Run) -> Judgement:
        counts = run.live_graph_nodes
        grows = _ran(run) and len(counts) >= self.min_steps and _increasing(counts[-self.min_steps :])
        return grows, f"{run.describe()}; live graph nodes at each step: {_shown(counts)}"

    def gone(self, before: Run, after: Run) -> Judgement:
        return self.absent_from(after)

    def absent_from(self, run: Run) -> Judgement:
        counts = run.live_graph_nodes
        flat = _ran(run) and len(counts) >= self.min_steps and max(counts[1:]) <= counts[1]
        return flat, f"{run.describe()}; live graph nodes at each step: {_shown(counts)}"


@dataclass(frozen=True)
class LastBatchOnly(Symptom):
    """One backward per epoch where the fixed program backwards every batch."""

    description: str = "only the last batch of each loop reaches backward"

    def shown_by(self, run: Run) -> Judgement:
        return run.status == "ok", f"{run.describe()}; {run.backward_calls} backward call(s)"

    def gone(self, before: Run, after: Run) -> Judgement:
        # Under a step bound, reaching it where the buggy run ended first also backwards more.
        more = _ran(after) and (after.backward_calls > before.backward_calls or (after.status == "stopped" and before.status == "ok"))
        return more, f"{after.describe()}; {before.backward_calls} backward call(s) before the fix, {after.backward_calls} after"


@dataclass(frozen=True)
class RunsCorrectly(Symptom):
    """Nothing fails or grows: the fix removes a cost (memory held for nothing), not an error."""

    description: str = "runs; the fix keeps its gradients and frees memory"

    def shown_by(self, run: Run) -> Judgement:
        return run.status == "ok", run.describe()


def _ran(run: Run) -> bool:
    """Ran without error, to its end or to the step bound it was given."""
    return run.status in ("ok", "stopped")


def _increasing(counts: Sequence[int]) -> bool:
    return all(a < b for a, b in zip(counts, counts[1:]))


def _shown(counts: Sequence[int]) -> str:
    return ", ".join(map(str, counts[:12])) + (" …" if len(counts) > 12 else "") if counts else "none recorded"
