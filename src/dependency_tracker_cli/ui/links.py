"""A parent execution as the page links it: the AWS console, or the JSON view on ``serve``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from dependency_tracker_cli.waitgraph import execution_label

if TYPE_CHECKING:
    from dependency_tracker_cli.target import Target


@dataclass(frozen=True)
class Execution:
    """A parent execution as a link: the console on AWS, the page's JSON view on ``serve``."""

    arn: str
    href: str

    @property
    def label(self) -> str:
        """``state-machine:name``."""
        return execution_label(self.arn)


def execution_link(target: Target, arn: str) -> Execution:
    """Where ``arn`` is shown: the AWS console for a deployed stack, else ``/execution?arn=``."""
    if target.options.endpoint_url:
        return Execution(arn, f"/execution?arn={quote(arn, safe='')}")
    region = arn.split(":")[3] if arn.count(":") >= 4 else target.session.region_name
    return Execution(
        arn,
        f"https://{region}.console.aws.amazon.com/states/home?region={region}"
        f"#/v2/executions/details/{quote(arn, safe=':')}",
    )
