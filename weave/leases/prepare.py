"""A field's `get_db_prep_save`, made once per field for the values the lease core's group statements carry.

A group statement's arrays hold every row's value of each column, and each value would go through the
field's `get_db_prep_save`: four to six method calls (the Promise check, `to_python`, `int()`, the
backend's adapter) for every integer or datetime, several times a push in a drain's completer.
`preparer(field, connection)` returns a function doing only what those calls do to the common
values, and hands every other value to `get_db_prep_save` itself:

- a `str` on a `CharField` or `TextField` comes back as it is (`to_python` keeps any str, and a
  choices enum is a str);
- an `int` (never a bool) on an integer field goes to the backend's `adapt_integerfield_value`, which
  on psycopg 3 wraps it in the type naming its SQL size (Int2/Int4/Int8); on an auto field to
  `validate_autopk_value`, as AutoFieldMixin does;
- an aware `datetime` on a `DateTimeField` goes to `adapt_datetimefield_value` (a naive one takes
  Django's path, warning and making it aware);
- a `bool` on a `BooleanField`, a `float` on a `FloatField`, and `None` on any of these, as they are;
- a foreign key: `None` stays None, an `int` takes its target field's path.

Only fields of exactly these Django classes are served (a subclass may convert differently) and only
values of exactly these types; tests/leases/test_prepare.py compares the result with
`get_db_prep_save` for every field the group statements write.
"""

import datetime
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

Preparer = Callable[[Any], Any]

_TEXT = (models.CharField, models.TextField)
_INTEGERS = (
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField,
)
_AUTO = (models.AutoField, models.BigAutoField, models.SmallAutoField)


def preparer(field: Any, connection: BaseDatabaseWrapper) -> Preparer:
    """`value -> field.get_db_prep_save(value, connection)`, cheaper for the common values (see the module)."""
    kind = type(field)
    if kind is models.ForeignKey:
        return _foreign_key(field, connection)
    slow = field.get_db_prep_save
    if kind in _TEXT:
        return lambda value: value if value is None or isinstance(value, str) else slow(value, connection)
    if kind in _INTEGERS:
        adapt, internal = connection.ops.adapt_integerfield_value, field.get_internal_type()
        return lambda value: (
            adapt(value, internal) if type(value) is int else None if value is None else slow(value, connection)
        )
    if kind in _AUTO:
        validate = connection.ops.validate_autopk_value
        return lambda value: (
            validate(value) if type(value) is int else None if value is None else slow(value, connection)
        )
    if kind is models.DateTimeField:
        return _datetime(slow, connection)
    if kind is models.BooleanField:
        return _exactly(bool, slow, connection)
    if kind is models.FloatField:
        return _exactly(float, slow, connection)
    return lambda value: slow(value, connection)


def _exactly(python: type, slow: Any, connection: BaseDatabaseWrapper) -> Preparer:
    # BooleanField.to_python and FloatField.get_prep_value return a bool / a float as it is.
    return lambda value: value if value is None or type(value) is python else slow(value, connection)


def _datetime(slow: Any, connection: BaseDatabaseWrapper) -> Preparer:
    adapt, aware_only = connection.ops.adapt_datetimefield_value, settings.USE_TZ

    def prepare(value: Any) -> Any:
        # DateTimeField.to_python returns a datetime as it is; only a naive one under USE_TZ is changed.
        if type(value) is datetime.datetime and (not aware_only or value.utcoffset() is not None):
            return adapt(value)
        return None if value is None else slow(value, connection)

    return prepare


def _foreign_key(field: Any, connection: BaseDatabaseWrapper) -> Preparer:
    # ForeignKey.get_db_prep_save: None (and "" where the target refuses empty strings) is NULL, else
    # the target field's get_db_prep_save.
    slow, target = field.get_db_prep_save, preparer(field.target_field, connection)
    return lambda value: target(value) if type(value) is int else None if value is None else slow(value, connection)
