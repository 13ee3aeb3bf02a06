"""A Lambda context object for handlers invoked in-process; the error of a stopping stack."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


class StackStoppedError(RuntimeError):
    """An event reached a handler after the stack began to stop."""

    def __init__(self) -> None:
        super().__init__("the embedded stack is stopping: the event was not delivered")


@dataclass
class LocalContext:
    """Quacks like ``aws_lambda_powertools.utilities.typing.LambdaContext``.

    The invocation's clock starts when the context is made, and again at :meth:`begin`
    (the local invoker calls it once the handler really starts: invocations wait for
    each other locally, which on AWS they do not).
    """

    function_name: str
    memory_limit_in_mb: int = 256
    timeout_seconds: float = 60
    region: str = "us-east-1"
    account: str = "123456789012"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _started: float = field(default=-1.0, repr=False)

    def __post_init__(self) -> None:
        if self._started < 0:
            self._started = self.clock()

    def begin(self) -> None:
        """Start the invocation's clock now."""
        self._started = self.clock()

    @property
    def function_version(self) -> str:
        """Always ``$LATEST`` locally."""
        return "$LATEST"

    @property
    def invoked_function_arn(self) -> str:
        """ARN the function would have in the stack."""
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        """CloudWatch log group the function would log to."""
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        """A stream name per invocation."""
        return self.aws_request_id

    def elapsed_seconds(self) -> float:
        """Seconds since the invocation began."""
        return self.clock() - self._started

    def overran(self) -> bool:
        """Whether the invocation has run past its timeout (Lambda would have stopped it)."""
        return self.elapsed_seconds() > self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        """Time left before the function's timeout."""
        left = self.timeout_seconds - self.elapsed_seconds()
        return max(0, int(left * 1000))
