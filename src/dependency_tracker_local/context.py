"""A Lambda context object for handlers invoked in-process."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass
class LocalContext:
    """Quacks like ``aws_lambda_powertools.utilities.typing.LambdaContext``."""

    function_name: str
    memory_limit_in_mb: int = 256
    timeout_seconds: int = 60
    region: str = "us-east-1"
    account: str = "123456789012"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _started: float = field(default_factory=time.monotonic)

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

    def get_remaining_time_in_millis(self) -> int:
        """Time left before the (notional) timeout."""
        left = self.timeout_seconds - (time.monotonic() - self._started)
        return max(0, int(left * 1000))
