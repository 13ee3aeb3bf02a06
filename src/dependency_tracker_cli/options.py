"""Options shared by the commands, and one-line errors with the right exit code."""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import TYPE_CHECKING, Annotated, Any, NoReturn
from urllib.parse import urlparse

import typer
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,  # noqa: A004  (botocore's: endpoint unreachable, connect timeout, TLS)
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from typer.core import TyperCommand, TyperGroup, TyperOption

from dependency_tracker.core import settings
from dependency_tracker.core.errors import DependencyTrackerError
from dependency_tracker_cli import hints, render
from dependency_tracker_cli.target import (
    ConnectionOptions,
    Target,
    WorkflowNotDeployedError,
    is_loopback,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from typer._click import Context, Parameter

_PANEL = "Where"


def _flags_without_type(params: list[Parameter]) -> list[Parameter]:
    """``params`` with no type shown for flags (``--json``, not ``--json <bool>``).

    Typer's rich help prints every option's type, flags' too, although a flag
    takes no value; an empty metavar leaves the column blank.
    """
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """Every command's class (``app.command(cls=Command)``): flags show no type in ``--help``."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        """The parameters, ``--help`` included, flags without a type."""
        return _flags_without_type(super().get_params(ctx))


class Group(TyperGroup):
    """The app's class (``typer.Typer(cls=Group)``): its own flags show no type either."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        """The parameters, ``--help`` and ``--version`` included, flags without a type."""
        return _flags_without_type(super().get_params(ctx))


ENV_STACK_NAME = "DEPTRACK_STACK_NAME"

EndpointUrl = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        envvar="AWS_ENDPOINT_URL",
        help="AWS endpoint, e.g. the one `serve` prints.",
        rich_help_panel=_PANEL,
    ),
]
Region = Annotated[
    str | None,
    typer.Option(
        "--region", help="AWS region (default: from the profile).", rich_help_panel=_PANEL
    ),
]
Profile = Annotated[
    str | None,
    typer.Option(
        "--profile", help="AWS profile (default: the usual chain).", rich_help_panel=_PANEL
    ),
]
StackName = Annotated[
    str | None,
    typer.Option(
        "--stack-name",
        envvar=ENV_STACK_NAME,
        help="Deployed stack: resources come from its CloudFormation outputs.",
        rich_help_panel=_PANEL,
    ),
]
Prefix = Annotated[
    str,
    typer.Option(
        "--prefix",
        envvar=settings.ENV_PREFIX,
        help="Name prefix of the resources ({prefix}-state, {prefix}-process, ...).",
        rich_help_panel=_PANEL,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]

_CONNECTION_PARAMETERS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
    for name, annotation, default in (
        ("endpoint_url", EndpointUrl, None),
        ("region", Region, None),
        ("profile", Profile, None),
        ("stack_name", StackName, None),
        ("prefix", Prefix, settings.DEFAULT_PREFIX),
    )
]


def aws_command(func: Callable[..., None]) -> Callable[..., None]:
    """Give a command the shared AWS options and one-line error reporting.

    ``func`` takes a :class:`~dependency_tracker_cli.target.Target` first,
    then its own Typer parameters. The command Typer sees has ``func``'s own
    parameters plus ``--endpoint-url``, ``--region``, ``--profile``,
    ``--stack-name`` and ``--prefix``. Modules that use it leave out
    ``from __future__ import annotations``: Typer reads the annotations at
    runtime.
    """
    parameters = list(inspect.signature(func, eval_str=True).parameters.values())
    if not parameters or parameters[0].name != "target":
        msg = f"{func.__name__} must take `target` first"
        raise TypeError(msg)
    exposed = [*parameters[1:], *_CONNECTION_PARAMETERS]

    @functools.wraps(func)
    def command(**kwargs: Any) -> None:
        options = ConnectionOptions(**{p.name: kwargs.pop(p.name) for p in _CONNECTION_PARAMETERS})
        problem = endpoint_url_problem(options.endpoint_url)
        if problem is not None:
            fail(problem, 2)
        with reported_errors(options):
            func(Target(options), **kwargs)

    command.__signature__ = inspect.Signature(exposed)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in exposed}
    return command


def endpoint_url_problem(endpoint_url: str | None) -> str | None:
    """Why ``endpoint_url`` is no endpoint (no ``http://`` or ``https://``, no host), or None.

    Without this, botocore takes ``127.0.0.1:4600`` for a bare host name and
    the command ends in an unrelated error about the region.
    """
    if not endpoint_url:
        return None
    parsed = urlparse(endpoint_url)
    if parsed.scheme in {"http", "https"} and parsed.netloc:
        return None
    example = f"http://{endpoint_url}" if "://" not in endpoint_url else "http://127.0.0.1:4600"
    return (
        f"--endpoint-url (or $AWS_ENDPOINT_URL) {endpoint_url} needs a scheme and a host, "
        f"e.g. {example}"
    )


@contextlib.contextmanager
def reported_errors(options: ConnectionOptions | None = None) -> Iterator[None]:
    """Turn expected failures into ``error: <reason>`` on stderr and an exit code.

    Errors an operator can fix from the command line (an endpoint that does not
    answer, missing credentials or region, resources or a stack that are not
    there) get a second line, ``hint: <what to check>``; ``options`` tells
    whether the command talked to a local endpoint or to AWS.
    """
    try:
        yield
    except WorkflowNotDeployedError as exc:
        fail(str(exc), exc.exit_code, hint=exc.hint)
    except DependencyTrackerError as exc:
        fail(str(exc), exc.exit_code)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "?"))
        message = str(error.get("Message", ""))
        fail(
            f"{exc.operation_name}: {code}: {message}",
            hint=client_error_hint(exc.operation_name, code, message, options),
        )
    except BotoCoreError as exc:  # no credentials or region, endpoint unreachable, ...
        fail(str(exc), hint=botocore_hint(exc, options))
    except OSError as exc:  # a file that cannot be read or written
        fail(str(exc))


# ClientError codes of credentials AWS does not accept (unknown, expired, badly signed).
_REFUSED_CREDENTIALS = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "AuthFailure",
    }
)
# ClientError codes of a table, queue or bucket that is not there.
_MISSING_RESOURCE = frozenset(
    {
        "ResourceNotFoundException",
        "QueueDoesNotExist",
        "AWS.SimpleQueueService.NonExistentQueue",
        "NoSuchBucket",
    }
)


def _serve_hint() -> str:
    return (
        f"is `{hints.command('serve')}` running? Pass the endpoint it printed with "
        "--endpoint-url or $AWS_ENDPOINT_URL"
    )


def _credentials_hint() -> str:
    return (
        "configure AWS credentials (aws configure, $AWS_PROFILE or --profile); "
        f"against `{hints.command('serve')}`, pass its --endpoint-url (no credentials needed)"
    )


def botocore_hint(exc: BotoCoreError, options: ConnectionOptions | None) -> str | None:
    """What to check after a client-side failure (nothing reached AWS, or no answer came)."""
    endpoint = None if options is None else options.endpoint_url
    if isinstance(exc, ConnectionError | HTTPClientError):
        if is_loopback(endpoint):
            return _serve_hint()
        if endpoint:
            return f"check --endpoint-url (or $AWS_ENDPOINT_URL): {endpoint} does not answer"
        return "check your network and --region; for the local server, pass --endpoint-url"
    if isinstance(
        exc,
        NoCredentialsError | PartialCredentialsError | CredentialRetrievalError | ProfileNotFound,
    ):
        return _credentials_hint()
    if isinstance(exc, NoRegionError):
        return "pass --region or set $AWS_REGION (a profile with a region works too)"
    return None


def client_error_hint(
    operation: str, code: str, message: str, options: ConnectionOptions | None
) -> str | None:
    """What to check after AWS (or the local endpoint) refused a request."""
    if code in _REFUSED_CREDENTIALS:
        return (
            "the credentials were refused: check --profile or $AWS_PROFILE, renew them "
            "(e.g. aws sso login), or check --endpoint-url"
        )
    if code in {"AccessDenied", "AccessDeniedException"}:
        return "the caller lacks a permission: docs/cli.md lists what each command needs"
    if operation == "DescribeStacks" and "does not exist" in message:
        return "no such stack in this account and region: check --stack-name and --region"
    if code in _MISSING_RESOURCE:
        where = (
            f"--stack-name {options.stack_name}"
            if options is not None and options.stack_name
            else f"--prefix {settings.DEFAULT_PREFIX if options is None else options.prefix}"
        )
        return (
            f"the tracker's tables, queues or bucket are not where {where} puts them: "
            "check --prefix or --stack-name, --region and --endpoint-url"
        )
    return None


def fail(reason: str, code: int = 1, *, hint: str | None = None) -> NoReturn:
    """Print ``error: <reason>`` as one line on stderr (and ``hint: ...``), exit with ``code``."""
    console = render.stderr()
    console.print(f"[red]error:[/] {render.escape_line(reason)}", soft_wrap=True)
    if hint:
        console.print(f"[yellow]hint:[/] {render.escape_line(hint)}", soft_wrap=True)
    raise typer.Exit(code)
