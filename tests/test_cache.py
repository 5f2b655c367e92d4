"""The cache of reports (``codemods.cache``), ``--shard`` and ``--output-format json-lines``."""

import hmac
import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods import check
from gradfix.codemods.cache import MAC_BYTES, ReportCache
from gradfix.codemods.report import FixMode
from gradfix.codemods.run import check_files
from gradfix.codemods.registry import all_rules, select_rules
from gradfix.codemods.shard import Shard

from .conftest import FIXTURES

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
CLEAN = (FIXTURES / "gf002_separate_backwards" / "ok_two_independent_networks" / "ok.py").read_text()
STEPS = "def train_step(model, batch):\n    loss = model(batch).pow(2).mean()\n    loss.backward()\n    return loss\n"
TRAIN = (
    "import torch\n\nfrom .steps import train_step\n\nmodel = torch.nn.Linear(3, 1)\n"
    "for batch in torch.randn(4, 2, 3):\n    loss = train_step(model, batch)\n    loss.backward()\n"
)


@pytest.fixture(autouse=True)
def machine(tmp_path, monkeypatch):
    """This machine's user cache folder, where the cache's secret is made: not the real one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))


@pytest.fixture
def checked(monkeypatch):
    """The files each call of ``check_files`` really checked (the others came from the cache)."""
    paths = []
    check_source = check.check_source

    def counting(data, rules, mode, path, *args):
        paths.append(os.path.basename(path))
        return check_source(data, rules, mode, path, *args)

    monkeypatch.setattr(check, "check_source", counting)
    return paths


def run(files, cache, rules=None, mode=FixMode.NONE):
    return [(r.path, r.findings, r.rewritten, r.errors) for r in check_files(files, rules or all_rules(), mode, 1, cache)]


def entries(folder):
    return sorted(path for path in folder.rglob("*") if path.is_file() and path.name != ".gitignore")


SECRET = b"this machine's".ljust(32)


def sealed(entry, body):
    """``body`` as this machine's gradfix (``SECRET``) would write it in ``entry``: behind the MAC
    of the entry's name and body, which only a writer that knows the secret can compute."""
    return hmac.digest(SECRET, entry.name.encode() + body, "sha256") + body


def test_an_unchanged_file_is_served_and_a_changed_one_checked_again(tmp_path, checked):
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text(DOUBLE)
    second.write_text(CLEAN)
    cache = ReportCache(tmp_path / "cache")
    cold = run([first, second], cache)
    assert checked == ["first.py", "second.py"] and cold[0][1]
    assert run([first, second], cache) == cold
    assert checked == ["first.py", "second.py"]
    second.write_text(DOUBLE)
    assert run([first, second], cache)[1][1]
    assert checked == ["first.py", "second.py", "second.py"]


def test_another_version_rule_selection_or_fix_mode_is_a_miss(tmp_path, checked):
    script = tmp_path / "train.py"
    script.write_text(DOUBLE)
    folder = tmp_path / "cache"
    run([script], ReportCache(folder))
    run([script], ReportCache(folder, version="0.0.0-another"))
    assert run([script], ReportCache(folder), rules=select_rules(["GF001"], [])) == [(str(script), [], None, [])]
    fixed = run([script], ReportCache(folder), mode=FixMode.SAFE)
    assert fixed[0][2] is not None
    assert len(checked) == 4


def test_a_file_is_checked_again_when_a_file_it_imports_changes(tmp_path):
    (tmp_path / "pkg").mkdir()
    steps, train = tmp_path / "pkg" / "steps.py", tmp_path / "pkg" / "train.py"
    steps.write_text(STEPS)
    train.write_text(TRAIN)
    cache = ReportCache(tmp_path / "cache")
    assert [f.code for f in check_files([steps, train], all_rules(), FixMode.NONE, 1, cache)[1].findings] == ["GF001"]
    steps.write_text(STEPS.replace("    loss.backward()\n", ""))  # the helper no longer backwards
    assert check_files([steps, train], all_rules(), FixMode.NONE, 1, cache)[1].findings == []


def test_a_report_read_back_equals_the_one_kept(tmp_path, checked):
    (tmp_path / "pkg").mkdir()
    steps, train, double = tmp_path / "pkg" / "steps.py", tmp_path / "pkg" / "train.py", tmp_path / "double.py"
    steps.write_text(STEPS)
    train.write_text(TRAIN)
    double.write_text(DOUBLE)
    cache = ReportCache(tmp_path / "cache")
    kept = check_files([steps, train, double], all_rules(), FixMode.SAFE, 1, cache)
    assert kept[1].fixed and kept[2].rewritten and kept[2].fixed  # every kind of field
    assert check_files([steps, train, double], all_rules(), FixMode.SAFE, 1, cache) == kept
    assert checked == ["steps.py", "train.py", "double.py"]  # each once: train with steps' summaries


def test_a_corrupt_or_partial_entry_is_a_miss(tmp_path, checked):
    script = tmp_path / "train.py"
    script.write_text(DOUBLE)
    cache = ReportCache(tmp_path / "cache")
    cold = run([script], cache)
    [entry] = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name != ".gitignore"]
    entry.write_bytes(entry.read_bytes()[:20])
    assert run([script], cache) == cold
    assert checked == ["train.py", "train.py"]
    assert (tmp_path / "cache" / ".gitignore").read_text() == "*\n"


def as_json(change):
    return lambda data: json.dumps(change(json.loads(data))).encode()


TAMPERED = {
    "a path that is a number": as_json(lambda entry: {**entry, "path": 7}),
    "a flag that is a number": as_json(lambda entry: {**entry, "prefiltered": 0}),
    "a line that is a flag": as_json(lambda entry: {**entry, "findings": [{**entry["findings"][0], "line": True}]}),
    "a kind of fix that is none": as_json(lambda entry: {**entry, "findings": [{**entry["findings"][0], "fix": "dangerous"}]}),
    "bytes that are not base64": as_json(lambda entry: {**entry, "original": "not base64!"}),
    "a set that is an object": as_json(lambda entry: {**entry, "imports": {"a": 1}}),
    "a field too many": as_json(lambda entry: {**entry, "unknown": 1}),
    "a field missing": as_json(lambda entry: {key: value for key, value in entry.items() if key != "errors"}),
    "not an object": as_json(lambda entry: [entry]),
    "nested too deep": lambda data: b"[" * 100_000 + b"]" * 100_000,
    "not UTF-8": lambda data: b"\xff" + data,
}


@pytest.mark.parametrize("tampered", TAMPERED.values(), ids=TAMPERED.keys())
def test_an_entry_of_another_shape_is_a_miss(tmp_path, checked, tampered):
    """Even behind a MAC this machine's gradfix computed (an entry of an older or broken one)."""
    script = tmp_path / "train.py"
    script.write_text(DOUBLE)
    cache = ReportCache(tmp_path / "cache", secret=SECRET)
    cold = run([script], cache)
    [entry] = entries(tmp_path / "cache")
    entry.write_bytes(sealed(entry, tampered(entry.read_bytes()[MAC_BYTES:])))
    assert run([script], cache) == cold
    assert checked == ["train.py", "train.py"]


def test_an_edited_entry_or_one_copied_over_another_is_a_miss(tmp_path, checked):
    """Whoever can write the folder (a shared one, a restored CI cache) cannot change what an entry
    says, nor serve one file's report for another."""
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(DOUBLE)
    good.write_text(CLEAN)
    cache = ReportCache(tmp_path / "cache")
    run([bad], cache)
    [bad_entry] = entries(tmp_path / "cache")
    clean = run([good], cache)
    [good_entry] = [entry for entry in entries(tmp_path / "cache") if entry != bad_entry]
    shutil.copyfile(bad_entry, good_entry)
    assert run([good], cache) == clean
    data = bad_entry.read_bytes()
    start = data.index(b'{"path":')  # the report, after the entry's head
    head, body = data[:start], json.loads(data[start:])
    bad_entry.write_bytes(head + json.dumps({**body, "findings": []}, separators=(",", ":")).encode())  # a report of the right shape
    assert run([bad], cache)[0][1]
    assert checked == ["bad.py", "good.py", "good.py", "bad.py"]


def test_a_report_is_served_only_for_the_path_and_bytes_it_was_made_of(tmp_path):
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(DOUBLE)
    good.write_text(CLEAN)
    cache = ReportCache(tmp_path / "cache")
    [report] = check_files([bad], all_rules(), FixMode.SAFE, 1, None)
    for path, data in ((good, good.read_bytes()), (good, bad.read_bytes()), (bad, good.read_bytes())):
        key = cache.key(path, data, all_rules(), FixMode.SAFE, None)
        cache.store(key, report)
        assert cache.load(key) is None, (path, data)
    key = cache.key(bad, bad.read_bytes(), all_rules(), FixMode.SAFE, None)
    cache.store(key, report)
    assert cache.load(key) == report


def hand_to_another_user(path):
    os.chown(path, 65534, 65534)


UNTRUSTED = {
    "a cache folder others may write": (lambda folder, secret: os.chmod(folder, 0o777), "can be written by other users"),
    "an entries folder others may write": (lambda folder, secret: os.chmod(entries(folder)[0].parent, 0o775), "can be written by other users"),
    "a cache folder of another user": (lambda folder, secret: hand_to_another_user(folder), "belongs to another user"),
    "an entries folder of another user": (lambda folder, secret: hand_to_another_user(entries(folder)[0].parent), "belongs to another user"),
    "a secret others may read": (lambda folder, secret: os.chmod(secret, 0o644), "can be read or written by other users"),
    "a secret others may write": (lambda folder, secret: os.chmod(secret, 0o620), "can be read or written by other users"),
    "a secret of another user": (lambda folder, secret: hand_to_another_user(secret), "belongs to another user"),
}


@pytest.mark.parametrize(("untrust", "why"), UNTRUSTED.values(), ids=UNTRUSTED.keys())
def test_a_folder_or_secret_others_could_write_is_not_used(tmp_path, checked, untrust, why):
    if "another user" in why and os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    script, folder = tmp_path / "train.py", tmp_path / "cache"
    script.write_text(DOUBLE)
    cold = run([script], ReportCache(folder))
    kept = entries(folder)
    untrust(folder, tmp_path / "user-cache" / "gradfix" / "cache-secret")
    cache = ReportCache(folder)
    assert why in cache.unusable()
    assert run([script], cache) == cold
    assert run([script], cache) == cold
    assert checked == ["train.py"] * 3 and entries(folder) == kept


def test_entries_are_served_only_with_the_secret_they_were_written_with(tmp_path, checked):
    script = tmp_path / "train.py"
    script.write_text(DOUBLE)
    folder = tmp_path / "cache"
    run([script], ReportCache(folder))
    run([script], ReportCache(folder))
    run([script], ReportCache(folder, secret=b"another machine's".ljust(32)))
    assert checked == ["train.py", "train.py"]
    secret = tmp_path / "user-cache" / "gradfix" / "cache-secret"
    assert len(secret.read_bytes()) == 32 and secret.stat().st_mode & 0o077 == 0


def test_the_settings_of_pyproject_are_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADFIX_NO_CACHE")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(DOUBLE)
    cli = CliRunner()
    assert cli.invoke(app, ["check", "train.py"]).exit_code == 1
    assert (tmp_path / ".gradfix_cache" / ".gitignore").is_file()
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF002", "GF010"]\n')
    assert cli.invoke(app, ["check", "train.py"]).exit_code == 0
    assert cli.invoke(app, ["check", "train.py", "--no-cache", "--cache-dir", "elsewhere"]).exit_code == 0
    assert not (tmp_path / "elsewhere").exists()


def test_shards_are_disjoint_and_cover_the_tree(tmp_path):
    files = [tmp_path / f"package_{i % 7}" / f"module_{i}.py" for i in range(200)]
    for count in (1, 2, 3, 8):
        shards = [Shard(number, count).select(files, tmp_path) for number in range(1, count + 1)]
        assert sorted(path for shard in shards for path in shard) == sorted(files)
        assert all(shard for shard in shards)  # 200 files: every shard gets some
    assert Shard.parse(" 2/4") == Shard(2, 4)
    for wrong in ("0/4", "5/4", "2", "a/b"):
        with pytest.raises(ValueError):
            Shard.parse(wrong)


def test_shards_of_the_command_line_merge_into_the_whole_json_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for index in range(6):
        (tmp_path / f"train_{index}.py").write_text(DOUBLE)
    cli = CliRunner()
    whole = cli.invoke(app, ["check", ".", "--output-format", "json"])
    parts = [cli.invoke(app, ["check", ".", "--shard", f"{i}/3", "--output-format", "json-lines"]) for i in (1, 2, 3)]
    records = [json.loads(line) for part in parts for line in part.stdout.splitlines()]
    assert sorted(records, key=json.dumps) == sorted(json.loads(whole.stdout), key=json.dumps)
    assert len(records) == 6
    assert cli.invoke(app, ["check", ".", "--shard", "4/3"]).exit_code == 2
