"""``gradfix check PATH...`` whose output is plain text is answered before typer and rich are
imported (``cli/plain_check.py``). Each command line is run twice, by the program's entry point and by the
full command line alone: what is printed and the exit status must be the same, and whether the
answer came before typer is what the case says. Declining is always allowed to be right; answering
a shape the full command would read otherwise is the bug these tests look for."""

import json
import os
import re
import subprocess
import sys

import pytest

_ENTRY_POINT = (
    "import json, sys\n"
    "from gradfix.cli import main\n"
    "try:\n    main()\nexcept SystemExit as exit_:\n    code = exit_.code\n"
    "sys.stdout.flush()\n"
    "sys.__stderr__.write('\\n' + json.dumps({'exit': code, 'typer': 'typer' in sys.modules, 'rich': 'rich' in sys.modules}))\n"
)
_FULL_COMMAND_LINE = (
    "import json, sys\n"
    "from gradfix.cli.app import run\n"
    "try:\n    run()\nexcept SystemExit as exit_:\n    code = exit_.code\n"
    "sys.stdout.flush()\n"
    "sys.__stderr__.write('\\n' + json.dumps({'exit': code}))\n"
)

CLEAN = "import torch\n\nloss = torch.ones(2, requires_grad=True).sum()\nloss.backward()\n"
FINDING = "import torch\n\nw = torch.ones(2, requires_grad=True)\nloss = (w * 2).sum()\nloss.backward()\nloss.backward()\n"
# A forward before the loop whose graph the loop keeps: moving it changes the results (an unsafe fix).
UNSAFE_FIX = (
    "import torch\n\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "pred = model(torch.randn(4, 3))\nfor step in range(3):\n    loss = pred.pow(2).mean()\n    optimizer.zero_grad()\n"
    "    loss.backward(retain_graph=True)\n    optimizer.step()\n"
)
# A finding that rests on a guess (a hint): hidden by default, and counted in the summary.
HINT = (
    "import torch\nfrom elsewhere import keep\n\nh = torch.zeros(2)\nrnn = torch.nn.RNNCell(2, 2)\n"
    "for x in torch.ones(3, 2):\n    h = keep(rnn(x, h))\n    h.sum().backward()\n"
)


# A progress bar drawn on a terminal: its frames, and the cursor moves that wipe it. How many frames
# a run draws depends on how long it takes (the display refreshes on a clock), not on what it says.
_LIVE_DISPLAY = re.compile(r"\x1b\[\?25l.*?\x1b\[\?25h(\r\x1b\[1A\x1b\[2K)?", re.DOTALL)


def _run(program: str, tmp_path, arguments, environment) -> tuple[int, str, str, dict]:
    env = {key: value for key, value in os.environ.items() if key != "GRADFIX_NO_CACHE"}  # (conftest's)
    env.update(environment)
    run = subprocess.run([sys.executable, "-c", program, *arguments], cwd=tmp_path, env=env, capture_output=True, text=True)
    said, _, record = _LIVE_DISPLAY.sub("", run.stderr).rpartition("\n")
    shown = json.loads(record)
    return shown["exit"], run.stdout, said, shown


def _both(tmp_path, arguments, environment=()):
    """The full command line's result (run first: it fills the cache), then the entry point's."""
    full = _run(_FULL_COMMAND_LINE, tmp_path, arguments, dict(environment))
    entry = _run(_ENTRY_POINT, tmp_path, arguments, dict(environment))
    return full[:3], entry[:3], entry[3]


def _project(tmp_path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)


ANSWERED = {
    "one file": ({"train.py": CLEAN}, ["check", "train.py"], {}),
    "files": ({"a.py": CLEAN, "b.py": "x = 1\n"}, ["check", "a.py", "b.py"], {}),
    "pre-commit's options": ({"train.py": CLEAN}, ["check", "--force-exclude", "train.py"], {}),
    "options after the path": ({"train.py": CLEAN}, ["check", "train.py", "--exit-zero", "--jobs", "1"], {}),
    "a value after =": ({"train.py": CLEAN}, ["check", "--jobs=2", "--cache-dir=here", "train.py"], {}),
    "a short name": ({"train.py": CLEAN}, ["check", "-j", "1", "train.py"], {}),
    "cache folder named": ({"train.py": CLEAN}, ["check", "--cache-dir", "here", "train.py"], {}),
    "cache folder from the environment": ({"train.py": CLEAN}, ["check", "train.py"], {"GRADFIX_CACHE_DIR": "there"}),
    "a path after --": ({"-odd.py": CLEAN}, ["check", "--", "-odd.py"], {}),
    "a hint hidden": ({"train.py": HINT}, ["check", "train.py"], {}),
    "a finding of a rule the settings ignore": (
        {"train.py": FINDING, "pyproject.toml": "[tool.gradfix]\nignore = ['GF001']\n"},
        ["check", "train.py"],
        {},
    ),
    "a named file the settings exclude": (
        {"gen/train.py": FINDING, "pyproject.toml": "[tool.gradfix]\nextend-exclude = ['gen']\n"},
        ["check", "--force-exclude", "gen/train.py"],
        {},
    ),
    "a finding": ({"train.py": FINDING}, ["check", "train.py"], {}),
    "a finding, exit zero": ({"train.py": FINDING}, ["check", "--exit-zero", "train.py"], {}),
    "an unsafe fix the settings do not show": ({"train.py": UNSAFE_FIX}, ["check", "train.py"], {}),
    "a folder": ({"train.py": FINDING, "sub/clean.py": CLEAN}, ["check", "."], {}),
    "no path": ({"train.py": CLEAN}, ["check"], {}),
    "as many files as draw a progress bar on a terminal, off one": (
        {f"m{i}.py": "x = 1\n" for i in range(20)},
        ["check", *(f"m{i}.py" for i in range(20))],
        {},
    ),
    "a notebook": (
        {
            "nb.ipynb": json.dumps(
                {"cells": [{"cell_type": "code", "source": CLEAN, "metadata": {}}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
            )
        },
        ["check", "nb.ipynb"],
        {},
    ),
}

DECLINED = {
    "a finding for a terminal": ({"train.py": FINDING}, ["check", "train.py"], {"FORCE_COLOR": "1"}),
    "a folder for a terminal": ({"train.py": CLEAN}, ["check", "."], {"TTY_COMPATIBLE": "1"}),
    "unsafe fixes the settings show": (
        {
            "train.py": UNSAFE_FIX,
            "pyproject.toml": "[tool.gradfix]\nunsafe-fixes = true\n",
        },
        ["check", "train.py"],
        {},
    ),
    "a missing file": ({"train.py": CLEAN}, ["check", "train.py", "gone.py"], {}),
    "a file that does not parse": ({"train.py": "def f(:\n"}, ["check", "train.py"], {}),
    "another option": ({"train.py": CLEAN}, ["check", "--hints", "train.py"], {}),
    "a global option": ({"train.py": CLEAN}, ["--verbose", "check", "train.py"], {}),
    "another command": ({"train.py": CLEAN}, ["fix", "train.py"], {}),
    "a repeated option": ({"train.py": CLEAN}, ["check", "--jobs", "1", "--jobs", "2", "train.py"], {}),
    "a value not taken": ({"train.py": CLEAN}, ["check", "--jobs", "0", "train.py"], {}),
    "a flag given a value": ({"train.py": CLEAN}, ["check", "--exit-zero=1", "train.py"], {}),
    "an option without its value": ({"train.py": CLEAN}, ["check", "train.py", "--cache-dir"], {}),
    "stdin, a file named - beside": ({"-": "x = (\n", "train.py": CLEAN}, ["check", "-"], {}),
    "no cache asked by the environment": ({"train.py": CLEAN}, ["check", "train.py"], {"GRADFIX_NO_CACHE": "1"}),
    "a settings file that cannot be read": ({"train.py": CLEAN, "pyproject.toml": "[tool.gradfix]\nselect = 3\n"}, ["check", "train.py"], {}),
    "a cache folder that is a file": ({"train.py": CLEAN, "cachefile": ""}, ["check", "--cache-dir", "cachefile", "train.py"], {}),
    "as many files as draw a progress bar on a terminal": (
        {f"m{i}.py": "x = 1\n" for i in range(20)},
        ["check", *(f"m{i}.py" for i in range(20))],
        {"FORCE_COLOR": "1"},
    ),
}


assert not ANSWERED.keys() & DECLINED.keys()


@pytest.mark.parametrize("case", [*ANSWERED, *DECLINED])
def test_the_entry_point_answers_what_is_plain_and_leaves_the_rest_to_the_full_command(tmp_path, case):
    files, arguments, environment = ANSWERED.get(case) or DECLINED[case]
    _project(tmp_path, files)
    full, entry, loaded = _both(tmp_path, arguments, environment)
    assert entry == full
    if case in ANSWERED:
        assert full[0] in (0, 1) and full[2].startswith(("No findings", "Found"))  # (its findings, its summary)
        assert not loaded["typer"] and not loaded["rich"]
    else:
        assert loaded["typer"]


def test_a_file_not_in_the_cache_is_checked_and_answered(tmp_path):
    _project(tmp_path, {"train.py": CLEAN})
    exit_, stdout, stderr, loaded = _run(_ENTRY_POINT, tmp_path, ["check", "train.py"], {})
    assert (exit_, stdout, stderr.strip()) == (0, "", "No findings in 1 file(s).")
    assert not loaded["typer"]
    assert (tmp_path / ".gradfix_cache").is_dir()  # kept for the next check


def test_a_reader_that_stops_early_ends_both_as_click_ends_the_command(tmp_path):
    _project(tmp_path, {f"train{i}.py": FINDING for i in range(5)})
    env = {key: value for key, value in os.environ.items() if key != "GRADFIX_NO_CACHE"}
    ended = []
    for program in (_FULL_COMMAND_LINE, _ENTRY_POINT):
        run = subprocess.Popen([sys.executable, "-c", program, "check", "."], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        run.stdout.close()  # (gone before the first finding is written)
        said = run.stderr.read().decode()
        run.wait()
        ended.append((run.returncode, said.rpartition("\n")[0], json.loads(said.rpartition("\n")[2])["exit"]))
    assert ended[0] == ended[1] == (0, "", 1)
