"""AWS failures as one line for people: the service's own code and message, or the connection problem."""

from __future__ import annotations

from urllib.parse import urlsplit


def aws_error_text(exc: BaseException, service: str | None = None) -> str:
    """One line naming what went wrong: the AWS error code and message, or the connection problem.

    When the answer held no AWS error (a proxy, a load balancer or a stand-in that is down answering with
    its own page), botocore makes the code the HTTP status and the message its reason phrase, e.g.
    ``501: Not Implemented``; that is said as what it is, an HTTP status from something that is not the service.
    A connection that fails names ``service`` (or "the AWS endpoint") and where it was sought, not botocore's URL.
    """
    # Imported here, not at the top: services that only name a failure import this module, and a command that
    # never reaches AWS must not pay for botocore (an exception from botocore means it is loaded already).
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    # botocore's connection failures, each as what a person would say about it.
    connection = (
        (ConnectionClosedError, "the connection was closed before an answer"),
        (EndpointConnectionError, "could not connect"),
        (ConnectTimeoutError, "no connection within the timeout"),
        (ReadTimeoutError, "no answer within the timeout"),
    )
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        op = getattr(exc, "operation_name", "call")
        code = str(err.get("Code") or "error")
        message = str(err.get("Message") or "").strip()[:160]
        if code.isdigit():
            phrase = f" {message}" if message and message != code else ""
            return (f"{op} failed: the endpoint answered HTTP {code}{phrase} without an AWS error; "
                    "the service is down or the endpoint (AWS_ENDPOINT_URL) is not it")
        return f"{op} failed: {code}: {message}".rstrip(": ")
    for kind, words in connection:
        if isinstance(exc, kind):
            url = urlsplit(str(getattr(exc, "kwargs", {}).get("endpoint_url") or ""))
            where = f" at {url.scheme}://{url.netloc}" if url.netloc else ""
            return f"cannot reach {service or 'the AWS endpoint'}{where} ({words})"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
