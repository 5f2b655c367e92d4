"""One bug, one code: turning a rule off does not make the same bug appear under the rule that
explains what the others do not (GF010), however it is turned off."""

from typer.testing import CliRunner

import gradfix
from gradfix.cli.app import app

TWICE = """\
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    loss.backward(){comment}
    optimizer.step()
"""


def codes(source, **options):
    return [f.code for f in gradfix.check(source, **options).findings]


def test_the_bug_is_gf001_and_turned_off_it_is_not_gf010():
    source = TWICE.format(comment="")
    assert codes(source) == ["GF001"]
    assert codes(source, ignore="GF001") == []
    assert codes(source, select="GF010") == []
    assert codes(TWICE.format(comment="  # noqa: GF001")) == []


def test_per_file_ignores_and_the_ignore_option_agree_with_noqa(tmp_path):
    (tmp_path / "train.py").write_text(TWICE.format(comment=""))
    runner = CliRunner()
    by_option = runner.invoke(app, ["check", "--no-cache", "--ignore", "GF001", str(tmp_path)])
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix.per-file-ignores]\n"train.py" = ["GF001"]\n')
    by_setting = runner.invoke(app, ["check", "--no-cache", str(tmp_path)])
    for result in (by_option, by_setting):
        assert (result.exit_code, result.stdout) == (0, "")
