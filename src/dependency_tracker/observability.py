"""Logger, metrics and tracer shared by every module."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

from dependency_tracker.settings import metrics_namespace, service_name
from dependency_tracker.tokens import redact_token

__all__ = ["SERVICE", "logger", "metrics", "redact_token", "tracer"]

SERVICE = service_name()

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=metrics_namespace(), service=SERVICE)
tracer = Tracer(service=SERVICE)
