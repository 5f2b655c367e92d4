"""``%load_ext gradfix``: the "backward through the graph a second time" error explained in the
notebook cell that raised it, and its fix offered as code to run.

What the extension does, and what it never does:

* **Explaining needs no run.** When a cell raises the error, IPython's own traceback is shown (the
  extension handles RuntimeError through IPython's ``set_custom_exc``; any other error goes on to
  the handler that was there before, or to the normal display), and below it gradfix's
  explanation, made from the live traceback and the code alone. The cells this session executed
  (IPython's history ``In``, in execution order, up to the failing one) are read as one script, as
  a notebook's cells are (``codemods.notebook``), and named ``In [n]`` as Jupyter shows them. A
  cell that did not compile never ran, and one that raised stopped there while a script would stop
  for good: both are left out (IPython 9 remembers the cells that raised; an older IPython, those
  since the extension was loaded). The failing backward is the innermost frame of the traceback in
  a cell; the rules' findings are matched to it as ``gradfix diagnose`` matches them to a run's
  lines (``execution.diagnose``), and the matching rule's fix is shown as a diff of the cells it
  changes. When no finding names the lines, the findings whose bug raises this error are listed.
  ``%gradfix explain`` explains the last error the session showed, one raised before the
  extension was loaded.
* **The line that built the freed graph** is known only to autograd's anomaly mode, and only for
  graphs built while it was on. It slows every operation, so it is never turned on unasked:
  ``%gradfix anomaly on`` turns it on (without its NaN checks: only where each graph node was built
  is recorded), keeps torch's report of the node it found freed (a warning, still shown) and counts
  the backward calls of each line, as a run of ``gradfix diagnose`` does; once the cells have run
  again, the explanation names that line and the call that failed.
* **A run happens only when asked:** ``%gradfix diagnose`` runs the cells executed up to the failing
  one as one script in a separate process (the runner of ``gradfix diagnose``, which sees an
  allow-list of the environment), with anomaly mode, in the kernel's working folder, after a first
  cell that imports the names a kernel has built in (``display``); the kernel and its namespace are
  not touched. It names both lines and the rule; when no rule has a fix, it runs the candidate
  rewrites there and offers the one the runs prove. The namespace is rebuilt by the same cells
  rather than copied: a tensor that carries a graph cannot be deep-copied, a shallow copy shares
  the model and optimizer that a re-run would change, and a process that has run torch operations
  cannot safely be forked (its thread pools do not survive a fork).
* **A fix is code for the user to run:** ``%gradfix fix`` replaces the cell it runs in with the
  fixed code (IPython's ``set_next_input`` with ``replace=True``; a terminal puts it at the next
  prompt) and prints it, for the frontends that ignore that request (nbclient, Colab): the failing
  cell's fixed source, or, when the fix also changes earlier cells, every cell from the first
  changed one to the failing one, fixed, as one cell. A fix that changes the maths
  needs ``%gradfix fix --unsafe-fixes``, as on the command line.
* A failing cell that is the code of an earlier cell run again (a training cell executed twice)
  backwards a graph that cell's first run freed: the explanation says so, and no fix is offered, as
  a rule's fix for the two runs of one code would be to remove one of them.

IPython is imported by this module only, which ``%load_ext gradfix`` loads.
"""

from __future__ import annotations

import bisect
import difflib
import json
import os
import re
import shlex
import sys
import time
import traceback
import warnings
from dataclasses import astuple, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from IPython.core.error import UsageError

from gradfix.codemods.report import Finding, FixKind
from gradfix.codemods.notebook import CellLine, Notebook, NotebookError, cell_source
from gradfix.codemods.symptoms import SECOND_BACKWARD

from .render import diagnosis_lines, repair_lines

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from gradfix.codemods.execution.diagnose import Diagnosis
    from gradfix.codemods.execution.repair import Repair
    from gradfix.codemods.execution.runner import Frame, RunResult

USAGE = """\
%gradfix explain                explain the last error, if it is 'backward through the graph a second time'
%gradfix fix [--unsafe-fixes]   replace this cell with the fixed code of the cell that failed, to run
%gradfix anomaly on|off         record where graphs are built (autograd's anomaly mode; slows every operation)
%gradfix diagnose [--timeout S] run this session's cells in a separate process to find both lines and prove a fix"""
DIAGNOSE_TIMEOUT = 120.0  # seconds for the whole diagnosis and repair search, as `gradfix diagnose`
RUN_TIMEOUT = 60.0  # seconds one run of a script may take in `%gradfix diagnose`
_CELL_NAME = re.compile(r"In\[(\d+)\]")
_CELL_LINE = re.compile(r"\bcell (\d+), line\b")
_FORWARD_REPORT = "Traceback of forward call that caused the error"
_KERNEL_NAMES = "from IPython import get_ipython\nfrom IPython.display import display"
_REPORTED_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')

_extensions: dict[int, "Extension"] = {}  # by id(shell): one per shell, whatever loads it


def load(shell: InteractiveShell) -> None:
    if id(shell) not in _extensions:
        _extensions[id(shell)] = Extension(shell)


def unload(shell: InteractiveShell) -> None:
    extension = _extensions.pop(id(shell), None)
    if extension is not None:
        extension.close()


@dataclass(frozen=True)
class History:
    """The cells a session executed, ``In [1]`` to ``In [last]``, read as a notebook whose first
    cell imports the names IPython gives a kernel (``display``), so that the script also runs
    outside one: ``In [n]`` is the notebook's cell n + 1. A cell that did not compile never ran, and
    one that raised an error (``raised``) stopped where it raised, while a script would stop there:
    both are kept empty."""

    sources: tuple[str, ...]  # sources[n - 1] is In [n]
    notebook: Notebook

    @classmethod
    def of(cls, shell: InteractiveShell, last: int, raised: set[int]) -> "History":
        manager = shell.history_manager
        cells = zip(manager.input_hist_raw[1 : last + 1], manager.input_hist_parsed[1 : last + 1])
        sources = tuple(raw if n not in raised and _compiles(parsed) else "" for n, (raw, parsed) in enumerate(cells, start=1))
        document = {
            "cells": [
                {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
                for source in (_KERNEL_NAMES, *sources)
            ],
            "metadata": {"language_info": {"name": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        return cls(sources, Notebook(json.dumps(document).encode("utf-8"), "In"))

    def source_of(self, cell: int) -> str:
        return self.sources[cell - 1]

    def cell_of(self, script_line: int) -> int:
        """The ``In [n]`` a line of the script is in (0: the names imported before the cells)."""
        return self.notebook.locate(script_line).cell - 1

    def script_line(self, cell: int, line: int) -> int | None:
        """The line of the script that is line ``line`` of ``In [cell]``."""
        lines = range(1, self.notebook.source.count(b"\n") + 1)
        found = bisect.bisect_left(lines, (cell + 1, line), key=lambda each: astuple(self.notebook.locate(each)))
        if found < len(lines) and self.notebook.locate(lines[found]) == CellLine(cell + 1, line):
            return lines[found]
        return None

    def fixed_cells(self, rewritten: bytes) -> dict[int, str]:
        """The cells a rewrite of the script changes, and their fixed sources. Raises
        ``NotebookError`` for a rewrite that moves code across cells."""
        cells = Notebook(self.notebook.with_source(rewritten), "In").document["cells"][1:]
        return {n: cell_source(cell) for n, cell in enumerate(cells, start=1) if cell_source(cell) != self.source_of(n)}

    def label(self, text: str) -> str:
        """``text`` with its ``line N`` of the script named as Jupyter shows the cells: ``In [3], line 2``."""
        return _CELL_LINE.sub(lambda found: f"In [{int(found.group(1)) - 1}], line", self.notebook.describe(text))


def _compiles(code: str) -> bool:
    try:
        compile(code, "<cell>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Proposal:
    """A fix of the failing cell's code: the cells a rewrite of the history's script changes."""

    history: History
    failing_cell: int  # the cell that was executed when the error was raised
    fixed: dict[int, str]  # the fixed source of each cell the rewrite changes
    safe: bool

    def code_to_run(self) -> str:
        """What must run again: the failing cell, fixed; when the fix changes earlier cells too (not
        just earlier runs of the same code), every cell from the first changed one, fixed, as one cell."""
        history, failing, fixed = self.history, self.failing_cell, self.fixed
        same_code = [n for n in fixed if history.source_of(n) == history.source_of(failing)]
        earlier = [n for n in fixed if n not in same_code]
        if same_code:  # the fix of an earlier run of the failing cell's code is the fix of that code
            fixed = {**fixed, failing: fixed[max(same_code)]}
        if not earlier:
            return fixed.get(failing, history.source_of(failing))
        cells = [n for n in range(min(earlier), failing + 1) if history.source_of(n).strip()]
        magic = next((n for n in cells if history.source_of(n).lstrip().startswith("%%")), None)
        if magic is not None:
            raise UsageError(
                f"the fix changes In [{min(earlier)}] to In [{failing}], and In [{magic}] is a cell magic, which cannot "
                "be joined to other cells: apply the diff above by hand"
            )
        return "\n\n".join(f"# In [{n}]{', fixed by gradfix' if n in fixed else ''}\n{fixed.get(n, history.source_of(n))}" for n in cells)


class AnomalyMode:
    """Autograd's anomaly mode, while the user keeps it on. It records where each graph node is built
    and, when a backward finds a node freed, reports that node's forward traceback in a warning
    ("Error detected in …"); each such warning is shown (not only its first occurrence) and kept,
    and the backward calls of each line of the cells are counted (as a run of ``gradfix diagnose``
    counts them), until the next cell runs."""

    def __init__(self, cell_of: Callable[[str], int | None]) -> None:
        self.on = False
        self.reports: list[str] = []
        self.calls: dict[tuple[str, int], int] = {}  # backward calls by (cell's or module's file name, line)
        self._cell_of = cell_of
        # What this object replaced, which it calls: a hook installed after it may still call it.
        self._filter: Any = None
        self._showwarning: Callable[..., None] = warnings.showwarning
        self._backward: Callable[..., Any] | None = None

    def turn_on(self) -> None:
        import torch

        torch.autograd.set_detect_anomaly(True, check_nan=False)
        if not self.on:
            warnings.filterwarnings("always", message="Error detected in", category=UserWarning)
            self._filter, self._showwarning, self._backward = warnings.filters[0], warnings.showwarning, torch.autograd.backward
            warnings.showwarning, torch.autograd.backward = self._record, self._counted_backward
            self.on = True

    def turn_off(self) -> None:
        if not self.on:
            return
        import torch

        torch.autograd.set_detect_anomaly(False)
        # Put back only what is still this object's: another hook may have replaced it since.
        if self._filter in warnings.filters:
            warnings.filters.remove(self._filter)
        if warnings.showwarning == self._record:
            warnings.showwarning = self._showwarning
        if torch.autograd.backward == self._counted_backward:
            torch.autograd.backward = self._backward
        self.on = False

    def clear(self, *_: Any) -> None:
        self.reports.clear()
        self.calls.clear()

    def _record(self, message: Warning | str, *rest: Any, **options: Any) -> None:
        if _FORWARD_REPORT in str(message):
            self.reports.append(str(message))
        self._showwarning(message, *rest, **options)

    def _counted_backward(self, *args: Any, **kwargs: Any) -> Any:
        # By the innermost line of the user's code: a module's line, when a cell called into it.
        frame = sys._getframe(1)
        while frame is not None and self._cell_of(frame.f_code.co_filename) is None and not _in_user_module(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None:
            place = (frame.f_code.co_filename, frame.f_lineno)
            self.calls[place] = self.calls.get(place, 0) + 1
        return self._backward(*args, **kwargs)


class Extension:
    """gradfix in one IPython shell: the error handler, the ``%gradfix`` magic, anomaly mode."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.anomaly = AnomalyMode(self._cell_of)
        self.proposal: Proposal | None = None
        self.failing_cell: int | None = None  # of the last error explained
        self.raised: set[int] = set()  # the cells that raised an error since the extension was loaded
        # The handler that was there before is kept, and called for what it handled.
        self._previous = (shell.custom_exceptions, shell.CustomTB)
        extension = self

        def handler(shell: InteractiveShell, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None):
            return extension.on_error(etype, value, tb, tb_offset)

        shell.set_custom_exc(tuple({*shell.custom_exceptions, RuntimeError}), handler)
        shell.register_magic_function(self.magic, magic_kind="line", magic_name="gradfix")
        shell.events.register("pre_run_cell", self.anomaly.clear)
        shell.events.register("post_run_cell", self._ran)

    def close(self) -> None:
        self.shell.custom_exceptions, self.shell.CustomTB = self._previous
        self.shell.magics_manager.magics["line"].pop("gradfix", None)
        self.shell.events.unregister("pre_run_cell", self.anomaly.clear)
        self.shell.events.unregister("post_run_cell", self._ran)
        self.anomaly.turn_off()

    def _ran(self, result: Any) -> None:
        if result.error_in_exec is not None and result.execution_count:
            self.raised.add(result.execution_count)

    def on_error(self, etype: type, value: BaseException, tb: Any, tb_offset: int | None) -> None:
        previous_exceptions, previous_handler = self._previous
        if not _is_the_error(value):
            if isinstance(value, previous_exceptions):
                previous_handler(etype, value, tb, tb_offset=tb_offset)
            else:
                self.shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return
        self.shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        try:
            text = self.explain(value, tb)
        except Exception as error:  # IPython would unregister a handler that raises: the extension stays
            text = f"gradfix could not explain this error (an internal error: {type(error).__name__}: {error})"
        print(text, flush=True)

    def explain(self, error: BaseException, tb: Any) -> str:
        """The explanation of the error, from its traceback and the code of the cells executed."""
        from gradfix.codemods.report import SourceError
        from gradfix.codemods.execution.runner import RunResult

        self.proposal = None
        cell_frames = self._cell_frames(tb)
        if not cell_frames:
            return "gradfix: the backward that failed is not in a cell of this session; nothing to explain"
        failing_cell = self.failing_cell = cell_frames[0][0]  # the outermost: the cell that was executed
        history = self._history(failing_cell)
        failing = _frames(history, ((cell, frame.lineno, frame.line or "") for cell, frame in cell_frames)) + _module_frames(tb)
        forward = _frames(history, self._reported_forward_frames()) + self._reported_module_frames()
        innermost = failing[-1] if failing else None
        calls = self.anomaly.calls.get(
            (innermost.path, innermost.line) if innermost.path else (cell_frames[-1][1].filename, cell_frames[-1][1].lineno)
        )
        run = RunResult("error", type(error).__name__, str(error), failing_frames=failing, forward_frames=forward)
        if calls is not None and failing:
            run.backward_calls_by_line = {(innermost.path, innermost.line): calls}
        try:
            diagnosis, findings = _diagnosis_of_traceback(history, run)
        except SourceError as source_error:
            return f"gradfix cannot read this session's cells as one script: {history.label(str(source_error))}"
        lines = _explanation(diagnosis, history, calls_counted=calls is not None)
        if diagnosis.finding is None:
            lines += _raising_findings(findings, history)
        rerun = _rerun_of(diagnosis, history)
        if rerun is not None:
            failed_in = history.cell_of(diagnosis.failing.line)
            built = f"In [{history.cell_of(diagnosis.graph.line)}]" if diagnosis.graph else None
            lines.append(
                f"  In [{failed_in}] runs the code of In [{rerun}] again: that run's backward freed the graph, which "
                f"{built or 'an earlier cell'} built. Run {built or 'that cell'} again first, or build the graph in this "
                "cell; gradfix offers no fix here."
            )
            return "\n".join(lines)
        lines += self._offer(diagnosis, history, failing_cell)
        if diagnosis.graph is None:
            lines.append(
                "  The line that built the freed graph is known to autograd's anomaly mode only: `%gradfix anomaly on` "
                "and run the cells again, or `%gradfix diagnose` (runs this session's cells in a separate process)."
            )
        elif diagnosis.fix is None:
            lines.append("  `%gradfix diagnose` runs this session's cells in a separate process and tries candidate rewrites.")
        return "\n".join(lines)

    def _history(self, last: int) -> History:
        """The cells up to ``last``; those before it that raised are left out. IPython 9 keeps the
        cells that raised before the extension was loaded too."""
        raised = self.raised | set(getattr(self.shell.history_manager, "exceptions", ()))
        return History.of(self.shell, last, raised - {last})

    def _offer(self, diagnosis: Diagnosis, history: History, failing_cell: int) -> list[str]:
        """The matching rule's fix, if it has one, offered: a module's shown, not applied."""
        if diagnosis.fix is None:
            return []
        if diagnosis.module is not None:
            return [
                "  fix:",
                diagnosis.diff(diagnosis.fix.rewritten).rstrip("\n"),
                f"  it changes {diagnosis.module}, not a cell: gradfix does not apply it here.",
            ]
        return self._propose(history, failing_cell, diagnosis.fix.rewritten, diagnosis.finding.fix is FixKind.SAFE)

    def _propose(self, history: History, failing_cell: int, rewritten: bytes, safe: bool) -> list[str]:
        """A rewrite of the history's script as a diff of the cells it changes; it becomes the
        proposal ``%gradfix fix`` applies."""
        try:
            fixed = history.fixed_cells(rewritten)
        except NotebookError:
            return ["  the fix moves code from one cell to another: gradfix does not apply it here."]
        self.proposal = Proposal(history, failing_cell, fixed, safe)
        return _offered(self.proposal)

    def _cell_frames(self, tb: Any) -> list[tuple[int, traceback.FrameSummary]]:
        """The frames of a traceback that are in cells, outermost first, with their cells."""
        return [(cell, frame) for frame in traceback.extract_tb(tb) if (cell := self._cell_of(frame.filename))]

    def _cell_of(self, filename: str) -> int | None:
        """The execution count of the cell IPython compiled as ``filename``, if it is one."""
        name = self.shell.compile.format_code_name(filename)
        found = _CELL_NAME.fullmatch(name[1]) if name else None
        return int(found.group(1)) if found else None

    def _reported_module_frames(self) -> list[Frame]:
        """The lines of the modules in the working folder in anomaly mode's traceback of the forward
        call that built the freed node."""
        from gradfix.codemods.execution.runner import Frame

        report = self.anomaly.reports[-1].splitlines() if self.anomaly.reports else []
        frames = []
        for index, text in enumerate(report):
            found = _REPORTED_FRAME.search(text)
            if found and _in_user_module(found["file"]):
                frames.append(Frame(int(found["line"]), report[index + 1].strip() if index + 1 < len(report) else "", found["file"]))
        return frames

    def _reported_forward_frames(self) -> list[tuple[int, int, str]]:
        """The cells' lines in anomaly mode's traceback of the forward call that built the freed node."""
        if not self.anomaly.reports:
            return []
        report = self.anomaly.reports[-1].splitlines()
        frames = []
        for index, text in enumerate(report):
            found = _REPORTED_FRAME.search(text)
            cell = self._cell_of(found["file"]) if found else None
            if cell is not None:
                frames.append((cell, int(found["line"]), report[index + 1] if index + 1 < len(report) else ""))
        return frames

    def magic(self, line: str) -> None:
        try:
            words = shlex.split(line)
        except ValueError as error:  # an unclosed quote
            raise UsageError(f"{error}; usage:\n{USAGE}") from None
        command, options = (words[0], words[1:]) if words else ("", [])
        if command == "explain" and not options:
            self.explain_last()
        elif command == "fix" and set(options) <= {"--unsafe-fixes"}:
            self.fix(unsafe_fixes=bool(options))
        elif command == "anomaly" and options in (["on"], ["off"]):
            self.switch_anomaly(options == ["on"])
        elif command == "diagnose" and (not options or len(options) == 2 and options[0] == "--timeout"):
            self.diagnose(_seconds(options[1]) if options else DIAGNOSE_TIMEOUT)
        else:
            raise UsageError(f"usage:\n{USAGE}")

    def explain_last(self) -> None:
        """Explain the last error the session showed, if it is the error: one raised before the
        extension was loaded."""
        error = getattr(sys, "last_value", None)
        if not _is_the_error(error):
            raise UsageError("the last error this session showed is not 'backward through the graph a second time'")
        print(self.explain(error, error.__traceback__), flush=True)

    def fix(self, unsafe_fixes: bool) -> None:
        proposal = self.proposal
        if proposal is None:
            raise UsageError("no fix to apply: gradfix applies the fix it showed for the last error, and it showed none")
        if not proposal.safe and not unsafe_fixes:
            raise UsageError("this fix changes the maths (unsafe): `%gradfix fix --unsafe-fixes` applies it")
        code = proposal.code_to_run()
        self.shell.set_next_input(code, replace=True)
        print(
            f"gradfix: this cell now holds the fixed code of In [{proposal.failing_cell}] (in a terminal: at the next prompt); run it. "
            f"Where the notebook ignores the request to replace this cell (nbclient, Colab), it is unchanged: the code to run is below.\n{code}"
        )

    def switch_anomaly(self, on: bool) -> None:
        if on:
            self.anomaly.turn_on()
            print(
                "gradfix: anomaly mode is on; graphs built from now on record where they were built (every operation is "
                "slower). Run the cells that build the model's graphs again; `%gradfix anomaly off` turns it off."
            )
        else:
            self.anomaly.turn_off()
            print("gradfix: anomaly mode is off.")

    def diagnose(self, timeout: float) -> None:
        """Run the cells up to the one that failed (all of them before this one, if none failed) in a
        separate process, with anomaly mode; explain, and offer the fix the run proves."""
        from gradfix.codemods.report import SourceError
        from gradfix.codemods.execution.diagnose import diagnose
        from gradfix.codemods.execution.repair import repair
        from gradfix.codemods.execution.runner import RunOptions, ScriptRunner

        started = time.monotonic()
        # The cell this magic runs in is stored already: without an error, the cells before it.
        last = self.failing_cell or self._last_failing_cell() or len(self.shell.history_manager.input_hist_raw) - 2
        history = self._history(last)
        options = RunOptions(timeout=min(timeout, RUN_TIMEOUT), cwd=os.getcwd())
        # In the kernel's working folder, as `gradfix diagnose` runs a notebook beside it: the cells
        # import the modules there, and a line of those that built the graph is named.
        script = Path.cwd() / f".gradfix-kernel-{os.getpid()}.py"
        try:
            with open(script, "xb") as created:  # never through a file or link already there
                created.write(history.notebook.source)
        except OSError as error:
            raise UsageError(f"gradfix cannot write the script it runs in the working folder: {error}") from None
        searched = None
        try:
            with ScriptRunner() as runner:
                diagnosis = diagnose(script, runner, options, history.notebook)
                if diagnosis.second_backward and diagnosis.fix is None:
                    searched = repair(diagnosis, runner, options, budget=timeout - (time.monotonic() - started))
        except SourceError as error:
            raise UsageError(f"gradfix cannot read this session's cells as one script: {history.label(str(error))}") from None
        finally:
            script.unlink(missing_ok=True)
        print("\n".join(self._diagnosed(diagnosis, searched, history, last)), flush=True)

    def _last_failing_cell(self) -> int | None:
        """The cell that raised the last error the session showed, if it is the error."""
        error = getattr(sys, "last_value", None)
        if not _is_the_error(error):
            return None
        return next((cell for cell, _ in self._cell_frames(error.__traceback__)), None)

    def _diagnosed(self, diagnosis: Diagnosis, searched: Repair | None, history: History, last: int) -> list[str]:
        self.proposal = None
        cells = f"In [1] to In [{last}]" if last > 1 else "In [1]"
        run = diagnosis.run
        if not diagnosis.found:
            what = f"no error in {run.backward_calls} backward call(s)" if run.succeeded else run.describe()
            return [f"gradfix ran {cells} in a separate process: {what}; it does not show the error there."]
        lines = [f"gradfix ran {cells} in a separate process, with anomaly mode:", *_explanation(diagnosis, history, calls_counted=True)]
        if diagnosis.fix is not None:
            return lines + self._offer(diagnosis, history, last)
        if searched is None:
            return lines
        lines += repair_lines(searched, history.label)
        chosen = searched.chosen
        if chosen is None:
            return lines
        if chosen.candidate.module is not None:
            return lines + [f"  the chosen rewrite changes {chosen.candidate.module}, not a cell: gradfix does not apply it here."]
        lines.append(f"  chosen because {searched.why()}")
        return lines + self._propose(history, last, chosen.candidate.source, chosen.safe)


def _is_the_error(error: BaseException | None) -> bool:
    return isinstance(error, RuntimeError) and SECOND_BACKWARD.text in str(error)


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise UsageError(f"--timeout takes a number of seconds, not {text!r}")
    return seconds


def _frames(history: History, places: Any) -> list[Frame]:
    """``(cell, line, code)`` places as frames of the history's script (those it holds)."""
    from gradfix.codemods.execution.runner import Frame

    frames = []
    for cell, line, code in places:
        script_line = history.script_line(cell, line)
        if script_line is not None:
            frames.append(Frame(script_line, code.strip()))
    return frames


def _in_user_module(path: str) -> bool:
    """Whether ``path`` is a module of the user's, beside the notebook: in the kernel's working
    folder (not an environment installed there)."""
    from gradfix.codemods.execution.runner import _in_user_code

    return _in_user_code(path, os.path.join(os.getcwd(), "cells"))


def _module_frames(tb: Any) -> list[Frame]:
    """The frames of a traceback in the user's modules after its last cell frame (what the cells
    called, innermost last)."""
    from gradfix.codemods.execution.runner import Frame

    frames = []
    for frame in traceback.extract_tb(tb):
        if _CELL_NAME.search(frame.filename) or not _in_user_module(frame.filename):
            continue
        frames.append(Frame(frame.lineno, (frame.line or "").strip(), frame.filename))
    return frames


def _diagnosis_of_traceback(history: History, run: RunResult) -> tuple[Diagnosis, list[Finding]]:
    """What ``gradfix diagnose`` says of a run, said of the live traceback: the lines, how they
    relate, the matching rule and its fix; and every finding in the cells. Raises ``SourceError``
    for a script it cannot parse."""
    from gradfix.codemods.analysis import FileAnalysis
    from gradfix.codemods.check import find_violations
    from gradfix.codemods.parse import parse_source
    from gradfix.codemods.execution.diagnose import Diagnosis, _explain_error, rule_fix
    from gradfix.codemods.registry import all_rules

    source, path = history.notebook.source, "In"
    analysis = FileAnalysis(parse_source(source, path))
    findings = [replace(v.finding, path=path) for v in find_violations(analysis, all_rules())]
    diagnosis = Diagnosis(Path(path), source, analysis, run, notebook=history.notebook)
    _explain_error(analysis, findings, diagnosis)
    diagnosis.fix = rule_fix(diagnosis)
    return diagnosis, findings


def _raising_findings(findings: list[Finding], history: History) -> list[str]:
    """The findings in the cells whose bug raises this error, for an error no finding matches."""
    from gradfix.codemods.registry import rule_by_code

    raising = [f for f in findings if rule_by_code(f.code).SYMPTOM == SECOND_BACKWARD]
    if not raising:
        return []
    return ["  In the cells run so far, gradfix finds these shapes that raise this error:"] + [
        f"    {history.label(f'line {f.line}')}: {f.code} {history.label(f.message)}" for f in raising
    ]


def _rerun_of(diagnosis: Diagnosis, history: History) -> int | None:
    """The earlier cell whose run of the same code the matching finding ties the failing backward
    to, if it does: the failing cell is that code run again."""
    if diagnosis.failing is None or diagnosis.finding is None or diagnosis.module is not None:
        return None
    failed_in = history.cell_of(diagnosis.failing.line)
    named = {history.cell_of(line) for line in (diagnosis.finding.line, *diagnosis.finding.related_lines)}
    same_code = [n for n in named if n < failed_in and history.source_of(n) == history.source_of(failed_in)]
    return max(same_code, default=None)


def _explanation(diagnosis: Diagnosis, history: History, calls_counted: bool) -> list[str]:
    """The lines, the relation and the rule, as ``gradfix diagnose`` names them, with the cells
    named as Jupyter shows them; ``calls_counted``: whether the failing backward's calls were counted."""
    run = diagnosis.run
    if diagnosis.symptom:
        lines = [f"gradfix: the cells run, but {history.label(diagnosis.symptom)}"]
    else:
        lines = [f"gradfix: {run.error_type}: {run.error_message.split('.')[0]}"]
    # A module's lines are named by the module, not by the cells.
    lines += diagnosis_lines(diagnosis, diagnosis.describe if diagnosis.module is not None else history.label, calls_counted=calls_counted)
    if diagnosis.finding is None:
        lines.append("  No gradfix finding names the lines above.")
    elif diagnosis.fix is None:
        lines.append("  gradfix reports this shape but cannot prove a rewrite for it.")
    return lines


def _offered(proposal: Proposal) -> list[str]:
    """The proposal as a diff of each cell it changes, and how to apply it."""
    history = proposal.history
    lines = ["  fix:" if proposal.safe else "  fix (unsafe: it changes the maths):"]
    for n, fixed in sorted(proposal.fixed.items()):
        # IPython keeps a cell without its last newline, and a fix keeps the cell's ending.
        before, after = (history.source_of(n) + "\n").splitlines(keepends=True), (fixed + "\n").splitlines(keepends=True)
        diff = difflib.unified_diff(before, after, f"In [{n}]", f"In [{n}], fixed")
        lines.append("".join(diff).rstrip("\n"))
    flags = "" if proposal.safe else " --unsafe-fixes"
    lines.append(f"  `%gradfix fix{flags}` in a new cell turns it into the fixed code (in a terminal: the next input), to run.")
    return lines
