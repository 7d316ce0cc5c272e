"""TLS client contexts, made once per process for each trust setting and use.

Making a context loads and parses the whole trust store (certifi's bundle, or SSL_CERT_FILE /
SSL_CERT_DIR). A drain builds its backends afresh: if each HTTP client made its own context at its
first connection (Web Push's fallback pool two more at its construction), every new drain would
pay that again before its first push. A context holds no connection state, and CPython
changes and reads one only while holding the interpreter lock, so drains on other threads may share it.

`use` keeps apart contexts that their users configure differently: httpcore sets its ALPN list on
the context it is given at each connection (both of its users here, Web Push's guarded fallback and
httpx's HTTP/2 client, ask for HTTP/1.1 and h2), the lean HTTP/2 client offers `h2` alone, and the
lean HTTP/1.1 client offers none.
"""

import os
import ssl
import threading

import httpx

_contexts: dict[tuple[object, ...], ssl.SSLContext] = {}
_lock = threading.Lock()


def client_context(verify: ssl.SSLContext | bool | str, *, use: str) -> ssl.SSLContext:
    """A context for `verify` as httpx reads it (True: the default trust store, False: no verification);
    a context the caller made itself (a local CA, say) is returned as it is, its own to configure."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    # The trust store httpx reads for True depends on these; a changed one gets a context of its own.
    key = (verify, use, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _lock:
        context = _contexts.get(key)
        if context is None:
            context = httpx.create_ssl_context(verify=verify)
            if use == "h2":
                context.set_alpn_protocols(["h2"])
            _contexts[key] = context
        return context
