"""The README's and getting-started's set-up, pasted as written into a fresh `django-admin startproject`.

The code blocks are read from the documents themselves (each follows a `<!-- weave-quickstart: KIND -->`
marker), never re-typed here: the settings blocks are appended to the new project's settings.py, the
URL block to its urls.py, the shell lines are run (`qcluster` in the background), the send block runs in
`manage.py shell`, and the notification reaches a fake provider that the wheel's own `weave_fake_push`
command serves. The project runs on the SQLite database startproject gives it, from the wheel only.
"""

import ast
import json
import os
import re
import shlex
import subprocess
import venv
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port
from tests.hostsite.conftest import closure, environment_view, run, wheel_requirements
from tools.processes import PROJECT_ROOT, ProcessGroups, wait_until

pytestmark = pytest.mark.e2e

DOCUMENTS = ("README.md", "docs/getting-started.md")
KINDS = ("settings", "urls", "commands", "send", "explain")
# What the quickstart's own install line asks for.
QUICKSTART_EXTRAS = frozenset({"onboarding", "metrics"})
BLOCK = re.compile(r"<!-- weave-quickstart: (\w+) -->\n```(\w+)\n(.*?)\n```", re.S)


def blocks(document: str) -> dict[str, list[str]]:
    """The marked code blocks of a document, by kind, in document order."""
    found: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for kind, _language, code in BLOCK.findall((PROJECT_ROOT / document).read_text()):
        assert kind in found, f"{document}: unknown quickstart block kind {kind!r}"
        found[kind].append(code)
    return found


@pytest.mark.parametrize("document", DOCUMENTS)
def test_each_document_marks_every_step(document):
    text = (PROJECT_ROOT / document).read_text()
    assert text.count("<!-- weave-quickstart:") == sum(map(len, blocks(document).values())), "a marker lost its block"
    assert all(blocks(document)[kind] for kind in KINDS), blocks(document)


def q_clusters() -> list[tuple[str, dict]]:
    """Every whole `Q_CLUSTER = {...}` literal in the README and the docs."""
    found = []
    for path in [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]:
        for code in re.findall(r"```python\n(.*?)\n```", path.read_text(), re.S):
            for node in ast.walk(ast.parse(code)) if _parses(code) else ():
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "Q_CLUSTER":
                    found.append((path.name, ast.literal_eval(node.value)))
    return found


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def test_one_q_cluster_is_shown_everywhere():
    shown = q_clusters()
    assert {name for name, _ in shown} >= {"README.md", "getting-started.md", "operations.md"}
    assert all(conf == shown[0][1] for _, conf in shown), shown


@pytest.fixture(scope="module")
def quickstart_python(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel and only what `weave-jobs[onboarding,metrics]` needs."""
    env_dir = tmp_path_factory.mktemp("quickstart-venv")
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    needed = closure(wheel_requirements(wheel), QUICKSTART_EXTRAS)
    view = environment_view(tmp_path_factory.mktemp("quickstart-deps"), needed)
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    Path(purelib, "quickstart_deps.pth").write_text(f"{view}\n")
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", wheel])
    return python


def shell_lines(code: str) -> list[list[str]]:
    return [words for line in code.splitlines() if (words := shlex.split(line, comments=True))]


def start_fakes(procs: ProcessGroups, python: str, project: Path, env: dict[str, str]) -> dict[str, str]:
    """The wheel's fake webhook provider and supplier services, started with the new project's manage.py."""
    fakes = project / "fakes"
    webhook = ["--serve", "webhook", "--port", "0", "--dir", str(fakes)]
    push = procs.start("push", [python, "manage.py", "weave_fake_push", *webhook], env=env, cwd=project)
    supplier_port = free_port()
    suppliers = [python, "manage.py", "weave_fake_suppliers", "--port", str(supplier_port)]
    procs.start("suppliers", suppliers, env=env, cwd=project)
    wait_until(lambda: (fakes / "weave_settings.json").exists() or not push.alive(), timeout=60, message="fake")
    assert push.alive(), push.log_tail()
    site = json.loads((fakes / "weave_settings.json").read_text())
    return {**site, "SUPPLIER_API_URL": f"http://127.0.0.1:{supplier_port}"}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_documented_setup_runs_in_a_fresh_startproject(document, quickstart_python, tmp_path):
    steps = blocks(document)
    run([quickstart_python, "-m", "django", "startproject", "mysite", tmp_path], cwd=tmp_path)
    settings_py, urls_py = tmp_path / "mysite" / "settings.py", tmp_path / "mysite" / "urls.py"
    settings_py.write_text(settings_py.read_text() + "\n" + "\n\n".join(steps["settings"]) + "\n")
    urls_py.write_text(urls_py.read_text() + "\n" + "\n\n".join(steps["urls"]) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env = {k: v for k, v in env.items() if not k.startswith(("WEAVE_", "PUSH_", "SUPPLIER_"))}
    # ProcessGroups lays its env over this process's own: name the new project's settings explicitly.
    env.update(DJANGO_SETTINGS_MODULE="mysite.settings", PYTHONPATH="")

    def manage(*args: str, extra: dict[str, str] | None = None) -> str:
        return run([quickstart_python, "manage.py", *args], cwd=tmp_path, env={**env, **(extra or {})})

    # As pasted, with nothing in the environment: every command loads, and check only warns (no token).
    bare = subprocess.run(
        [quickstart_python, "manage.py", "check"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert bare.returncode == 0, bare.stderr
    assert "notifications.W006" in bare.stderr and "ERRORS" not in bare.stderr, bare.stderr

    with ProcessGroups(tmp_path / "logs") as procs:
        python = str(quickstart_python)
        site = start_fakes(procs, python, tmp_path, env)
        env.update(PUSH_URL=site["PUSH_URL"], PUSH_TOKEN=site["PUSH_TOKEN"], SUPPLIER_API_URL=site["SUPPLIER_API_URL"])

        # Pointed at the fakes, the set-up passes Weave's checks with no warning at all.
        manage("check", "--fail-level", "WARNING")
        cluster = None
        for words in shell_lines(steps["commands"][0]):
            assert words[:2] == ["python", "manage.py"], words
            if words[2] == "qcluster":
                cluster = procs.start("qcluster", [python, *words[1:]], env=env, cwd=tmp_path)
            else:
                manage(*words[2:])
        assert cluster is not None, "the documented commands start no qcluster"
        manage("shell", "-c", steps["send"][0])

        def delivered() -> bool:
            return httpx.get(site["PUSH_URL"].removesuffix("/push") + "/_stats", timeout=5).json()["unique_deliveries"]

        try:
            wait_until(delivered, timeout=90, message="the quickstart's notification to reach the fake provider")
        except TimeoutError:
            pytest.fail(f"qcluster log:\n{cluster.log_tail(60)}")
        (explain,) = shell_lines(steps["explain"][0])
        story = manage(*explain[2:])
    assert "delivered" in story, story
    assert str(quickstart_python.parent.parent) in manage("shell", "-c", "import weave; print(weave.__file__)")


FILE_BLOCK = re.compile(r"```python\n# (\w+/\w+\.py)\n(.*?)\n```", re.S)


def file_blocks(document: str, app: str) -> dict[str, str]:
    """The blocks of `document` that open with a `# <app>/<module>.py` line: the files of that app, as shown."""
    found = {path: code for path, code in FILE_BLOCK.findall((PROJECT_ROOT / document).read_text())}
    return {path: code for path, code in found.items() if path.startswith(f"{app}/")}


def test_the_smallest_job_type_runs_as_pasted_in_a_fresh_startproject(quickstart_python, tmp_path):
    """docs/jobs.md's first job type, its files pasted as shown into a new project built from the wheel,
    is found at start, run once by a real qcluster, and told by weave_explain."""
    files = file_blocks("docs/jobs.md", "invoices")
    assert set(files) == {"invoices/models.py", "invoices/jobs.py"}, files
    run([quickstart_python, "-m", "django", "startproject", "mysite", tmp_path], cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    env = {k: v for k, v in env.items() if not k.startswith(("WEAVE_", "PUSH_", "SUPPLIER_"))}
    env.update(DJANGO_SETTINGS_MODULE="mysite.settings", PYTHONPATH="")

    def manage(*args: str) -> str:
        return run([quickstart_python, "manage.py", *args], cwd=tmp_path, env=env)

    def shell_value(code: str) -> str:
        """What `code` prints last in `manage.py shell` (the shell may print its automatic imports first)."""
        return manage("shell", "-c", code).strip().splitlines()[-1]

    manage("startapp", "invoices")
    for path, code in files.items():
        (tmp_path / path).write_text(code + "\n")
    settings_py = tmp_path / "mysite" / "settings.py"
    # The README's settings block, then what the page asks for: the app, and mail shown in the worker's output.
    settings = "\n\n".join(blocks("README.md")["settings"])
    settings += '\nINSTALLED_APPS += ["invoices"]\nEMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"\n'
    settings_py.write_text(settings_py.read_text() + "\n" + settings)
    manage("makemigrations", "invoices")
    manage("migrate")

    with ProcessGroups(tmp_path / "logs") as procs:
        cluster = procs.start("qcluster", [str(quickstart_python), "manage.py", "qcluster"], env=env, cwd=tmp_path)
        created = (
            "from invoices.models import Invoice; print(Invoice.objects.create(number='A-1', email='a@example.com').pk)"
        )
        pk = shell_value(created)

        def state() -> str:
            return shell_value(f"from invoices.models import Invoice; print(Invoice.objects.get(pk={pk}).state)")

        try:
            wait_until(lambda: state() == "done", timeout=90, message="the invoice job to finish")
        except TimeoutError:
            pytest.fail(f"qcluster log:\n{cluster.log_tail(60)}")
        wait_until(
            lambda: "Invoice A-1" in cluster.log_tail(200), timeout=10, message="the mail in the worker's output"
        )
        story = manage("weave_explain", "invoice", pk)
    assert f"invoice {pk}: done" in story and "fence 1 claimed by" in story, story
    assert shell_value(f"from invoices.models import Invoice; print(Invoice.objects.get(pk={pk}).fence)") == "1"
