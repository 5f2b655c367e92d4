"""One comparison of recorded gradients, with one tolerance, for ``verify`` (a safe fix keeps the
gradients) and the repair search (a candidate keeps them, or changes the maths)."""

from gradfix.codemods.execution import repair_judge, verify

EXPECTED = [("optimizer 0 parameter 0.0", [1.0, -2.0, 0.5])]


def rounded(by: float) -> list[tuple[str, list[float]]]:
    return [("optimizer 0 parameter 0.0", [1.0, -2.0 + by, 0.5])]


def test_verify_and_repair_judge_the_same_gradients_alike():
    # Summed in another order, float32 gradients differ in their last digits: equal for both.
    assert verify.compare_gradients(EXPECTED, rounded(5e-6)) is None
    assert repair_judge.compare_gradients(EXPECTED, rounded(5e-6)) is None
    # A change of the maths is one for both, said the same way.
    changed = verify.compare_gradients(EXPECTED, rounded(0.01))
    assert changed == repair_judge.compare_gradients(EXPECTED, rounded(0.01)) == "optimizer 0 parameter 0.0 (#0): differs by 0.01"
