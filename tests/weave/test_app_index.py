"""The index page of each Weave app in the admin carries the console's stylesheet.

Django's own admin CSS leaves the breadcrumb links without an underline, told from the text around them
by colour alone (axe-core: link-in-text-block, serious); the console's stylesheet underlines them."""

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("label", ["weave", "weave_notifications", "weave_onboarding"])
def test_app_index__a_weave_app_page_underlines_its_breadcrumb_links(client, label):
    client.force_login(User.objects.create_superuser("apps", "apps@example.com", "pw"))
    page = client.get(f"/admin/{label}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/static/weave/console.css"' in html, "the stylesheet that underlines the breadcrumb links"
    assert 'class="breadcrumbs"' in html  # a <div> before Django 6.1, an <ol> from it
