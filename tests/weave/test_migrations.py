"""Every model change ships with its migration: a site that installs Weave gets no pending changes of ours."""

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_is_missing_its_migration():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as missing:  # --check exits 1 when a migration would be made
        pytest.fail(f"a model change has no migration (exit {missing.code}):\n{out.getvalue()}")
