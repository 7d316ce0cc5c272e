"""tools/mutate.py: each outcome reported apart, and the mutated file always put back."""

import pytest

from tools import mutate

LIST = """
[[mutation]]
name = "flip"
promise = "answers 1"
file = "pkg/code.py"
original = "return 1"
replacement = "return 2"
tests = "tests/test_code.py -k 'one and only'"
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "code.py").write_text("def f():\n    return 1\n")
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    monkeypatch.setattr(mutate, "BACKUPS", tmp_path / ".mutate")
    listing = tmp_path / "mutations.toml"
    listing.write_text(LIST)
    return tmp_path, mutate.load(listing)


def fake_pytest(monkeypatch, project_root, *, fails_when_mutated=True, baseline=0, interrupt=False):
    seen = []

    def run_tests(mutation, database):
        mutated = "return 2" in (project_root / "pkg" / "code.py").read_text()
        seen.append((database, mutated, mutation.tests))
        if mutated and interrupt:
            raise KeyboardInterrupt
        if not mutated:
            return baseline, []
        return (1 if fails_when_mutated else 0), []

    monkeypatch.setattr(mutate, "run_tests", run_tests)
    return seen


def test_load__splits_test_arguments_like_a_shell_and_defaults_to_both_databases(project):
    _, (flip,) = project
    assert flip.tests == ["tests/test_code.py", "-k", "one and only"]
    assert flip.databases == ("sqlite", "postgres")


def test_load__refuses_an_entry_with_an_unknown_key(tmp_path):
    listing = tmp_path / "m.toml"
    listing.write_text(LIST.replace('promise = "answers 1"', 'promise = "x"\nkill = "me"'))
    with pytest.raises(SystemExit, match="unknown keys kill"):
        mutate.load(listing)


def test_apply__killed_then_the_file_is_back(project, monkeypatch):
    root, (flip,) = project
    seen = fake_pytest(monkeypatch, root)
    result = mutate.apply(flip, "sqlite", {})
    assert result.outcome == mutate.KILLED
    assert [mutated for _, mutated, _ in seen] == [False, True]  # the baseline first, then the mutation
    assert (root / "pkg" / "code.py").read_text() == "def f():\n    return 1\n"
    assert not (root / ".mutate").exists()


def test_apply__a_survivor_a_failing_baseline_and_a_moved_snippet_are_told_apart(project, monkeypatch):
    root, (flip,) = project
    fake_pytest(monkeypatch, root, fails_when_mutated=False)
    assert mutate.apply(flip, "sqlite", {}).outcome == mutate.SURVIVED
    fake_pytest(monkeypatch, root, baseline=1)
    assert mutate.apply(flip, "sqlite", {}).outcome == mutate.BASELINE
    (root / "pkg" / "code.py").write_text("def f():\n    return one()\n")
    assert mutate.apply(flip, "sqlite", {}).outcome == mutate.NOT_FOUND


def test_apply__ctrl_c_while_mutated_restores_the_file(project, monkeypatch):
    root, (flip,) = project
    fake_pytest(monkeypatch, root, interrupt=True)
    with pytest.raises(KeyboardInterrupt):
        mutate.apply(flip, "sqlite", {})
    assert (root / "pkg" / "code.py").read_text() == "def f():\n    return 1\n"


def test_repair_leftovers__puts_back_a_file_a_killed_run_left_mutated(project):
    root, (flip,) = project
    mutated = mutate._Mutated(flip, b"def f():\n    return 1\n", b"def f():\n    return 2\n")
    mutated.__enter__()  # as if SIGKILL came before __exit__
    assert "return 2" in (root / "pkg" / "code.py").read_text()
    assert mutate.repair_leftovers() == ["pkg/code.py"]
    assert (root / "pkg" / "code.py").read_text() == "def f():\n    return 1\n"


def test_the_shipped_list_loads():
    # Whether each snippet still matches is `make mutate`'s "snippet not found", not a test failure:
    # the code moves on in parallel, and the list is updated after the merge.
    entries = mutate.load()
    assert entries and all((mutate.ROOT / entry.file).is_file() for entry in entries)
    assert all(entry.replacement != entry.original for entry in entries)


def test_changed__keeps_the_mutations_of_changed_code_or_changed_tests(project):
    _, mutations = project
    other = mutate.Mutation(
        name="other", promise="p", file="pkg/other.py", original="a", replacement="b", tests=["tests/test_other.py::t"]
    )
    listed = [*mutations, other]
    assert mutate.touched_by_change(listed, {"pkg/code.py"}) == mutations
    assert mutate.touched_by_change(listed, {"tests/test_other.py"}) == [other]
    assert mutate.touched_by_change(listed, {"README.md"}) == []


def test_changed__reads_the_files_git_says_differ(tmp_path, monkeypatch):
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("1\n")
    (tmp_path / "b.py").write_text("1\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    (tmp_path / "b.py").write_text("2\n")  # changed, not even committed
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    assert mutate.changed_files("HEAD") == {"b.py"}
    assert mutate.changed_files("no-such-revision") is None  # unknown here: the caller runs them all
