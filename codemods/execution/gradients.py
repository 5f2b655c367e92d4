"""The one comparison of two runs' recorded gradients, with its one tolerance: what ``verify``
checks a safe fix keeps, and what the repair search checks a candidate keeps or changes."""

from __future__ import annotations

# Gradients equal up to float32 rounding: backwarding two losses at once, or one fewer time, sums
# the same terms in another order, and the steps after carry the difference on. It is measured
# against the tensor's largest gradient, with a floor for a tensor whose gradients are all near 0.
RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-4, 1e-6

Recorded = list[tuple[str, list[float]]]  # (label, the tensor's values flattened), in recording order


def compare_gradients(expected: Recorded, actual: Recorded) -> str | None:
    """None when the two recordings are equal up to the tolerance, else what differs first."""
    if [label for label, _ in expected] != [label for label, _ in actual]:
        return f"different tensors recorded: {len(expected)} vs {len(actual)}"
    for index, ((label, a), (_, b)) in enumerate(zip(expected, actual)):
        if len(a) != len(b):
            return f"{label} (#{index}): sizes {len(a)} and {len(b)}"
        worst = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
        if worst > ABSOLUTE_TOLERANCE + RELATIVE_TOLERANCE * max(map(abs, a), default=0.0):
            return f"{label} (#{index}): differs by {worst:.3g}"
    return None


def tolerance_in_words() -> str:
    return f"{RELATIVE_TOLERANCE:g} of each tensor's largest gradient (at least {ABSOLUTE_TOLERANCE:g})"
