"""Queue lookups the embedded stack and cirrus's layout both need."""

from __future__ import annotations

from typing import Any


def queue_arn(sqs: Any, queue_url: str) -> str:
    """The ARN of the queue at ``queue_url``."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])
