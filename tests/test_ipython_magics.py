"""`%load_ext gradfix` in a session whose cells hold IPython's own syntax: the extension reads the
session's cells as a notebook's (``codemods.notebook``), so a magic, a shell line or an automagic
line in an earlier cell leaves the explanation of a later one as it is."""

from tests.test_ipython import SECOND_BACKWARD, SETUP, TRAIN, start_kernel  # noqa: F401  (start_kernel is a fixture)


def test_an_automagic_cell_before_the_failing_one_leaves_its_explanation_and_fix(start_kernel):
    kernel = start_kernel(["%load_ext gradfix", SETUP, "cd .", "pwd", "files = !ls\n%time x = 1"])
    failing = kernel.run(TRAIN)
    n = failing.count
    assert [name for name, _ in failing.errors] == ["RuntimeError"] and SECOND_BACKWARD in failing.errors[0][1]
    assert f"rule: GF003 forward_outside_loop: `predictions` is computed once before the loop at In [{n}], line 2" in failing.stdout
    assert "`%gradfix fix` in a new cell" in failing.stdout
