"""What the tests of one training program ask of it: gradfix's findings of some rules, and how a run
of it ends."""

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import Finding, FixMode


def findings_of(source: str, *codes: str, mode: FixMode = FixMode.NONE, hints: bool = True) -> list[Finding]:
    """The findings of the rules ``codes`` on ``source`` (checked as ``train.py``), those ``mode``
    fixes among them; the hints too unless ``hints`` is False."""
    report = check_source(source.encode(), all_rules(), mode, "train.py")
    return [f for f in (*report.findings, *report.fixed) if f.code in codes and (hints or not f.hint)]


def run_error(runs, tmp_path, source: str) -> str:
    """How a run of ``source`` (as ``train.py`` in ``tmp_path``, by the session's warm runner
    ``runs``) ends: "" where it runs to its end, else its error."""
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    return "" if result.status == "ok" else result.error_message or result.status
