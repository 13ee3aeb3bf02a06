"""Options shared by the commands, and one-line errors with the right exit code."""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from botocore.exceptions import BotoCoreError, ClientError

from dependency_tracker import settings
from dependency_tracker.cli import render
from dependency_tracker.cli.target import ConnectionOptions, Target
from dependency_tracker.errors import DependencyTrackerError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_PANEL = "Where"
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

    ``func`` takes a :class:`~dependency_tracker.cli.target.Target` first,
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
        connection = {p.name: kwargs.pop(p.name) for p in _CONNECTION_PARAMETERS}
        with reported_errors():
            func(Target(ConnectionOptions(**connection)), **kwargs)

    command.__signature__ = inspect.Signature(exposed)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in exposed}
    return command


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
    """Turn expected failures into ``error: <reason>`` on stderr and an exit code."""
    try:
        yield
    except DependencyTrackerError as exc:
        fail(str(exc), exc.exit_code)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        fail(f"{exc.operation_name}: {error.get('Code', '?')}: {error.get('Message', '')}")
    except BotoCoreError as exc:  # no credentials or region, endpoint unreachable, ...
        fail(str(exc))
    except OSError as exc:  # a file that cannot be read or written
        fail(str(exc))


def fail(reason: str, code: int = 1) -> NoReturn:
    """Print ``error: <reason>`` as one line on stderr and exit with ``code``."""
    render.stderr().print(f"[red]error:[/] {render.escape_line(reason)}", soft_wrap=True)
    raise typer.Exit(code)
