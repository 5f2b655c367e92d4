"""`gradfix server`, end to end: a real LSP client (pytest-lsp) starts the command and talks to it
over stdio, as an editor does: diagnostics, quick fixes and their edits, hover, settings."""

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp", reason="the language server's tests need pytest-lsp (the test extra)")
pytest.importorskip("pygls", reason="the language server needs pygls (the server extra)")

from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from gradfix.cli import app as cli_app  # noqa: E402
from gradfix.cli import render  # noqa: E402
from gradfix.cli.rule_pages import rules_page  # noqa: E402
from gradfix.codemods.registry import rule_by_code  # noqa: E402

from .conftest import FIXTURES  # noqa: E402
from .test_docs import ROOT, _generator  # noqa: E402
from .test_engine import _CRITERION, _SETUP, _UPDATE  # noqa: E402
from .test_security import leaves_a_mark  # noqa: E402

TWICE = FIXTURES / "gf001_duplicate_backward" / "for_loop"  # GF001, a safe fix
NEVER = 120  # seconds: no check takes a fraction of it, even on a loaded machine
AFTER_THE_LOOP = FIXTURES / "gf008_backward_after_loop" / "module_level_epoch_batch_loop"  # GF008, an unsafe fix


def _recording_client() -> LanguageClient:
    """pytest-lsp's client, which also keeps every diagnostics notification in order (its own keeps
    the last of each document, without its version)."""
    client = LanguageClient()

    def published(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: published})
    client.published = []
    return client


SERVER = ClientServerConfig(
    # As an editor starts the console script: nothing from the working folder on sys.path.
    server_command=[sys.executable, "-P", "-m", "gradfix", "server"],
    client_factory=_recording_client,
)


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    """A client that says what VS Code says it can do (resolve an action's edit when it is chosen)."""
    await lsp_client.initialize_session(types.InitializeParams(capabilities=client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER)
async def bare_client(lsp_client: LanguageClient):
    """A client that says it can do nothing beyond the protocol's minimum."""
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def project(tmp_path):
    """A git work tree: settings and the project's modules are looked for no higher."""
    (tmp_path / ".git").mkdir()
    return tmp_path


class Document:
    """A document the client opened, as the editor holds it."""

    def __init__(self, client: LanguageClient, path: Path | str, text: str, version: int = 1) -> None:
        """``path``: a file, or the URI of a document that is none."""
        self.client, self.text, self.version = client, text, version
        self.uri = path.as_uri() if isinstance(path, Path) else path
        item = types.TextDocumentItem(uri=self.uri, language_id="python", version=version, text=text)
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))

    def change(self, text: str) -> None:
        self.text, self.version = text, self.version + 1
        document = types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version)
        change = types.TextDocumentContentChangeWholeDocument(text=text)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(text_document=document, content_changes=[change]))

    async def diagnostics(self, after: int = 0) -> list[types.Diagnostic]:
        """What the server publishes for the document's present version (``after`` that many
        notifications)."""
        while True:
            for params in self.client.published[after:]:
                if params.uri == self.uri and params.version == self.version:
                    return list(params.diagnostics)
            # A server that never publishes them fails the test, instead of stopping the suite.
            await asyncio.wait_for(self.client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), NEVER)

    def save(self, text: str, path: Path) -> int:
        """Write ``text`` to ``path`` as the editor saves it; the notifications so far."""
        path.write_text(text)
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=self.uri)))
        return len(self.client.published)

    async def actions(self, at: types.Range, only: list[str] | None = None) -> list[types.CodeAction]:
        context = types.CodeActionContext(diagnostics=[], only=only)
        params = types.CodeActionParams(text_document=types.TextDocumentIdentifier(uri=self.uri), range=at, context=context)
        return list(await self.client.text_document_code_action_async(params) or [])

    async def applied(self, action: types.CodeAction) -> str:
        """The text once the action's edit is applied, as the client applies it (resolving the
        action first when it came without its edit)."""
        if action.edit is None:
            action = await self.client.code_action_resolve_async(action)
        if action.edit.document_changes is None:
            edits = action.edit.changes[self.uri]
        else:
            [change] = action.edit.document_changes
            assert change.text_document.uri == self.uri and change.text_document.version == self.version
            edits = change.edits
        text = self.text
        for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
            text = text[: _offset(text, edit.range.start)] + edit.new_text + text[_offset(text, edit.range.end) :]
        return text


def _offset(text: str, position: types.Position) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: position.line]) + position.character


def _where(diagnostic: types.Diagnostic) -> tuple[int, int, int, int]:
    start, end = diagnostic.range.start, diagnostic.range.end
    return start.line, start.character, end.line, end.character


@pytest.mark.asyncio
async def test_a_finding_is_a_diagnostic_with_its_range_related_line_and_rule_page(client, project):
    document = Document(client, project / "train.py", (TWICE / "before.py").read_text())
    [diagnostic] = await document.diagnostics()
    assert (diagnostic.code, diagnostic.source, diagnostic.severity) == ("GF001", "gradfix", types.DiagnosticSeverity.Warning)
    assert diagnostic.message == "`loss` is backwarded again (first at line 17); its graph was freed by the first call"
    assert _where(diagnostic) == (17, 4, 17, 19)  # line 18's `loss.backward()`
    [related] = diagnostic.related_information
    assert related.location.uri == document.uri and related.message == "loss.backward()"
    assert (related.location.range.start.line, related.location.range.start.character) == (16, 4)
    # This test environment is an editable install of this clone: the link is its rules page, at the
    # rule's heading.
    anchor = _generator().anchor(rule_by_code("GF001"))
    assert diagnostic.code_description.href == f"{(ROOT / 'docs' / 'rules.md').as_uri()}#{anchor}"


@pytest.mark.asyncio
async def test_columns_count_utf16_code_units_and_a_form_feed_ends_no_line(client, project):
    """The protocol's default: a character beyond the Basic Multilingual Plane is two units.
    Python does not end a line at a form feed, and neither does the protocol."""
    before = (TWICE / "before.py").read_text()
    text = before.replace("    loss.backward()\n    optimizer.step()", '    print("\U0001f600"); loss.backward()  # \x0c\n    optimizer.step()')
    document = Document(client, project / "train.py", text.replace("torch.manual_seed(0)", "torch.manual_seed(0)  # page\x0cbreak"))
    [diagnostic] = await document.diagnostics()
    assert _where(diagnostic) == (17, 4 + len('print("??"); '), 17, 4 + len('print("??"); loss.backward()'))
    at = types.Position(line=17, character=diagnostic.range.end.character - 1)
    hover = await client.text_document_hover_async(types.HoverParams(text_document=types.TextDocumentIdentifier(uri=document.uri), position=at))
    assert hover.range == diagnostic.range


def test_the_rules_page_of_a_github_install_is_at_its_commit():
    direct_url = {"url": "https://github.com/someone/gradfix.git", "vcs_info": {"vcs": "git", "commit_id": "0123abc"}}
    assert rules_page(direct_url) == "https://github.com/someone/gradfix/blob/0123abc/docs/rules.md"
    assert rules_page({"url": "https://example.com/gradfix.tar.gz", "archive_info": {}}) is None
    assert rules_page(None) is None


@pytest.mark.asyncio
async def test_a_safe_quick_fix_and_fix_all_edit_the_document_into_the_fixed_file(client, project):
    document = Document(client, project / "train.py", (TWICE / "before.py").read_text())
    [diagnostic] = await document.diagnostics()
    [quick_fix, fix_all] = await document.actions(diagnostic.range)
    assert quick_fix.edit is None and fix_all.edit is None  # computed when chosen: this client resolves them
    assert (quick_fix.title, quick_fix.kind, quick_fix.is_preferred) == ("Fix GF001", types.CodeActionKind.QuickFix, True)
    assert [d.code for d in quick_fix.diagnostics] == ["GF001"]
    assert await document.applied(quick_fix) == (TWICE / "after.py").read_text()
    assert (fix_all.title, fix_all.kind) == ("Fix all safe gradfix findings", "source.fixAll.gradfix")
    assert await document.applied(fix_all) == (TWICE / "after.py").read_text()
    # On save, an editor asks for the fix-all action alone; on a line without a finding there is no quick fix.
    assert [a.kind for a in await document.actions(diagnostic.range, only=["source.fixAll"])] == ["source.fixAll.gradfix"]
    elsewhere = types.Range(start=types.Position(line=2, character=0), end=types.Position(line=2, character=0))
    assert [a.kind for a in await document.actions(elsewhere)] == ["source.fixAll.gradfix"]


@pytest.mark.asyncio
async def test_a_client_that_does_not_resolve_actions_gets_their_edits_with_them(bare_client, project):
    document = Document(bare_client, project / "train.py", (TWICE / "before.py").read_text())
    [diagnostic] = await document.diagnostics()
    [quick_fix, fix_all] = await document.actions(diagnostic.range)
    assert quick_fix.edit.changes and fix_all.edit.changes  # with the edit, as `changes`: it takes no versioned edits
    assert await document.applied(quick_fix) == await document.applied(fix_all) == (TWICE / "after.py").read_text()


@pytest.mark.asyncio
async def test_an_unsafe_fix_says_so_is_not_preferred_and_is_not_part_of_fix_all(client, project):
    document = Document(client, project / "train.py", (AFTER_THE_LOOP / "before.py").read_text())
    diagnostics = await document.diagnostics()
    assert [d.code for d in diagnostics] == ["GF004", "GF008"]  # GF004 is reported, with no fix
    [quick_fix] = await document.actions(diagnostics[1].range)
    assert (quick_fix.title, quick_fix.is_preferred) == ("Fix GF008 (unsafe: changes the maths)", False)
    assert await document.applied(quick_fix) == (AFTER_THE_LOOP / "after.py").read_text()
    assert await document.actions(diagnostics[0].range) == []


@pytest.mark.asyncio
async def test_an_edit_updates_the_diagnostics(client, project):
    document = Document(client, project / "train.py", (TWICE / "after.py").read_text())
    assert await document.diagnostics() == []
    document.change((TWICE / "before.py").read_text())
    assert [d.code for d in await document.diagnostics()] == ["GF001"]
    document.change((TWICE / "after.py").read_text())
    assert await document.diagnostics() == []


@pytest.mark.asyncio
async def test_hover_on_a_finding_explains_its_rule(client, project):
    document = Document(client, project / "train.py", (TWICE / "before.py").read_text())
    [diagnostic] = await document.diagnostics()
    inside = types.Position(line=17, character=10)
    hover = await client.text_document_hover_async(types.HoverParams(text_document=types.TextDocumentIdentifier(uri=document.uri), position=inside))
    assert hover.contents.value == render.explanation(rule_by_code("GF001"))
    assert hover.range == diagnostic.range
    outside = types.Position(line=2, character=3)
    assert (
        await client.text_document_hover_async(types.HoverParams(text_document=types.TextDocumentIdentifier(uri=document.uri), position=outside))
        is None
    )


@pytest.mark.asyncio
async def test_settings_come_from_the_nearest_pyproject_as_the_command_reads_them(client, project):
    (project / "pyproject.toml").write_text(
        '[tool.gradfix]\nignore = ["GF004"]\nextend-exclude = ["generated"]\n[tool.gradfix.per-file-ignores]\n"legacy/*" = ["GF001", "GF010"]\n'
    )
    twice, after_the_loop = (TWICE / "before.py").read_text(), (AFTER_THE_LOOP / "before.py").read_text()
    (project / "legacy").mkdir()
    assert await Document(client, project / "legacy" / "old.py", twice).diagnostics() == []
    assert [d.code for d in await Document(client, project / "new.py", twice).diagnostics()] == ["GF001"]
    assert [d.code for d in await Document(client, project / "loop.py", after_the_loop).diagnostics()] == ["GF008"]
    # As pre-commit names files (--force-exclude): an excluded file is not checked.
    assert await Document(client, project / "generated" / "model.py", twice).diagnostics() == []


@pytest.mark.asyncio
async def test_a_configuration_that_cannot_be_read_is_said_and_nothing_is_shown(client, project):
    (project / "pyproject.toml").write_text('[tool.gradfix]\nselect = ["GF999"]\n')
    assert await Document(client, project / "train.py", (TWICE / "before.py").read_text()).diagnostics() == []
    [message] = client.messages
    assert message.type == types.MessageType.Warning
    assert message.message.startswith(f"gradfix: {project / 'pyproject.toml'}: [tool.gradfix] select: unknown rule code")


@pytest.mark.asyncio
async def test_code_that_does_not_parse_has_no_diagnostics_and_the_server_goes_on(client, project):
    document = Document(client, project / "train.py", "for batch in loader:\n    loss = (model(batch)\n")
    assert await document.diagnostics() == []
    assert any("train.py:" in m.message and "cannot parse" in m.message for m in client.log_messages)
    document.change((TWICE / "before.py").read_text())
    assert [d.code for d in await document.diagnostics()] == ["GF001"]


@pytest.mark.asyncio
async def test_a_file_is_checked_with_the_summaries_of_the_project_modules_it_imports(client, project):
    """As `gradfix check` of the project (tests/test_engine.py's case): pkg/train.py never writes
    "backward"; the helpers of pkg/steps.py, read from disk, backward."""
    (project / "pkg").mkdir()
    (project / "pkg" / "steps.py").write_text(_UPDATE + _CRITERION)
    train = (
        "from .steps import update\n" + _SETUP + "for batch in torch.randn(4, 2, 3):\n    out = model(batch)\n"
        "    update(out.mean(), optimizer)\n    update(out.pow(2).mean(), optimizer)\n"
    )
    assert [d.code for d in await Document(client, project / "pkg" / "train.py", train).diagnostics()] == ["GF002"]


@pytest.mark.asyncio
async def test_saving_a_module_checks_the_open_files_again_with_what_it_exports_now(client, project):
    steps = project / "steps.py"
    steps.write_text("def update(loss, optimizer):\n    optimizer.step()\n")
    train = "from steps import update\n" + _SETUP + "loss = model(torch.randn(4, 3)).sum()\nloss.backward()\nupdate(loss, optimizer)\n"
    document = Document(client, project / "train.py", train)
    assert await document.diagnostics() == []
    editing = Document(client, steps, steps.read_text())
    await editing.diagnostics()
    editing.change(_UPDATE)
    saved = editing.save(_UPDATE, steps)
    assert [d.code for d in await document.diagnostics(after=saved)] == ["GF001"]


@pytest.mark.asyncio
async def test_nothing_of_the_workspace_runs_and_only_python_files_are_checked(client, project):
    marked = leaves_a_mark(project) + (TWICE / "before.py").read_text()
    (project / "steps.py").write_text(leaves_a_mark(project) + _UPDATE)
    (project / "pyproject.toml").write_text("[tool.gradfix]\n")
    Document(client, project / "notes.ipynb", marked)
    Document(client, "vscode-notebook-cell:/notes.ipynb#W0sZmlsZQ", marked)
    Document(client, "untitled:Untitled-1", marked)
    document = Document(client, project / "train.py", "import steps\n" + marked)
    assert [d.code for d in await document.diagnostics()] == ["GF001"]
    assert not (project / "ran").exists()
    assert {params.uri for params in client.published} == {document.uri}


def test_the_command_says_what_to_install_when_pygls_is_missing(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "pygls" else find_spec(name, *args))
    result = CliRunner().invoke(cli_app.app, ["server"])
    assert result.exit_code == 2
    assert "the language server needs pygls" in result.output and "gradfix[server]" in result.output
