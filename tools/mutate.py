"""`make mutate`: break one promise at a time in the shipped code and check that a test notices.

Each mutation in `tools/mutations.toml` names a file, an exact snippet of it, the snippet's broken
replacement, and the pytest arguments that must fail on the broken code. For each one, on each
database it lists (SQLite, PostgreSQL), this tool

1. runs those tests on the unchanged code (a test that already fails proves nothing);
2. writes the mutation, runs the tests again, and calls the mutation killed only when pytest reports
   failing tests (exit status 1); a crash, a collection error or "no tests ran" is reported apart;
3. puts the original file back, always: in a `finally`, on Ctrl-C and on SIGTERM too. A copy of the
   original is kept in `.mutate/` while a file is mutated, so a run killed with SIGKILL is repaired
   by the next one before it starts.

The outcomes are `killed`, `survived`, `snippet not found` (the code moved on: the list needs
updating, not the tests), `baseline fails`, `error` and `needs PostgreSQL`. Any outcome but `killed`
fails the run.

    python -m tools.mutate                 # every mutation, on SQLite and PostgreSQL
    python -m tools.mutate --list          # what would run
    python -m tools.mutate --only sanitize-bare-bearer --database sqlite
    python -m tools.mutate --changed 624d725  # only the mutations of files changed since that commit

`--changed REV` keeps the mutations whose file, or one of whose test files, differs between REV and
the working tree (committed or not): a change is checked against the promises it could break.
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

ROOT = Path(__file__).resolve().parent.parent
LIST = Path(__file__).with_name("mutations.toml")
BACKUPS = ROOT / ".mutate"
DATABASES = ("sqlite", "postgres")

KILLED = "killed"
SURVIVED = "survived"
NOT_FOUND = "snippet not found"
AMBIGUOUS = "snippet found more than once"
BASELINE = "baseline fails"
ERROR = "error"
NO_POSTGRES = "needs PostgreSQL"


@dataclass(frozen=True)
class Mutation:
    name: str
    promise: str
    file: str
    original: str
    replacement: str
    tests: list[str]
    databases: tuple[str, ...] = DATABASES


@dataclass
class Result:
    mutation: Mutation
    database: str
    outcome: str
    detail: str = ""
    seconds: float = 0.0
    output: list[str] = field(default_factory=list)


def load(path: Path = LIST) -> list[Mutation]:
    """Read the mutation list; refuse entries with missing or unknown keys, or repeated names."""
    with path.open("rb") as handle:
        entries = tomllib.load(handle).get("mutation", [])
    mutations, seen = [], set()
    required = {"name", "promise", "file", "original", "replacement", "tests"}
    for entry in entries:
        if missing := required - entry.keys():
            raise SystemExit(f"{path}: mutation {entry.get('name', '?')!r} lacks {', '.join(sorted(missing))}")
        if unknown := entry.keys() - required - {"databases"}:
            raise SystemExit(f"{path}: mutation {entry['name']!r} has unknown keys {', '.join(sorted(unknown))}")
        if entry["name"] in seen:
            raise SystemExit(f"{path}: mutation {entry['name']!r} appears twice")
        seen.add(entry["name"])
        databases = tuple(entry.get("databases", DATABASES))
        if not databases or set(databases) - set(DATABASES):
            raise SystemExit(f"{path}: mutation {entry['name']!r}: databases must be among {', '.join(DATABASES)}")
        tests = shlex.split(entry["tests"]) if isinstance(entry["tests"], str) else list(entry["tests"])
        mutations.append(Mutation(**{**entry, "databases": databases, "tests": tests}))
    return mutations


def database_url(database: str) -> str:
    if database == "sqlite":
        return f"sqlite:///{ROOT / 'db.sqlite3'}"
    url = os.environ.get("MUTATE_DATABASE_URL") or os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else "postgres://postgres@127.0.0.1:5432/weave"


def postgres_reachable() -> bool:
    url = database_url("postgres")
    done = subprocess.run([sys.executable, "scripts/pg_reachable.py", url], cwd=ROOT, check=False)
    return done.returncode == 0


def run_tests(mutation: Mutation, database: str) -> tuple[int, list[str]]:
    """Run the mutation's tests; return pytest's exit status and the tail of its output."""
    env = {**os.environ, "DATABASE_URL": database_url(database), "DEBUG": "true"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *mutation.tests]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()[-15:]


def _backup_path(relative: str) -> Path:
    return BACKUPS / quote(relative, safe="")  # one flat name per file, reversible


def repair_leftovers() -> list[str]:
    """Put back any file a killed earlier run left mutated (its original waits in `.mutate/`)."""
    repaired = []
    if BACKUPS.is_dir():
        for backup in sorted(BACKUPS.iterdir()):
            target = ROOT / unquote(backup.name)
            shutil.copyfile(backup, target)
            backup.unlink()
            repaired.append(str(target.relative_to(ROOT)))
        BACKUPS.rmdir()
    return repaired


class _Mutated:
    """Write the mutation on enter; restore the original bytes on exit, whatever happened."""

    def __init__(self, mutation: Mutation, original: bytes, mutated: bytes) -> None:
        self.path = ROOT / mutation.file
        self.backup = _backup_path(mutation.file)
        self.original = original
        self.mutated = mutated

    def __enter__(self) -> None:
        BACKUPS.mkdir(exist_ok=True)
        self.backup.write_bytes(self.original)
        self.path.write_bytes(self.mutated)

    def __exit__(self, *exc: object) -> None:
        self.path.write_bytes(self.original)
        self.backup.unlink(missing_ok=True)
        if BACKUPS.is_dir() and not any(BACKUPS.iterdir()):
            BACKUPS.rmdir()


def apply(mutation: Mutation, database: str, baseline_ok: dict[tuple[str, ...], bool]) -> Result:
    """Mutate, test and restore one mutation on one database."""
    started = time.monotonic()
    path = ROOT / mutation.file
    if not path.is_file():
        return Result(mutation, database, NOT_FOUND, f"{mutation.file} does not exist")
    original = path.read_bytes()
    text = original.decode("utf-8")
    found = text.count(mutation.original)
    if found == 0:
        return Result(mutation, database, NOT_FOUND, f"the original snippet is not in {mutation.file}")
    if found > 1:
        return Result(mutation, database, AMBIGUOUS, f"{found} copies in {mutation.file}: make the snippet longer")
    key = (database, *mutation.tests)
    if key not in baseline_ok:
        status, output = run_tests(mutation, database)
        baseline_ok[key] = status == 0
        if status != 0:
            return Result(mutation, database, BASELINE, f"pytest exit {status} without the mutation", output=output)
    elif not baseline_ok[key]:
        return Result(mutation, database, BASELINE, "the same tests failed without a mutation")
    mutated = text.replace(mutation.original, mutation.replacement).encode("utf-8")
    with _Mutated(mutation, original, mutated):
        status, output = run_tests(mutation, database)
    seconds = time.monotonic() - started
    if status == 1:
        return Result(mutation, database, KILLED, seconds=seconds, output=output)
    if status == 0:
        return Result(mutation, database, SURVIVED, "every test passed on the broken code", seconds, output)
    return Result(mutation, database, ERROR, f"pytest exit {status} (not a test failure)", seconds, output)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM becomes an exception, so the `finally` / `__exit__` that restores the file runs.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--only", action="append", default=[], help="run only this mutation (repeatable)")
    parser.add_argument("--database", choices=DATABASES, action="append", default=[], help="only this database")
    parser.add_argument("--file", type=Path, default=LIST, help="the mutation list (default: %(default)s)")
    parser.add_argument(
        "--changed", metavar="REV", help="only the mutations whose file or tests changed since git revision REV"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's output for every run")
    args = parser.parse_args(argv)

    mutations = load(args.file)
    if args.only:
        unknown = set(args.only) - {m.name for m in mutations}
        if unknown:
            parser.error(f"no such mutation: {', '.join(sorted(unknown))}")
        mutations = [m for m in mutations if m.name in args.only]
    if args.changed:
        files = changed_files(args.changed)
        if files is None:
            print(f"git does not know {args.changed} here (a shallow clone?): running every mutation")
        else:
            mutations = touched_by_change(mutations, files)
            print(f"{len(mutations)} mutation(s) of files changed since {args.changed}")
    if args.list:
        for m in mutations:
            print(f"{m.name}  [{', '.join(m.databases)}]  {m.file}\n    {m.promise}\n    pytest {shlex.join(m.tests)}")
        return 0

    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, _terminate)
    for repaired in repair_leftovers():
        print(f"repaired {repaired}: an earlier run was killed while it was mutated")
    wanted = tuple(args.database) or DATABASES
    pg_ok = "postgres" not in wanted or postgres_reachable()
    results: list[Result] = []
    baseline_ok: dict[tuple[str, ...], bool] = {}
    try:
        for mutation in mutations:
            for database in mutation.databases:
                if database not in wanted:
                    continue
                if database == "postgres" and not pg_ok:
                    result = Result(mutation, database, NO_POSTGRES, f"{database_url('postgres')} is not reachable")
                else:
                    result = apply(mutation, database, baseline_ok)
                results.append(result)
                print(f"{result.outcome:>28}  {mutation.name} on {database}  {result.detail}".rstrip(), flush=True)
                if args.verbose or result.outcome not in (KILLED, NOT_FOUND, AMBIGUOUS, NO_POSTGRES):
                    for line in result.output:
                        print(f"{'':>30}| {line}")
    except KeyboardInterrupt:
        print("\ninterrupted: the file being mutated was restored", file=sys.stderr)
        return 130
    return report(results)


def changed_files(rev: str) -> set[str] | None:
    """The project files (relative paths) that differ between git revision `rev` and the working tree.

    None when git does not know `rev` here (a shallow clone): the caller then runs every mutation
    rather than none."""
    known = subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True, check=False)
    if known.returncode != 0:
        return None
    done = subprocess.run(
        ["git", "diff", "--name-only", rev, "--"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"git diff {rev} failed: {done.stderr.strip()}")
    return {line.strip() for line in done.stdout.splitlines() if line.strip()}


def touched_by_change(mutations: list[Mutation], files: set[str]) -> list[Mutation]:
    """The mutations whose mutated file, or a test file they run, is among `files`."""
    return [m for m in mutations if m.file in files or any(_test_file(arg) in files for arg in m.tests)]


def _test_file(arg: str) -> str:
    """The file part of a pytest argument (`tests/x.py::test_y` -> `tests/x.py`)."""
    return arg.split("::", 1)[0]


def report(results: list[Result]) -> int:
    failed = [r for r in results if r.outcome != KILLED]
    killed = len(results) - len(failed)
    print(f"\n{killed} of {len(results)} mutation runs killed.")
    for outcome in (SURVIVED, NOT_FOUND, AMBIGUOUS, BASELINE, ERROR, NO_POSTGRES):
        names = [f"{r.mutation.name} ({r.database})" for r in failed if r.outcome == outcome]
        if names:
            print(f"{outcome}: {', '.join(names)}")
    if any(r.outcome in (NOT_FOUND, AMBIGUOUS) for r in failed):
        print("A snippet that is not found means the code changed: update tools/mutations.toml, not the tests.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
