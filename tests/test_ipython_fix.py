"""`%gradfix fix` where the notebook ignores the request to replace the cell, as nbclient (which drives
these kernels) and Colab do: the cell keeps `%gradfix fix`, so the fixed code is printed below it,
with a message that says so."""

from .test_ipython import SETUP, TRAIN, TRAIN_FIXED, start_kernel  # noqa: F401 (a fixture)


def test_the_fixed_code_is_printed_where_the_cell_is_not_replaced(start_kernel):
    kernel = start_kernel(["%load_ext gradfix", SETUP])
    assert [name for name, _ in kernel.run(TRAIN).errors] == ["RuntimeError"]
    fix = kernel.run("%gradfix fix")
    assert fix.payloads == [{"source": "set_next_input", "text": TRAIN_FIXED, "replace": True}]
    assert kernel.client.nb.cells[-1].source == "%gradfix fix", "nbclient replaced the cell: this test shows nothing"
    message, printed = fix.stdout.split("\n", 1)
    assert "Where the notebook ignores the request to replace this cell (nbclient, Colab), it is unchanged" in message
    assert printed == TRAIN_FIXED + "\n"
    rerun = kernel.run(printed)
    assert rerun.errors == [] and rerun.stdout == "trained 2\n"
