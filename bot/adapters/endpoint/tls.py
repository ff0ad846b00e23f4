"""One TLS context per process for every HTTP client that talks to model endpoints.

httpx builds a fresh ``SSLContext`` for each client, loading the whole CA bundle each
time (tens of milliseconds of CPU); the probe, the gates and the metrics reader make a
client per call, so they share this one, built once with httpx's own defaults
(``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured, else certifi). An ``SSLContext`` is safe to
share between threads and connections.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
