"""The runs `gradfix diagnose` makes, and when: the warm server starts before the script is read,
the run beside while the script is analysed, the rules' rewrites are made while it starts, and an
unsafe rule fix is confirmed by the run that tried it, not run again."""

import shutil
import threading

import pytest
from typer.testing import CliRunner

from gradfix.codemods.execution import diagnose as diagnosing
from gradfix.codemods.execution.diagnose import diagnose, fix_and_rerun
from gradfix.cli.app import app
from gradfix.codemods.execution.runner import RunBeside, RunOptions, ScriptRunner
from gradfix.codemods.report import SourceError
from gradfix.codemods.rule import FixKind

from .conftest import FIXTURES

BOUNDS = RunOptions(timeout=60)
UNSAFE_RULE_FIX = FIXTURES / "gf006_cached_graph" / "unsafe_position_encodings_computed_in_init"  # GF006's, offered by diagnose
WAIT = 300  # seconds a test waits for what must happen before it fails: a cold server on a loaded machine


@pytest.fixture
def script(tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(UNSAFE_RULE_FIX / "before.py", script)
    return script


class _NotedBeside(RunBeside):
    """A run beside that says when it has started and when it is stopped."""

    started, stopped = threading.Event(), threading.Event()

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.started.set()

    def stop(self, wait: bool = True) -> None:
        super().stop(wait)
        self.stopped.set()


@pytest.fixture
def noted_beside(monkeypatch):
    monkeypatch.setattr(_NotedBeside, "started", threading.Event())
    monkeypatch.setattr(_NotedBeside, "stopped", threading.Event())
    monkeypatch.setattr(diagnosing, "RunBeside", _NotedBeside)
    return _NotedBeside


def test_the_command_starts_its_server_before_it_reads_the_script(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("def f(:\n")
    order, servers = [], []
    started, parse = ScriptRunner._started_server, diagnosing.parse_source

    def noted_start(runner):
        if runner._server is None:
            order.append("server started")
        servers.append(started(runner))
        return servers[-1]

    def noted_parse(*args):
        order.append("script parsed")
        return parse(*args)

    monkeypatch.setattr(ScriptRunner, "_started_server", noted_start)
    monkeypatch.setattr(diagnosing, "parse_source", noted_parse)
    result = CliRunner().invoke(app, ["diagnose", str(script)])
    assert result.exit_code == 2 and "error:" in result.stderr
    assert order == ["server started", "script parsed"]
    assert servers[0].returncode is not None  # ended with the command, though it was asked nothing


def test_the_run_beside_starts_while_the_script_is_analysed(runs, script, noted_beside, monkeypatch):
    analysed = diagnosing.FileAnalysis

    def analysis_once_the_run_beside_started(module):
        assert noted_beside.started.wait(WAIT), "the analysis waited for nothing: the run beside starts after it"
        return analysed(module)

    monkeypatch.setattr(diagnosing, "FileAnalysis", analysis_once_the_run_beside_started)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward and diagnosis.finding.code == "GF006"
    assert noted_beside.stopped.is_set() and diagnosis.reference is None  # the rule has a fix: no search follows


def test_the_rule_fix_is_made_while_the_run_beside_starts_not_after_the_run(runs, script, noted_beside, monkeypatch):
    made, made_already = [], threading.Event()
    check_source, run = diagnosing.check_source, runs.runner.run

    def noted_check(*args):
        made.append("rewrite")
        made_already.set()
        return check_source(*args)

    class StartingSlowly(noted_beside):  # as a cold server does, importing torch
        def __init__(self, *args) -> None:
            made_already.wait(60)
            super().__init__(*args)

    monkeypatch.setattr(diagnosing, "check_source", noted_check)
    monkeypatch.setattr(diagnosing, "RunBeside", StartingSlowly)
    monkeypatch.setattr(runs.runner, "run", lambda *args: (made.append("run"), run(*args))[1])
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.fix is not None and diagnosis.fix.rewritten == (UNSAFE_RULE_FIX / "after.py").read_bytes()
    assert made[:2] == ["rewrite", "run"] and made.count("rewrite") == 1  # made once, before the traced run


def test_an_analysis_that_fails_stops_the_run_beside(runs, script, noted_beside, monkeypatch):
    def failing_analysis(module):
        noted_beside.started.wait(WAIT)
        raise RecursionError("a file too deep to analyse")

    monkeypatch.setattr(diagnosing, "FileAnalysis", failing_analysis)
    with pytest.raises(RecursionError):
        diagnose(script, runs.runner, BOUNDS)
    assert noted_beside.stopped.wait(WAIT)


def test_a_script_that_cannot_be_parsed_starts_no_run(runs, tmp_path, noted_beside):
    script = tmp_path / "train.py"
    script.write_text("def f(:\n")
    with pytest.raises(SourceError):
        diagnose(script, runs.runner, BOUNDS)
    assert not noted_beside.started.is_set()


def test_an_unsafe_rule_fix_is_confirmed_by_the_run_that_tried_it(runs, script, monkeypatch):
    made = []
    run = runs.runner.run

    def noted_run(script, options):
        made.append(options)
        return run(script, options)

    monkeypatch.setattr(runs.runner, "run", noted_run)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.finding.fix is FixKind.UNSAFE and diagnosis.fix is not None
    assert made[-1].sources == ((diagnosis.fix.path, diagnosis.fix.rewritten),)  # tried from memory
    made.clear()
    again = fix_and_rerun(diagnosis, runs.runner, BOUNDS)
    assert made == [] and again is diagnosis.fix_run
    assert diagnosis.confirmed_by(again)[0]
    assert script.read_bytes() == (UNSAFE_RULE_FIX / "after.py").read_bytes()
