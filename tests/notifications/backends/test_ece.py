"""notifications.backends.ece: the same bytes as http_ece for the same ephemeral key and salt, every payload size."""

import os

import http_ece
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from notifications.backends import ece


def _subscription():
    key = ec.generate_private_key(ec.SECP256R1())
    return key, key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint), os.urandom(16)


# One byte, a usual payload, the last size one record holds, and past it (http_ece's own path: two records).
@pytest.mark.parametrize("size", [1, 17, 120, 4078, 4079, 4080, 5000, 0])
def test_encrypt__is_http_eces_aes128gcm_to_the_byte(size):
    for _ in range(3):
        receiver, p256dh, auth = _subscription()
        ephemeral, salt, plaintext = ec.generate_private_key(ec.SECP256R1()), os.urandom(16), os.urandom(size)
        ours = ece.encrypt(plaintext, salt=salt, private_key=ephemeral, dh=p256dh, auth=auth)
        theirs = http_ece.encrypt(plaintext, salt=salt, private_key=ephemeral, dh=p256dh, auth_secret=auth)
        assert ours == bytes(theirs)
        if size:
            assert http_ece.decrypt(ours, private_key=receiver, auth_secret=auth) == plaintext


def test_encrypt__an_auth_secret_of_another_length_and_a_bad_key_as_http_ece_takes_them():
    _, p256dh, _ = _subscription()
    ephemeral, salt = ec.generate_private_key(ec.SECP256R1()), os.urandom(16)
    for auth in (b"", os.urandom(7), os.urandom(64)):
        theirs = http_ece.encrypt(b"hello", salt=salt, private_key=ephemeral, dh=p256dh, auth_secret=auth)
        assert ece.encrypt(b"hello", salt=salt, private_key=ephemeral, dh=p256dh, auth=auth) == bytes(theirs)
    with pytest.raises(ValueError):
        ece.encrypt(b"hello", salt=salt, private_key=ephemeral, dh=b"\x04" + b"\x00" * 64, auth=os.urandom(16))
