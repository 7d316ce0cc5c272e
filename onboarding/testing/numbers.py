"""Well-formed supplier numbers for tests and demo data: their checksums hold, so validation lets them through.

Made, not made up: a German VAT number is 8 digits plus an ISO 7064 Mod 11,10 check digit, and an
IBAN gets its check digits from schwifty. Whether a service *accepts* one is the fake's business.
"""

from schwifty import IBAN
from stdnum.iso7064 import mod_11_10

_BANK_CODE = "37040044"  # a real German bank code, so the IBAN's national structure holds too


def german_vat_number(n: int) -> str:
    """The n-th well-formed German VAT number (`DE` + 9 digits), n >= 0."""
    body = f"{10_000_000 + n % 90_000_000:08d}"
    return f"DE{body}{mod_11_10.calc_check_digit(body)}"


def german_iban(n: int) -> str:
    """The n-th well-formed German IBAN (bank 37040044), n >= 0."""
    return str(IBAN.generate("DE", bank_code=_BANK_CODE, account_code=f"{n % 10**10:010d}").compact)
