"""The only place the AWS backends (``aws_batch``, ``aws_sagemaker``) create boto3 clients.

``boto3`` (the ``aws`` extra) is imported on first use. Clients use botocore's **adaptive**
retry mode (throttling and transient errors are retried with backoff and client-side rate
limiting), credentials come only from boto3's standard chain, and a missing region or
missing credentials become one :class:`AwsClientError` naming the variables and files boto3
reads. ``$AWS_ENDPOINT_URL`` (or ``$AWS_ENDPOINT_URL_<SERVICE>``) points the clients at
another endpoint, such as moto's server in the tests. Also the pure helpers both backends
share (image references).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from tether.errors import BackendError

T = TypeVar("T")

REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")
MAX_ATTEMPTS = 8
"""Attempts per call (the first plus retries) in adaptive retry mode."""

NO_REGION = (
    "no AWS region: set the run option region=..., $AWS_REGION or $AWS_DEFAULT_REGION, or "
    "`region` of your profile in ~/.aws/config ($AWS_CONFIG_FILE)"
)
NO_CREDENTIALS = (
    "no AWS credentials found: boto3 reads $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY "
    "(and $AWS_SESSION_TOKEN), the profile $AWS_PROFILE (or the profile run option) in "
    "~/.aws/credentials ($AWS_SHARED_CREDENTIALS_FILE) and ~/.aws/config ($AWS_CONFIG_FILE), "
    "SSO, web identity ($AWS_WEB_IDENTITY_TOKEN_FILE) and the container or instance role; "
    "run `aws configure` or `aws sso login`"
)


class AwsClientError(BackendError):
    """boto3 is missing, or there is no region or there are no credentials (the message says
    what to set)."""

    backend, kind = "aws", "connection"


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as e:
        raise AwsClientError("the AWS schedulers need boto3: pip install 'tether[aws]'") from e
    return boto3


def resolve_region(region: str | None, profile: str | None) -> str:
    """The region: the option, else ``$AWS_REGION``/``$AWS_DEFAULT_REGION``, else the
    profile's ``region`` in ``~/.aws/config`` (read offline).

    Args:
        region: The ``region`` run option.
        profile: The ``profile`` run option.

    Returns:
        The region.

    Raises:
        AwsClientError: When none is set.
    """
    if region:
        return region
    for name in REGION_ENVS:
        if os.environ.get(name):
            return os.environ[name]
    try:
        import botocore.session
    except ImportError:
        raise AwsClientError(NO_REGION) from None
    try:
        found = botocore.session.Session(profile=profile).get_config_variable("region")
    except Exception as e:  # a profile that does not exist
        raise AwsClientError(f"{NO_REGION} ({e})") from e
    if not found:
        raise AwsClientError(NO_REGION)
    return str(found)


def make_client(service: str, region: str, profile: str | None = None,
                endpoint_url: str | None = None) -> Any:
    """A boto3 client with adaptive retries.

    Args:
        service: ``batch``, ``logs``, ``sagemaker``...
        region: The region.
        profile: A named profile, or None for the default chain.
        endpoint_url: Another endpoint (default: boto3's, which honours ``$AWS_ENDPOINT_URL``).

    Returns:
        The client.

    Raises:
        AwsClientError: When boto3 is missing or the profile does not exist.
    """
    boto3 = _boto3()
    from botocore.config import Config
    from botocore.exceptions import ProfileNotFound

    try:
        session = boto3.session.Session(profile_name=profile, region_name=region)
    except ProfileNotFound as e:
        raise AwsClientError(f"{e}; {NO_CREDENTIALS}") from e
    config = Config(retries={"mode": "adaptive", "total_max_attempts": MAX_ATTEMPTS},
                    user_agent_extra="tether")  # fmt: skip
    return session.client(service, config=config, endpoint_url=endpoint_url)


def call(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Calls a boto3 client method, turning missing credentials into :class:`AwsClientError`.

    Args:
        fn: The bound client method.
        **kwargs: Its arguments.

    Returns:
        What it returns.

    Raises:
        AwsClientError: For missing or partial credentials or an unknown SSO token.
    """
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    try:
        return fn(**kwargs)
    except (NoCredentialsError, PartialCredentialsError) as e:
        raise AwsClientError(f"{NO_CREDENTIALS} ({e})") from e


def error_code(e: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for other errors).

    Args:
        e: The exception.

    Returns:
        The code, e.g. ``ClientException``.
    """
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def resolve_image(image: str, repo: str | None) -> str:
    """``image`` prefixed with ``repo`` when it names no registry.

    Args:
        image: The role's image.
        repo: The ``image_repo`` option.

    Returns:
        The image.
    """
    if not repo or has_registry(image):
        return image
    return f"{repo.rstrip('/')}/{image}"


def has_registry(image: str) -> bool:
    """Whether an image reference names its registry (as Docker reads it: a first path
    component with a ``.`` or ``:``, or ``localhost``).

    Args:
        image: The image.

    Returns:
        True for ``ghcr.io/a/b``, ``localhost/b``, ``host:5000/b``; False for ``a/b``, ``b``.
    """
    head, sep, _ = image.partition("/")
    return bool(sep) and ("." in head or ":" in head or head == "localhost")
