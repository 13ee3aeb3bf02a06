"""Logger and metrics shared by every module.

No Powertools ``Tracer``: nothing was traced with it, and building one imports the X-Ray SDK
and patches botocore on every cold start. ``Tracing: Active`` still traces each invocation.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics

from dependency_tracker.core.settings import metrics_namespace, service_name
from dependency_tracker.core.tokens import redact_token

__all__ = ["SERVICE", "logger", "metrics", "redact_token"]

SERVICE = service_name()

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=metrics_namespace(), service=SERVICE)
