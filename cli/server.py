"""``gradfix server``: the Language Server an editor starts, over stdin and stdout (pygls, the
``server`` extra).

For each open Python file (a ``file:`` URI; notebooks are left to ``gradfix check`` and the
``%gradfix`` extension), on open, change and save: a diagnostic per finding (its code, message and
range, the other lines involved, a link to the rule's documentation); the fix of a finding as a
quick fix (a safe one preferred, an unsafe one titled so), and ``source.fixAll.gradfix``, every
safe fix; hover on a finding explains its rule as ``gradfix explain`` does.

A file is checked as ``gradfix check --force-exclude FILE`` checks it: with the settings of its
nearest ``pyproject.toml`` (read again at each check: select, ignore, per-file-ignores, exclude),
and with the summaries of the project's modules it imports, read from disk as a check of the whole
project reads them. Nothing is written and nothing of the workspace is run: the server reads the
text the editor sends and the files above and beside it.

Checks run one at a time on one worker thread, so that messages keep being read while one runs;
a document edited during its check is checked again when that check ends, at its latest version
only. A fix is computed for the version it edits, and the edit names that version.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence
from urllib.parse import urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace.position_codec import PositionCodec

from gradfix import __version__
from gradfix.codemods.check import check_source, module_exports
from gradfix.codemods.config import ConfigError, Overrides, Settings
from gradfix.codemods.registry import RuleSelection, rule_by_code
from gradfix.codemods.report import FileReport, Finding, FixKind, FixMode
from gradfix.codemods.project import ModuleSummaries, ProjectModules
from gradfix.codemods.run import excluded_when_named, rules_and_mode
from gradfix.codemods.summaries import ProjectSummaries

from . import render
from .rule_pages import rules_page_link

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.gradfix"
# Lines as the protocol and Python count them: a form feed or a line separator does not end one.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def serve() -> None:
    build_server().start_io()


def build_server() -> GradfixServer:
    server = GradfixServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def opened(ls: GradfixServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.diagnose(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def changed(ls: GradfixServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.diagnose(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def saved(ls: GradfixServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.saved(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def closed(ls: GradfixServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.closed(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: GradfixServer, params: types.HoverParams) -> types.Hover | None:
        return await ls.hover(params.text_document.uri, params.position)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=True)
    )
    async def code_actions(ls: GradfixServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await ls.code_actions(params.text_document.uri, params.range, params.context.only)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve(ls: GradfixServer, action: types.CodeAction) -> types.CodeAction:
        return await ls.resolve(action)

    return server


class GradfixServer(LanguageServer):
    """The documents' checks and what is asked of them; everything but the checks runs on the
    event loop's thread."""

    def __init__(self) -> None:
        # Whole documents: pygls applies an incremental change by str.splitlines, which also ends a
        # line at a form feed or a line separator.
        super().__init__("gradfix", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradfix-check")
        self._checker = Checker()  # used on the worker thread only
        self._checks: dict[str, tuple[int | None, asyncio.Future[Checked]]] = {}  # uri -> its latest check
        self._publishing: dict[str, asyncio.Task[None]] = {}
        self._said: set[str] = set()  # configuration problems shown to the user
        self._logged: dict[str, tuple[str, ...]] = {}  # uri -> why it could not be checked, as last logged

    def diagnose(self, uri: str) -> None:
        if uri not in self._publishing and self._check(uri) is not None:
            self._publishing[uri] = asyncio.ensure_future(self._publish(uri))

    def saved(self, uri: str) -> None:
        """A saved file may change what a module of the project exports: every open document is
        checked again."""
        for document in list(self._checks):
            del self._checks[document]
            self.diagnose(document)

    def closed(self, uri: str) -> None:
        self._checks.pop(uri, None)
        self._logged.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    async def hover(self, uri: str, position: types.Position) -> types.Hover | None:
        checked = await self._checked(uri)
        if checked is None:
            return None
        at = checked.text_position(position)
        found = [f for f in checked.report.findings if checked.start(f) <= at <= checked.end(f)]
        if not found:
            return None
        explained = "\n\n---\n\n".join(render.explanation(rule_by_code(code)) for code in dict.fromkeys(f.code for f in found))
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=explained), range=checked.range(found[0]))

    async def code_actions(self, uri: str, requested: types.Range, only: Sequence[str] | None) -> list[types.CodeAction]:
        """The quick fixes of the findings in ``requested`` and the fix of every safe finding. An
        editor asks for them whenever the cursor moves: a client that resolves an action's edit
        when it is chosen gets none computed here (the worker stays free for diagnostics)."""
        checked = await self._checked(uri)
        if checked is None:
            return []
        start, end = checked.text_position(requested.start), checked.text_position(requested.end)
        offered = []
        if _wanted(types.CodeActionKind.QuickFix, only):
            offered += [
                _quick_fix(checked, f) for f in checked.report.findings if f.fix is not None and checked.start(f) <= end and start <= checked.end(f)
            ]
        if _wanted(FIX_ALL, only) and any(f.fix is FixKind.SAFE for f in checked.report.findings):
            offered.append(types.CodeAction("Fix all safe gradfix findings", kind=FIX_ALL, data=_fixing(uri, checked.rules.codes, FixMode.SAFE)))
        if _resolves_edits(self.client_capabilities):
            return offered
        return [action for action in [await self.resolve(action) for action in offered] if action.edit is not None]

    async def resolve(self, action: types.CodeAction) -> types.CodeAction:
        """``action`` with its edit, for the document's present version (none when its fix no
        longer changes it)."""
        uri, codes, mode = action.data["uri"], tuple(action.data["codes"]), FixMode(action.data["mode"])
        checked = await self._checked(uri)
        if checked is not None:
            fixed = await asyncio.get_running_loop().run_in_executor(self._worker, checked.fixed, codes, mode)
            if fixed.rewritten is not None:
                action.edit = self._edit(checked, fixed.rewritten)
        return action

    def _edit(self, checked: Checked, rewritten: bytes) -> types.WorkspaceEdit:
        """The smallest edit from the checked version to its ``rewritten`` code, for that version
        when the client takes versioned edits (it then refuses one for a document changed since)."""
        edit = checked.edit_to(rewritten.decode("utf-8"))
        capabilities = self.client_capabilities.workspace
        if capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes:
            document = types.OptionalVersionedTextDocumentIdentifier(uri=checked.uri, version=checked.version)
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=[edit])])
        return types.WorkspaceEdit(changes={checked.uri: [edit]})

    async def _checked(self, uri: str) -> Checked | None:
        future = self._check(uri)
        return None if future is None else await future

    def _check(self, uri: str) -> asyncio.Future[Checked] | None:
        """The check of the document's present version: under way, done, or started now; None for
        a document that is not open or not checked."""
        path = _checked_path(uri)
        document = self.workspace.text_documents.get(uri)
        if path is None or document is None:
            return None
        known = self._checks.get(uri)
        if known is not None and known[0] == document.version:
            return known[1]
        codec = self.workspace.position_codec
        future = asyncio.get_running_loop().run_in_executor(self._worker, self._checker.check, uri, document.version, document.source, path, codec)
        self._checks[uri] = (document.version, future)
        return future

    async def _publish(self, uri: str) -> None:
        """Publish the diagnostics of the document's latest version, once checked; the versions
        it had during a check are never checked."""
        try:
            future = self._check(uri)
            while future is not None:
                checked = await future
                latest = self._check(uri)  # (None once the document is closed)
                if latest is future:
                    self._say(checked)
                    diagnostics = [checked.diagnostic(f) for f in checked.report.findings]
                    self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=checked.version))
                    return
                future = latest
        finally:
            del self._publishing[uri]

    def _say(self, checked: Checked) -> None:
        """Why a document could not be checked: a configuration that cannot be read is shown to
        the user once; a file that does not parse (yet) is logged, each time the reason changes."""
        if checked.problem and checked.problem not in self._said:
            self._said.add(checked.problem)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"gradfix: {checked.problem}"))
        errors = (checked.problem, *checked.report.errors, *checked.report.internal_errors)
        if self._logged.get(checked.uri, ()) != errors:
            self._logged[checked.uri] = errors
            for error in filter(None, errors):
                self.window_log_message(types.LogMessageParams(type=types.MessageType.Info, message=f"gradfix: no findings shown: {error}"))


def _quick_fix(checked: Checked, finding: Finding) -> types.CodeAction:
    """The fix of the finding's rule in the document, in the mode its kind of fix needs (as
    ``gradfix fix --interactive`` offers a rule's fixes file by file); the title counts the
    findings it fixes when there are several."""
    mode = FixMode.UNSAFE if finding.fix is FixKind.UNSAFE else FixMode.SAFE
    places = sum(f.code == finding.code and mode.allows(f.fix) for f in checked.report.findings)
    return types.CodeAction(
        f"Fix {finding.code}" + (f" in {places} places" if places > 1 else "") + (" (unsafe: changes the maths)" if mode is FixMode.UNSAFE else ""),
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[checked.diagnostic(finding)],
        is_preferred=mode is FixMode.SAFE,
        data=_fixing(checked.uri, (finding.code,), mode),
    )


def _fixing(uri: str, codes: tuple[str, ...], mode: FixMode) -> dict[str, object]:
    """What an action fixes, as it comes back to be resolved."""
    return {"uri": uri, "codes": list(codes), "mode": mode.value}


def _resolves_edits(capabilities: types.ClientCapabilities) -> bool:
    support = capabilities.text_document and capabilities.text_document.code_action and capabilities.text_document.code_action.resolve_support
    return bool(support) and "edit" in support.properties


def _wanted(kind: str, only: Sequence[str] | None) -> bool:
    """Whether the client asks for actions of ``kind`` (``only`` names kinds or their parents)."""
    return only is None or any(kind == asked or kind.startswith(f"{asked}.") for asked in only)


def _checked_path(uri: str) -> Path | None:
    """The file a document is, when the server checks it: a Python file (not a notebook's cell,
    not an unsaved buffer: settings and the project are found from the file's folder)."""
    if urlparse(uri).scheme != "file" or (path := to_fs_path(uri)) is None:
        return None
    return Path(path) if path.endswith(".py") else None


@dataclass
class Checked:
    """One version of one document as checked, with the fixes asked of it so far; positions are
    converted between the document's code points and the client's units (``codec``)."""

    uri: str
    version: int | None
    text: str
    path: Path
    codec: PositionCodec
    report: FileReport
    rules: RuleSelection = field(default_factory=lambda: RuleSelection(()))
    project: ProjectSummaries = field(default_factory=dict)
    problem: str = ""  # why it was not checked: a configuration that cannot be read
    _fixes: dict[tuple[tuple[str, ...], FixMode], FileReport] = field(default_factory=dict)  # used on the worker thread only

    def fixed(self, codes: tuple[str, ...], mode: FixMode) -> FileReport:
        """The document fixed by the rules of ``codes`` in ``mode``."""
        if (codes, mode) not in self._fixes:
            self._fixes[codes, mode] = check_source(self.text.encode("utf-8"), RuleSelection(codes), mode, str(self.path), self.project)
        return self._fixes[codes, mode]

    @cached_property
    def lines(self) -> list[str]:
        return _LINE.findall(self.text)

    def start(self, finding: Finding) -> tuple[int, int]:
        return finding.line - 1, finding.column - 1

    def end(self, finding: Finding) -> tuple[int, int]:
        """Where the flagged code ends (the end of the finding's line when that is not known)."""
        if finding.end_line:
            return finding.end_line - 1, finding.end_column - 1
        return finding.line - 1, len(self._line(finding.line - 1).rstrip("\r\n"))

    def text_position(self, position: types.Position) -> tuple[int, int]:
        """A client's position as (line, code point)."""
        # (a copy: pygls moves a position past the end of its line back into the line it is given)
        at = self.codec.position_from_client_units(self.lines, types.Position(line=position.line, character=position.character))
        return at.line, at.character

    def position(self, line: int, column: int) -> types.Position:
        return types.Position(line=line, character=self.codec.client_num_units(self._line(line)[:column]))

    def range(self, finding: Finding) -> types.Range:
        return types.Range(start=self.position(*self.start(finding)), end=self.position(*self.end(finding)))

    def diagnostic(self, finding: Finding) -> types.Diagnostic:
        link = rules_page_link(finding.code)
        return types.Diagnostic(
            range=self.range(finding),
            message=finding.message,
            severity=types.DiagnosticSeverity.Warning,
            code=finding.code,
            code_description=types.CodeDescription(href=link) if link else None,
            source="gradfix",
            related_information=[self._related(line) for line in finding.related_lines] or None,
        )

    def _related(self, line: int) -> types.DiagnosticRelatedInformation:
        """Another line a finding involves (the first backward, the loop), named by its code."""
        code = self._line(line - 1).strip()
        indent = len(self._line(line - 1)) - len(self._line(line - 1).lstrip())
        where = types.Range(start=self.position(line - 1, indent), end=self.position(line - 1, indent + len(code)))
        return types.DiagnosticRelatedInformation(location=types.Location(uri=self.uri, range=where), message=code or f"line {line}")

    def _line(self, index: int) -> str:
        return self.lines[index] if 0 <= index < len(self.lines) else ""

    def edit_to(self, new_text: str) -> types.TextEdit:
        """One edit replacing the lines that differ between the document and ``new_text``."""
        old, new = self.lines, _LINE.findall(new_text)
        same_start = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        same_end = 0
        while same_end < min(len(old), len(new)) - same_start and old[-1 - same_end] == new[-1 - same_end]:
            same_end += 1
        end_line = len(old) - same_end
        end = types.Position(line=end_line, character=0)
        if end_line == len(old) and old and not old[-1].endswith(("\n", "\r")):
            end = self.position(end_line - 1, len(old[-1]))  # the end of a last line without a line break
        replaced = types.Range(start=types.Position(line=same_start, character=0), end=end)
        return types.TextEdit(range=replaced, new_text="".join(new[same_start : len(new) - same_end]))


class Checker:
    """Checks documents, each with the summaries of the project modules its text imports, read from
    disk at each check as ``gradfix check`` reads them (``project.ProjectModules``); a module's
    summaries are kept by the digest of its bytes, so a saved module is read as it is now."""

    def __init__(self) -> None:
        self._summaries = ModuleSummaries(module_exports)

    def check(self, uri: str, version: int | None, text: str, path: Path, codec: PositionCodec) -> Checked:
        settings, overrides = Settings(), Overrides()
        data = text.encode("utf-8")
        try:
            if excluded_when_named(settings, overrides)(path):
                return Checked(uri, version, text, path, codec, FileReport(str(path), original=data))
            rules, _ = rules_and_mode(settings, overrides, path, fixing=False)
            project = ProjectModules(self._summaries, settings).project_for(path, data)
        except ConfigError as error:
            return Checked(uri, version, text, path, codec, FileReport(str(path), original=data), problem=str(error))
        report = check_source(data, rules, FixMode.NONE, str(path), project)
        return Checked(uri, version, text, path, codec, report, rules, project)
