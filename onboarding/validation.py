"""Check a supplier's country, tax id, IBAN and BIC before anything happens to it.

Real checks, not lengths: ISO 3166-1 country codes (pycountry), tax ids per country with
python-stdnum (VAT number checksums for the EU, the UK, Switzerland, Norway and the others stdnum
knows; the EIN for the US), IBAN (checksum, length and national structure) and BIC with schwifty.
`onboarding_start`, "Retry failed run" and the admin's supplier form all call `validate_supplier`,
so a malformed number is refused before a run exists; the outside services then only confirm.

A country stdnum has no tax-id module for gets a format check only (4-20 letters and digits), and
the tax-id service is the judge; `tax_id_checked()` says which.

The three libraries come with the [onboarding] extra and are imported where they are used, so the
app still imports without them and `onboarding.E004` can name the missing extra.
"""

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

if TYPE_CHECKING:
    from stdnum.util import NumberValidationModule  # a typing-only name (None at run time)

    from onboarding.models import Supplier

FIELDS = ("country", "tax_id", "iban", "bic")
# Tax ids stdnum files under another name than "vat" for some countries.
_TAX_MODULE_NAMES = {"US": "ein"}
# Greece's VAT numbers carry "EL", not its ISO code.
_VAT_PREFIX = {"GR": "EL"}
_SEPARATORS = re.compile(r"[\s.\-/]")
_FALLBACK_FORMAT = re.compile(r"^[A-Z0-9]{4,20}$")


def normalize(value: str) -> str:
    """Upper-case a number and drop the spaces, dots, dashes and slashes people type into it."""
    return _SEPARATORS.sub("", value or "").upper()


def clean_country(value: str) -> str:
    """Return the ISO 3166-1 alpha-2 code `value` names, or raise naming the field."""
    import pycountry

    code = (value or "").strip().upper()
    if len(code) != 2 or pycountry.countries.get(alpha_2=code) is None:
        raise ValidationError({"country": f"{value!r} is not an ISO 3166-1 alpha-2 country code (e.g. DE, FR, US)."})
    return code


def tax_module(country: str) -> "NumberValidationModule | None":
    """The python-stdnum module that checks `country`'s tax ids, or None if stdnum has none."""
    from stdnum import get_cc_module

    name = _TAX_MODULE_NAMES.get(country, "vat")
    return get_cc_module(country.lower(), name)


def tax_id_checked(country: str) -> bool:
    """Whether tax ids of `country` get a checksum check here (not only a format check)."""
    return tax_module(country) is not None


def clean_tax_id(country: str, value: str) -> str:
    """Return `value` normalized if it is a well-formed tax id of `country` (an ISO code already checked)."""
    from stdnum.exceptions import ValidationError as StdnumError

    number = normalize(value)
    if not number:
        raise ValidationError({"tax_id": "A tax id is required."})
    module = tax_module(country)
    if module is None:
        if not _FALLBACK_FORMAT.match(number):
            raise ValidationError({"tax_id": f"Tax id {value!r} is not 4-20 letters and digits."})
        return number
    prefix = _VAT_PREFIX.get(country, country)
    # VAT modules drop their own country prefix; the others (the US EIN) are given the bare number.
    name = str(getattr(module, "__name__", ""))
    bare = number[2:] if number[:2] in (prefix, country) and not name.endswith(".vat") else number
    try:
        module.validate(bare)
    except StdnumError as exc:
        kind = (module.__doc__ or name).strip().splitlines()[0].rstrip(".")
        why = str(exc)
        if re.match(r"^[A-Z]{2}[0-9]", number) and number[:2] not in (prefix, country):
            why = f"it starts with {number[:2]}, but the supplier's country is {country}"
        raise ValidationError({"tax_id": f"Tax id {value!r} is not a valid {kind}: {why}"}) from exc
    return number


def clean_iban(value: str) -> str:
    """Return the IBAN in compact form if its length, structure and check digits hold."""
    from schwifty import IBAN
    from schwifty.exceptions import SchwiftyException

    try:
        return str(IBAN(value).compact)
    except SchwiftyException as exc:
        raise ValidationError({"iban": f"IBAN {value!r} is not valid: {exc}."}) from exc


def clean_bic(value: str) -> str:
    """Return the BIC in compact form if its structure and country code hold."""
    from schwifty import BIC
    from schwifty.exceptions import SchwiftyException

    try:
        bic = BIC(value)
    except SchwiftyException as exc:
        raise ValidationError({"bic": f"BIC {value!r} is not valid: {exc}."}) from exc
    return str(bic.compact)


def clean_supplier_fields(
    *, country: str, tax_id: str, iban: str = "", bic: str = "", fields: Iterable[str] = FIELDS
) -> dict[str, str]:
    """Check `fields` of one supplier; return them normalized or raise one `ValidationError` naming every bad field."""
    wanted = set(fields)
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, str] = {}

    def run(name: str, check: Callable[[], str]) -> None:
        try:
            cleaned[name] = check()
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors.setdefault(field, []).extend(messages)

    if wanted & {"country", "tax_id"}:
        run("country", lambda: clean_country(country))
    if "tax_id" in wanted and "country" in cleaned:
        run("tax_id", lambda: clean_tax_id(cleaned["country"], tax_id))
    if "iban" in wanted and iban:
        run("iban", lambda: clean_iban(iban))
    if "bic" in wanted and bic:
        run("bic", lambda: clean_bic(bic))
    if errors:
        raise ValidationError(errors)
    return {name: value for name, value in cleaned.items() if name in wanted}


def validate_supplier(supplier: "Supplier", *, fields: Iterable[str] = FIELDS) -> None:
    """Raise `ValidationError` (by field) if the supplier's stored numbers are malformed."""
    clean_supplier_fields(
        country=supplier.country, tax_id=supplier.tax_id, iban=supplier.iban, bic=supplier.bic, fields=fields
    )
