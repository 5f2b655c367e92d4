"""``gradfix fix --verify CMD``: rewrites are applied only when CMD, run in copies of the tree
without and with them, agrees (codemods/execution/verify_command.py)."""

import os
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods.execution.verify_command import Verdict, _bisected

FIXTURES = Path(__file__).parent / "fixtures"
REAL_BREAKS = Path(__file__).resolve().parents[2] / "shared" / "real-breaks"  # programs a fix once broke

# A correct loop whose last backward keeps its graph for nothing: GF009's safe fix keeps the results.
NEEDLESS_RETAIN = """import torch


def train(steps):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 3)
    for _ in range(steps):
        out = model(x)
        first = out.pow(2).mean()
        second = out.abs().mean()
        first.backward(retain_graph=True)
        second.backward(retain_graph=True)
        opt.step()
        opt.zero_grad()
    return model.weight.sum().item()
"""
# Each step's loss is kept, and what the program returns reads autograd's record of them: GF007's
# unsafe fix (store `loss.detach()`) changes what it prints.
KEPT_AND_READ = """import torch


def train():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    for _ in range(2):
        loss = model(torch.randn(4, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(loss)
    return sum(int(k.requires_grad) for k in kept)
"""
# CMD's script: it also tells where it ran and what environment it got.
MAIN = """import os
import sys

import torch

import bad
import good

leaf = torch.ones(2, requires_grad=True)
torch.autograd.backward(t.sum() for t in [leaf])  # a generator: the recorder must leave it to backward
with open(sys.argv[1], "w") as seen:
    seen.write(f"{leaf.grad.tolist()}\\n" + os.getcwd() + "\\n" + "\\n".join(os.environ))
print(good.train(3), bad.train())
"""


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_only_rewrites_the_runs_verify_are_applied_each_reported(project, tmp_path, monkeypatch):
    (project / "good.py").write_text(NEEDLESS_RETAIN)
    (project / "bad.py").write_text(KEPT_AND_READ)
    (project / "unused.py").write_text(NEEDLESS_RETAIN.replace("def train", "def unused_train"))
    (project / "main.py").write_text(MAIN)
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("GRADFIX_TEST_TOKEN", "a secret")
    result = cli("fix", "--unsafe-fixes", "--verify", f"python main.py {seen}", ".")
    assert result.exit_code == 1, result.output  # the refused fix leaves its finding
    assert "second.backward()\n" in (project / "good.py").read_text()
    assert (project / "bad.py").read_text() == KEPT_AND_READ
    assert "second.backward(retain_graph=True)" in (project / "unused.py").read_text()
    lines = result.stderr.splitlines()
    assert "good.py: verified" in lines
    [refused] = [line for line in lines if line.startswith("bad.py: not applied, refused: ")]
    assert "line 1 of CMD's output" in refused
    assert "unused.py: not applied, not exercised: CMD never ran it" in lines
    gradient, ran_in, *environment = seen.read_text().splitlines()
    assert gradient == "[1.0, 1.0]"
    assert not Path(ran_in).exists() and Path(ran_in) != project  # a copy, removed afterwards
    assert "PATH" in environment and "GRADFIX_TEST_TOKEN" not in environment


def test_a_fix_of_the_second_backward_error_is_verified_against_retain_graph(project, warm_cli):
    case = FIXTURES / "gf002_separate_backwards" / "interleaved_statements"
    (project / "train.py").write_bytes((case / "before.py").read_bytes())
    result = warm_cli("fix", "--verify", "python train.py", "train.py")
    assert result.exit_code == 0, result.output
    assert (project / "train.py").read_bytes() == (case / "after.py").read_bytes()
    assert "train.py: verified" in result.stderr.splitlines()


def test_without_an_optimizer_a_merged_backward_is_verified_by_the_gradients_it_leaves(project, warm_cli):
    case = FIXTURES / "gf002_separate_backwards" / "two_heads_backwarded_with_their_gradients"  # a gradient check: no optimizer
    (project / "train.py").write_bytes((case / "before.py").read_bytes())
    result = warm_cli("fix", "--verify", "python train.py", "train.py")
    assert result.exit_code == 0, result.output
    assert (project / "train.py").read_bytes() == (case / "after.py").read_bytes()
    assert "train.py: verified" in result.stderr.splitlines()


def test_the_warm_command_line_lends_fix_verify_its_runner_and_starts_none(project, warm_cli, monkeypatch):
    """What the tests above lean on: a cold runner's server costs seconds of importing torch, which
    the session's warm one already paid (the first test of this file starts its own)."""
    from gradfix.codemods.execution import runner

    started = []
    made = runner.ScriptRunner.__init__
    monkeypatch.setattr(runner.ScriptRunner, "__init__", lambda self, *a, **k: started.append(self) or made(self, *a, **k))
    (project / "train.py").write_text(UNCALLED)
    result = warm_cli("fix", "--verify", "python train.py", "train.py")
    assert result.exit_code == 0, result.output
    assert "train.py: verified" in result.stderr.splitlines()
    assert started == []


# Two backward calls GF002 merges, in a program that doubles its gradient once they are merged.
DOUBLED_ONCE_MERGED = """import torch

torch.set_default_dtype(torch.float64)
w = torch.ones(3, requires_grad=True)
shared = (w * 2).exp()
first = shared.sum()
second = (shared * 3).sum()
first.backward()
second.backward()
if "second" + ".backward()" not in open(__file__).read():
    w.grad.mul_(2)
"""


def test_without_an_optimizer_a_rewrite_that_leaves_other_gradients_is_refused(project, warm_cli):
    (project / "train.py").write_text(DOUBLED_ONCE_MERGED)
    result = warm_cli("fix", "--verify", "python train.py", "train.py")
    assert result.exit_code == 1, result.output
    assert (project / "train.py").read_text() == DOUBLED_ONCE_MERGED
    assert "train.py: not applied, refused: at the end (the gradients the backward calls left, and their leaves) (#0): differs by" in result.stderr


# A running loss kept with its graph and printed: GF007 detaches it, and it prints without its grad_fn.
PRINTED_RUNNING_LOSS = """import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
running = 0
for step in range(3):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running += loss
print("average loss:", running / 3)
"""


def test_a_logged_value_that_prints_without_its_grad_fn_once_detached_is_verified(project, warm_cli):
    (project / "train.py").write_text(PRINTED_RUNNING_LOSS)
    result = warm_cli("fix", "--verify", "python train.py", "train.py")
    assert result.exit_code == 0, result.output
    assert "running += loss.detach()\n" in (project / "train.py").read_text()
    assert "train.py: verified" in result.stderr.splitlines()


@pytest.mark.skipif(not REAL_BREAKS.is_dir(), reason="../shared/real-breaks is not beside this checkout")
@pytest.mark.parametrize(
    ("program", "parting"),
    [
        ("gf007_is_leaf.py", "line 1 of CMD's output: the original prints '0', the rewrite '4'"),
        ("gf003_nosave_cat.py", "at backward call 2 (its loss)"),
    ],
)
def test_an_unsafe_fix_that_breaks_a_real_program_is_refused(project, warm_cli, program, parting):
    source = (REAL_BREAKS / program).read_text()
    (project / program).write_text(source)
    result = warm_cli("fix", "--unsafe-fixes", "--verify", f"python {program}", program)
    assert result.exit_code == 1, result.output
    assert (project / program).read_text() == source
    assert f"{program}: not applied, refused: {parting}" in result.stderr


# A rewrite CMD runs without importing torch: the function holding it is never called.
UNCALLED = NEEDLESS_RETAIN.replace("import torch\n", "").replace("    torch.manual_seed(0)\n", "    import torch\n")


def test_a_trace_the_program_forges_refuses_its_rewrite(project, warm_cli):
    forging = UNCALLED + (
        "\nimport os\n\n"
        'with open(os.path.join(os.environ["GRADFIX_TRACE_DIR"], "forged.jsonl"), "w") as forged:\n'
        '    forged.write(\'{"kind": "step", "detail": "1", "values": "not numbers"}\\n\')\n'
    )
    (project / "train.py").write_text(forging)
    result = warm_cli("fix", "--verify", "python train.py", ".")
    assert result.exit_code == 1, result.output
    assert (project / "train.py").read_text() == forging
    assert "train.py: not applied, refused: CMD left a trace gradfix cannot read" in result.stderr


def test_a_file_cmd_never_runs_is_not_exercised_and_keeps_its_finding(project, warm_cli):
    (project / "train.py").write_text(UNCALLED)
    (project / "other.py").write_text(UNCALLED)
    result = warm_cli("fix", "--verify", "python train.py", ".")
    assert result.exit_code == 1, result.output
    assert "second.backward()\n" in (project / "train.py").read_text()
    assert (project / "other.py").read_text() == UNCALLED
    assert "other.py: not applied, not exercised: CMD never ran it" in result.stderr.splitlines()


def test_the_copies_leave_out_the_temporary_folder_and_what_is_not_a_file(project, warm_cli, monkeypatch):
    (project / "train.py").write_text(UNCALLED)
    os.mkfifo(project / "pipe")  # reading it would block the copy
    (project / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(project / "tmp"))  # a copy of the tree would copy itself
    result = warm_cli("fix", "--verify", "python train.py", ".")
    assert result.exit_code == 0, result.output
    assert "train.py: verified" in result.stderr
    assert list((project / "tmp").iterdir()) == []


def test_a_file_whose_name_starts_with_two_dots_is_inside_the_tree(project, warm_cli):
    (project / "..train.py").write_text(UNCALLED)
    result = warm_cli("fix", "--verify", "python ..train.py", ".")
    assert result.exit_code == 0, result.output
    assert "..train.py: verified" in result.stderr
    assert "second.backward()\n" in (project / "..train.py").read_text()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("no-such-program-of-gradfix --steps 3", "error: --verify 'no-such-program-of-gradfix --steps 3': no program"),
        ("", "error: --verify names no command"),
        ("python 'train.py", "No closing quotation"),
    ],
)
def test_a_command_that_cannot_run_is_an_error_and_nothing_is_written(project, command, message):
    (project / "train.py").write_text(UNCALLED)
    result = cli("fix", "--verify", command, ".")
    assert result.exit_code == 2
    assert message in result.stderr
    assert (project / "train.py").read_text() == UNCALLED


def test_the_tree_s_configuration_cannot_name_a_command_to_run(project):
    (project / "pyproject.toml").write_text('[tool.gradfix]\nverify = "python marker.py"\n')
    (project / "marker.py").write_text("open('ran', 'w').close()\n")
    (project / "train.py").write_text(UNCALLED)
    result = cli("fix", ".")
    assert result.exit_code == 2
    assert "unknown key [tool.gradfix] verify" in result.stderr
    assert not (project / "ran").exists() and (project / "train.py").read_text() == UNCALLED


def test_verify_cannot_go_with_stdin(project):
    result = CliRunner().invoke(app, ["fix", "--verify", "python train.py", "-"], input=UNCALLED)
    assert result.exit_code == 2
    assert "--verify runs a command on the files: it cannot go with stdin" in result.stderr


class _Report:
    def __init__(self, path: str) -> None:
        self.path = path


def test_rewrites_are_tried_together_then_split_where_they_disagree():
    rewrites = [_Report(name) for name in ("a.py", "b.py", "bad.py", "d.py")]
    tried = []

    def judge(tried_now, _=None):
        tried.append([r.path for r in tried_now])
        return "parts at step 1" if any(r.path == "bad.py" for r in tried_now) else None

    verdicts = _bisected(rewrites, judge)
    assert tried == [["a.py", "b.py", "bad.py", "d.py"], ["a.py", "b.py"], ["bad.py", "d.py"], ["bad.py"], ["d.py"]]
    assert verdicts == [
        Verdict("a.py", "verified", ""),
        Verdict("b.py", "verified", ""),
        Verdict("bad.py", "refused", "parts at step 1"),
        Verdict("d.py", "verified", ""),
    ]
