"""boto3 client factory for the artifact adapters: region, optional stand-in endpoint, bounded timeouts.

``endpoint_url`` points a client at a local stand-in (moto's server in tests and
the sandbox); when it is ``None`` boto3 still honours ``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_S3`` from the environment, so the CLI can be aimed at a
stand-in without a kimi-ops setting. ``single_attempt`` turns retries off so a
check against an unreachable endpoint turns into an ``error`` quickly instead of
backing off for a minute.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.loaders import Loader, create_loader

DEFAULT_REGION = "us-east-1"


def default_region(fallback: str | None = None) -> str:
    """The region from the usual AWS environment variables, else ``fallback``, else us-east-1."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or fallback or DEFAULT_REGION


@functools.cache
def _models() -> Loader:
    # Every boto3 Session loads AWS's service models and endpoint data from JSON again (about 150 ms of CPU per
    # client); one loader per process keeps them, while each session still resolves its own credentials.
    return create_loader()


def new_session(**kwargs: Any) -> boto3.Session:
    """A boto3 Session (``kwargs`` as boto3's: region, credentials, profile) sharing this process's loaded models."""
    core = botocore.session.Session()
    core.register_component("data_loader", _models())
    return boto3.Session(botocore_session=core, **kwargs)


def client_config(*, single_attempt: bool = False, connect_timeout: float = 5, read_timeout: float = 60) -> Config:
    """Short connect timeout (an endpoint that does not answer is an error, not a hang)."""
    retries: dict[str, Any] = {"total_max_attempts": 1} if single_attempt else {"mode": "standard", "total_max_attempts": 4}
    return Config(retries=retries, connect_timeout=connect_timeout, read_timeout=read_timeout)


def make_client(
    service: str,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    single_attempt: bool = False,
    connect_timeout: float = 5,
    read_timeout: float = 60,
    session: boto3.Session | None = None,
) -> Any:
    """A boto3 client for ``service`` (credentials from the standard chain of ``session``)."""
    session = session or new_session()
    return session.client(
        service,
        region_name=region or default_region(),
        endpoint_url=endpoint_url,
        config=client_config(single_attempt=single_attempt, connect_timeout=connect_timeout, read_timeout=read_timeout),
    )
