"""A supplier's numbers are checked for real (stdnum, schwifty, ISO 3166) before any run exists."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st
from stdnum.de import vat as de_vat

from demo.management.commands.weave_demo_data import SUPPLIERS as DEMO_SUPPLIERS
from onboarding.models import OnboardingRun, Supplier
from onboarding.services import onboarding_start
from onboarding.testing.numbers import german_iban, german_vat_number
from onboarding.validation import clean_supplier_fields, tax_id_checked
from tests.factories import SupplierFactory

GOOD = {"country": "DE", "tax_id": german_vat_number(7), "iban": german_iban(7), "bic": "COBADEFFXXX"}


def one_digit_off(number: str) -> str:
    return number[:-1] + str((int(number[-1]) + 1) % 10)


def test_validation__well_formed_numbers_pass_and_come_back_normalized():
    cleaned = clean_supplier_fields(
        country=" de ", tax_id="de 100 000 073", iban=" ".join(GOOD["iban"][i : i + 4] for i in range(0, 22, 4))
    )
    assert cleaned == {"country": "DE", "tax_id": "DE100000073", "iban": GOOD["iban"]}


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"country": "XX"}, "country", "ISO 3166"),
        ({"country": "Germany"}, "country", "ISO 3166"),
        ({"tax_id": one_digit_off(GOOD["tax_id"])}, "tax_id", "checksum"),
        ({"tax_id": "DE12345"}, "tax_id", "length"),
        ({"tax_id": "FR40303265045"}, "tax_id", "starts with FR"),
        ({"tax_id": ""}, "tax_id", "required"),
        ({"country": "US", "tax_id": "12-3456789x"}, "tax_id", "not a valid"),
        ({"iban": "DE00SHORT"}, "iban", "length"),
        ({"iban": one_digit_off(GOOD["iban"])}, "iban", "checksum"),
        ({"bic": "COBAXXFF"}, "bic", "country code"),
    ],
)
def test_validation__a_malformed_field_is_named_with_the_reason(changes, field, says):
    with pytest.raises(ValidationError) as refused:
        clean_supplier_fields(**{**GOOD, **changes})
    assert list(refused.value.message_dict) == [field]
    assert says.lower() in refused.value.message_dict[field][0].lower()


def test_validation__every_bad_field_is_reported_at_once():
    with pytest.raises(ValidationError) as refused:
        clean_supplier_fields(country="DE", tax_id="DE1", iban="DE00SHORT", bic="1")
    assert set(refused.value.message_dict) == {"tax_id", "iban", "bic"}


def test_validation__countries_stdnum_does_not_know_get_a_format_check_only():
    assert not tax_id_checked("BD") and tax_id_checked("DE") and tax_id_checked("US")
    assert clean_supplier_fields(country="BD", tax_id="0012-3456 789")["tax_id"] == "00123456789"
    with pytest.raises(ValidationError, match="4-20 letters"):
        clean_supplier_fields(country="BD", tax_id="P0")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789", min_size=9, max_size=9))
def test_validation__german_vat_numbers_pass_exactly_when_stdnum_says_the_checksum_holds(digits):
    number = f"DE{digits}"
    try:
        clean_supplier_fields(country="DE", tax_id=number)
    except ValidationError:
        accepted = False
    else:
        accepted = True
    assert accepted == de_vat.is_valid(number)


def _iso13616_numeric(text: str) -> int:
    return int("".join(str(int(c, 36)) for c in text))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789", min_size=10, max_size=10), st.integers(min_value=0, max_value=99))
def test_validation__an_iban_passes_exactly_when_its_check_digits_are_right(account, check):
    # Check digits computed here independently (ISO 13616: 98 - (BBAN + "DE00") mod 97).
    bban = f"37040044{account}"
    right = 98 - _iso13616_numeric(f"{bban}DE00") % 97
    try:
        clean_supplier_fields(country="DE", tax_id=GOOD["tax_id"], iban=f"DE{check:02d}{bban}", fields=["iban"])
    except ValidationError as exc:
        assert list(exc.message_dict) == ["iban"]
        accepted = False
    else:
        accepted = True
    assert accepted == (check == right)


@pytest.mark.django_db
def test_start__a_malformed_supplier_is_refused_before_a_run_exists(django_capture_on_commit_callbacks):
    supplier = SupplierFactory(iban="DE00SHORT", tax_id=one_digit_off(german_vat_number(3)))
    with django_capture_on_commit_callbacks(execute=False) as callbacks, pytest.raises(ValidationError) as refused:
        onboarding_start(supplier=supplier, started_by=None)
    assert set(refused.value.message_dict) == {"tax_id", "iban"}
    assert not OnboardingRun.objects.exists() and callbacks == []


@pytest.fixture
def editor(client, db):
    user = get_user_model().objects.create_user(username="editor", password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["add_supplier", "change_supplier", "view_supplier"])
    )
    client.force_login(user)
    return client


def form_data(**changes):
    return {
        "legal_name": "Form Test GmbH",
        "contact_email": "buyer@form.example",
        "device_token": "",
        **GOOD,
        **changes,
    }


def test_admin_form__a_bad_iban_is_refused_naming_the_field_and_nothing_is_stored(editor):
    response = editor.post(reverse("admin:weave_onboarding_supplier_add"), form_data(iban="DE00SHORT"))
    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["iban"] and "Invalid IBAN length" in errors["iban"][0]
    assert not Supplier.objects.exists()


def test_admin_form__a_good_supplier_is_stored_normalized(editor):
    response = editor.post(
        reverse("admin:weave_onboarding_supplier_add"), form_data(country="de", tax_id=GOOD["tax_id"].lower())
    )
    assert response.status_code == 302
    stored = Supplier.objects.get()
    assert (stored.country, stored.tax_id, stored.iban) == ("DE", GOOD["tax_id"], GOOD["iban"])


@pytest.mark.parametrize("row", DEMO_SUPPLIERS, ids=[row[0] for row in DEMO_SUPPLIERS])
def test_demo_data__every_demo_supplier_passes_validation(row):
    _, country, tax_id, iban = row
    assert clean_supplier_fields(country=country, tax_id=tax_id, iban=iban)["tax_id"] == tax_id
