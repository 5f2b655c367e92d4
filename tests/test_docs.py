"""The README and docs/ say what gradfix does: the rules' pages are the rules' own text, every command
and option they name exists, every link leads somewhere, the layout names files that exist."""

import importlib.util
import re
from pathlib import Path

import click
import pytest
import typer

from gradfix.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _generator():
    spec = importlib.util.spec_from_file_location("generate_rules", ROOT / "docs" / "generate_rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rules_table_and_the_rules_page_are_written_from_the_rules():
    generate = _generator()
    readme = README.read_text(encoding="utf-8")
    assert generate.readme_with_table(readme) == readme, "run `python docs/generate_rules.py`"
    assert generate.rules_page() == generate.RULES_PAGE.read_text(encoding="utf-8"), "run `python docs/generate_rules.py`"
    for code in ("GF001", "GF010"):
        assert f"| {code} |" in readme


def test_the_readme_is_at_most_12_kb():
    assert len(README.read_bytes()) <= 12 * 1024


def _commands() -> click.Group:
    return typer.main.get_command(app)


def _options(command: click.Command) -> set[str]:
    return {name for parameter in command.params for name in [*parameter.opts, *parameter.secondary_opts]}


COMMAND_WORDS = "check|fix|rules|explain|verify|diagnose|pr"
# `gradfix CMD …` or `gradfix --option` anywhere in code, up to where another program's text or a
# comment begins; or a span that starts with a command and an option, as prose names them (`fix --diff`).
_INVOCATION = re.compile(rf"(?:^|(?<=[\s\"'`(]))gradfix ((?:(?:{COMMAND_WORDS})\b|-)(?:[^\"'`#|<>;)\n]|&(?!&))*)")
_SPAN = re.compile(r"`([^`\n]+)`")
_PROSE_SPAN = re.compile(rf"^(?:{COMMAND_WORDS}) -")


def _code(text: str) -> tuple[list[str], list[str]]:
    """The fenced blocks of a Markdown text, and the code spans of the rest."""
    pieces = re.split(r"^```[^\n]*\n", text, flags=re.MULTILINE)
    blocks, prose = pieces[1::2], pieces[0::2]
    return blocks, [span for part in prose for span in _SPAN.findall(part)]


def _invocations(text: str) -> list[str]:
    """Every command line the text names: `gradfix …` in code, and spans such as `fix --diff`."""
    blocks, spans = _code(text)
    found = [match.group(1).strip() for code in [*blocks, *spans] for match in _INVOCATION.finditer(code)]
    found += [span for span in spans if _PROSE_SPAN.match(span)]
    return found


def _named_options(words: list[str]) -> list[str]:
    options = []
    for word in words:
        if word == "--":  # what follows is the script's
            break
        if word.startswith("-") and word != "-":
            options.append(word.split("=")[0])
    return options


def test_the_invocation_reader_finds_commands_and_options_where_the_docs_write_them():
    text = (
        "gradfix finds bugs: `gradfix check - --stdin-filename a.py` and `fix --diff`\n"
        "```yaml\n"
        '- run: gradfix check . --shard "$SHARD/4" > out\n'
        'multi-gitter run "gradfix fix ." -O org\n'
        "gradfix diagnose train.py -- --epochs 3  # comment --not\n"
        "```\n"
    )
    assert _invocations(text) == [
        "check . --shard",
        "fix .",
        "diagnose train.py -- --epochs 3",
        "check - --stdin-filename a.py",
        "fix --diff",
    ]
    assert _named_options("diagnose train.py -- --epochs 3".split()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_and_option_the_page_names_exists(page):
    group = _commands()
    text = page.read_text(encoding="utf-8")
    named = _invocations(text)
    assert named, f"{page.name} names no gradfix command"
    for span in _code(text)[1]:  # a span that starts `gradfix word` names a command (or a placeholder)
        word = re.match(r"gradfix ([a-z]\w*)", span)
        assert word is None or word.group(1) in group.commands, f"{page.name}: `{span}`: no command {word.group(1)}"
    for invocation in named:
        words = invocation.split()
        if words[0].startswith("-"):
            command, options = group, _named_options(words)
        else:
            assert words[0] in group.commands, f"{page.name}: `gradfix {invocation}`: no command {words[0]}"
            command, options = group.commands[words[0]], _named_options(words[1:])
        for option in options:
            assert option in _options(command) | _options(group), f"{page.name}: `gradfix {invocation}`: no option {option}"


def test_every_option_of_the_configuration_tables_exists():
    group = _commands()
    known = _options(group).union(*(_options(group.commands[name]) for name in ("check", "fix")))
    rows = [line for line in (ROOT / "docs" / "configuration.md").read_text().splitlines() if line.startswith("| `-")]
    assert rows
    for row in rows:
        first_cell = row.split("|")[1]
        for option in re.findall(r"`(-[\w-]+)", first_cell):
            assert option in known, row


def test_every_magic_the_pages_name_exists():
    from gradfix.cli.ipython import USAGE

    usage = {tuple(line.split()[:2]) for line in USAGE.splitlines()}
    magics = [m for page in PAGES for m in re.findall(r"%gradfix (\w+)((?: --?[\w-]+)*)", page.read_text())]
    assert magics
    for magic, options in magics:
        assert ("%gradfix", magic) in usage, magic
        for option in options.split():
            assert option in USAGE, f"%gradfix {magic} {option}"


def _slug(heading: str) -> str:
    """The anchor GitHub makes of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_of_the_page_leads_to_a_file_and_heading_that_exist(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if re.match(r"\w+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {_slug(heading) for heading in headings}, f"{page.name}: {target}"


def test_every_path_of_the_layout_exists():
    text = (ROOT / "docs" / "contributing.md").read_text()
    layout = text.split("## Layout", 1)[1].split("```", 2)[1]
    parents: list[tuple[int, str]] = []
    checked = 0
    for line in layout.splitlines():
        match = re.match(r"( *)([\w.-]+(?:/[\w.-]+)*(?:/|\.py|\.yml))(?:\s|$)", line)
        if match is None or len(match.group(1)) > 12:  # a description's continuation
            continue
        indent, name = len(match.group(1)), match.group(2)
        parents = [(level, folder) for level, folder in parents if level < indent]
        path = "".join(folder for _, folder in parents) + name
        assert (ROOT / path).exists(), f"docs/contributing.md names {path}, which does not exist"
        checked += 1
        if name.endswith("/"):
            parents.append((indent, name))
    assert checked > 30


def test_the_changelog_has_one_line_per_change():
    """(Which section names the version: test_packaging.)"""
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    continued = [line for line in changelog.splitlines() if line.startswith(" ")]
    assert continued == [], "a change is one line"


def test_the_readme_names_the_test_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    [command] = [line.strip() for line in ci.splitlines() if "pytest" in line and not line.lstrip().startswith("#")]
    assert f"&& {command}`" in README.read_text()
