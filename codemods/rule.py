"""What a rule is: a class with declared metadata that reads a ``FileAnalysis`` and reports
violations, each with the fix that removes it when the rule can prove one.

Declared once, read by every tool. A rule's code and name are its module's name in the ``rules``
package (``gf001_duplicate_backward``: ``rule_id``), which the registry lists without importing
it; what its fix keeps is declared on its class (``FIX``, ``KEEPS_GRADIENTS``, ``KEEPS_RESULTS``,
``OBLIGATIONS``); its documentation is its docstring, written in ``WRITTEN_SECTIONS``, with the
fix's safety (``fix_safety``) and the example (``EXAMPLE_BEFORE``, ``EXAMPLE_AFTER``) added from
those declarations. The docs generator, ``gradfix explain``, SARIF and the tests' oracles read them.

One tree's answer. ``gradfix check`` runs the rules twice on a file with findings: first on its
skeleton (``skeleton.build_skeleton``: LibCST's node classes built from Python's own parser, with no
parentheses, whitespace or comments), which only decides whether the file is parsed by LibCST and
checked in full; a file whose skeleton has no finding is reported clean. So a rule's answer must
not depend on which tree it reads: the same codes, as many times, on both. Read facts from the
analysis, and where two expressions must be compared, compare ``expression_key(a) ==
expression_key(b)`` (``analysis.syntax``; also as a dict key or in a set), never their
``code_of`` text nor ``deep_equals``: ``(opt)`` and ``opt`` are one expression to Python and to
the skeleton, and two spellings in LibCST's tree. ``code_of`` is for messages and for new code.
Lines and messages are placed and rendered on LibCST's tree only. ``tests/test_one_tree.py``
runs every fixture and the shared scripts through both trees."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, Iterator, Sequence

from .report import Finding, FixKind, ProofLine
from .symptoms import SECOND_BACKWARD, Symptom

RULES_PACKAGE = f"{__package__}.rules"
# A rule's documentation, in this order; the example follows them (``EXAMPLE_BEFORE``, ``EXAMPLE_AFTER``).
FIX_SAFETY = "Fix safety"  # written from what the rule declares (``Rule.fix_safety``)
SECTIONS = ("What it finds", "Why it fails", "The fix", FIX_SAFETY, "When gradfix only reports")
# The others are its docstring: each starts a paragraph with its title and a colon, and runs to the next title.
WRITTEN_SECTIONS = tuple(title for title in SECTIONS if title != FIX_SAFETY)

if TYPE_CHECKING:  # a rule's metadata is read without loading LibCST and the analysis
    import libcst as cst

    from .analysis import BackwardSite, FileAnalysis
    from .edits import Fix


@dataclass(frozen=True)
class Violation:
    finding: Finding
    fix: Fix | None = None
    sites: tuple[BackwardSite, ...] = ()  # the backwards it is about
    defers: bool = False  # said only when no other rule's violation is about the same backwards


def without_repeats(violations: Sequence[Violation]) -> list[Violation]:
    """``violations`` less the deferring ones about backwards another violation already names:
    one bug, one finding, from the rule that knows its shape."""
    named = {id(site) for v in violations if not v.defers for site in v.sites}
    return [v for v in violations if not (v.defers and v.sites and all(id(s) in named for s in v.sites))]


def rule_id(module: str) -> tuple[str, str]:
    """The code and name that a module of the ``rules`` package is named by:
    ``gf001_duplicate_backward`` is GF001, ``duplicate_backward``."""
    code, _, name = module.rpartition(".")[2].partition("_")
    return code.upper(), name


class Rule:
    """Base class of every rule. Subclasses set the metadata below, explain the bug and its fix in
    their docstring, in ``WRITTEN_SECTIONS`` (``gradfix explain`` prints it), and implement
    ``violations``."""

    # A rule of the ``rules`` package is given these by its module's name (``rule_id``); a rule
    # defined elsewhere (a test's) declares them.
    CODE: ClassVar[str]
    NAME: ClassVar[str]  # (its fixtures: tests/fixtures/<code>_<name>/, as its module)
    SUMMARY: ClassVar[str]
    FIX: ClassVar[FixKind | None]  # the best fix the rule offers; None if it only reports
    # A safe fix gives the gradients of the program run with its graphs kept (retain_graph=True).
    KEEPS_GRADIENTS: ClassVar[bool] = False
    # A safe fix changes no value the program computes, only which graphs values hold: what it
    # detaches is a constant of training, which no parameter an optimizer updates built (the
    # modules that built it get no gradient). Keeping the gradients keeps the values too.
    KEEPS_RESULTS: ClassVar[bool] = False
    SYMPTOM: ClassVar[Symptom] = SECOND_BACKWARD  # what a run of the buggy program shows
    EXAMPLE_BEFORE: ClassVar[str]
    EXAMPLE_AFTER: ClassVar[str]
    # A rule for what the others do not explain: its violations about backwards that another
    # rule's violation names are dropped (``without_repeats``).
    DEFERS: ClassVar[bool] = False
    # What a safe fix of this rule must prove beyond the bug: nothing it could disturb does something
    # gradfix did not read (``analysis.closed_world.OBLIGATIONS``). A safe fix with one not proved is
    # offered as unsafe.
    OBLIGATIONS: ClassVar[tuple[str, ...]] = ()
    # Whether the finding itself says what the obligations prove (GF009's "nothing backwards it
    # again": code gradfix did not read may): one not proved makes it a hint, not an unsafe fix.
    CLAIMS_THE_OBLIGATIONS: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.rpartition(".")[0] == RULES_PACKAGE:
            if "CODE" in vars(cls) or "NAME" in vars(cls):
                raise TypeError(f"{cls.__module__}.{cls.__name__}: a rule's code and name are its module's name, not attributes")
            cls.CODE, cls.NAME = rule_id(cls.__module__)

    def __init__(self, analysis: FileAnalysis) -> None:
        self.analysis = analysis

    def violations(self) -> Iterator[Violation]:
        raise NotImplementedError

    def violation(
        self,
        node: cst.CSTNode,
        message: str,
        fix: Fix | None = None,
        related: tuple[cst.CSTNode, ...] = (),
        sites: Sequence[BackwardSite] = (),
        guess: str = "",
    ) -> Violation:
        """``sites``: the backwards the finding (and its fix) reasons about; one whose tensor gradfix
        guessed makes the finding a guess. ``guess``: what the bug rests on that
        gradfix could only guess ("may", not "must"), in a user's words; the finding is then a hint,
        without a fix."""
        line, column = self.analysis.start(node)
        end = self.analysis.range(node).end
        if not guess and any(site.api.guessed for site in sites):
            guess = "gradfix cannot tell whether a `.backward(...)` here backwards its object or its argument"
        if guess:
            fix, message = None, f"{message} (hint: {guess})"
        if fix is not None and any(self.analysis.updates_parameters(s) for s in fix.taken_away()):
            fix, message = None, message + " (not rewritten: the fix would remove or move an optimizer update)"
        if fix is not None and any(not site.runs_as_walked for site in sites):
            fix, message = (
                None,
                message
                + " (not rewritten: a backward here may run more or fewer times than gradfix reads it: in a comprehension, or an operand that may not be evaluated)",
            )
        proof: tuple[ProofLine, ...] = ()
        if self.OBLIGATIONS and (fix is not None and fix.safe or self.CLAIMS_THE_OBLIGATIONS and not guess):
            unproved, proof = self._proved((node, *(s.statement for s in sites), *(fix.statements() if fix is not None else ())))
            if unproved and self.CLAIMS_THE_OBLIGATIONS:
                fix, guess, message = None, unproved, f"{message} (hint: {unproved})"
            elif unproved and fix is not None:
                fix, message = replace(fix, safe=False), f"{message} (unsafe fix: {unproved})"
        kind = None if fix is None else (FixKind.SAFE if fix.safe else FixKind.UNSAFE)
        related_lines = tuple(sorted({self.analysis.line(n) for n in related} - {line}))
        finding = Finding(
            self.CODE, line, column + 1, message, kind, related_lines, end_line=end.line, end_column=end.column + 1, proof=proof, hint=bool(guess)
        )
        return Violation(finding, fix, tuple(sites), self.DEFERS)

    def _proved(self, about: tuple[cst.CSTNode, ...]) -> tuple[str, tuple[ProofLine, ...]]:
        """Why an obligation of the rule is not proved on the path of ``about`` (the finding, its backwards and what
        its fix touches; "" when every one is), and each obligation's answer."""
        steps = self.analysis.closed_world.answer(self.OBLIGATIONS, about)
        proof = tuple(
            ProofLine(
                step.obligation,
                step.answer.value,
                0 if step.found is None else self.analysis.line(step.found.node),
                "" if step.found is None else step.found.construct.kind,
            )
            for step in steps
        )
        unproved = next((step for step in steps if not step.proved), None)
        if unproved is None:
            return "", proof
        return unproved.reason(0 if unproved.found is None else self.analysis.line(unproved.found.node)), proof

    @classmethod
    def sections(cls) -> dict[str, str]:
        """The rule's documentation by title (``SECTIONS``): its docstring's sections, each without
        its title, and ``fix_safety``. ``ValueError`` for a docstring that is not written in
        ``WRITTEN_SECTIONS``, in that order."""
        paragraphs = textwrap.dedent(cls.__doc__ or "").strip().split("\n\n")
        written: dict[str, list[str]] = {}
        for paragraph in paragraphs:
            title, colon, text = paragraph.partition(": ")
            if colon and title in WRITTEN_SECTIONS and title not in written:
                written[title] = [text]
            elif written:
                written[next(reversed(written))].append(paragraph)
            else:
                raise ValueError(f"{cls.__name__}: its docstring starts with no section title ({', '.join(WRITTEN_SECTIONS)})")
        if tuple(written) != WRITTEN_SECTIONS:
            raise ValueError(f"{cls.__name__}: its docstring's sections are {', '.join(written)}, not {', '.join(WRITTEN_SECTIONS)}")
        return {title: cls.fix_safety() if title == FIX_SAFETY else "\n\n".join(written[title]) for title in SECTIONS}

    @classmethod
    def fix_safety(cls) -> str:
        """What the rule's best fix changes, from what the rule declares."""
        if cls.FIX is None:
            return "gradfix only reports; the fix is yours (``gradfix diagnose --fix`` searches for one by running the script)."
        if cls.FIX is FixKind.UNSAFE:
            return "unsafe: the fix changes what the program computes, on purpose; ``gradfix fix --unsafe-fixes`` applies it."
        if cls.KEEPS_GRADIENTS:
            kept = " It gives the same gradients as the program run with ``retain_graph=True``."
        elif cls.KEEPS_RESULTS:
            kept = " It changes no value the program computes: what it detaches is a constant of training."
        else:
            kept = ""
        return f"safe: ``gradfix fix`` applies the fix.{kept}"

    @classmethod
    def documentation(cls) -> str:
        """The rule's sections as text, each after its title (``gradfix explain`` prints it)."""
        return "\n\n".join(f"{title}: {text}" for title, text in cls.sections().items())
