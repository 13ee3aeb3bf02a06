"""A retried parent adopting its join: the same wait, sent again with a new token.

A Step Functions ``Retry`` of a ``sendMessage.waitForTaskToken`` task whose
first send was delivered (the error came after it) sends the same join with a
new token. The join row belongs to the first token; it passes to the new one
only when the same execution sends the same join (quorum, total, member list)
and the first token's task has closed (``SendTaskHeartbeat`` answers
``TaskTimedOut``). Anything else keeps the join with its owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from dependency_tracker.core.backoff import error_code
from dependency_tracker.core.observability import logger, metrics, redact_token
from dependency_tracker.core.tokens import PARENT_GONE_CODES
from dependency_tracker.joins.member_list import JOIN_MEMBERS_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.joins.store import JoinStore
    from dependency_tracker.payloads.bucket import PayloadBucket
    from dependency_tracker.payloads.model import ProcessPayload
    from dependency_tracker.table.join_items import JoinItem


class JoinAdoption:
    """Hands a join to its parent's retried send (a part of ``JoinRegistration``)."""

    joins: JoinStore
    _bucket: PayloadBucket
    _sfn: SFNClient | None

    def _adopted(
        self, existing: JoinItem, row: JoinItem, payloads: list[ProcessPayload]
    ) -> JoinItem | None:
        """The join handed to ``row``'s token when it is its own parent's retry; else unchanged."""
        same = (
            existing.parent_execution is not None
            and existing.parent_execution == row.parent_execution
            and (existing.quorum, existing.total) == (row.quorum, row.total)
            and existing.source_etag == row.source_etag
            and (existing.source == row.source or self._both_inline(existing.source, row.source))
            and self._same_first_chunk(existing, payloads)
        )
        if not same or self._sfn is None or self._task_open(existing.task_token):
            return existing
        adopted = self.joins.adopt(
            existing.join_id, old_token=existing.task_token, new_token=row.task_token
        )
        if adopted:
            logger.warning(
                "join adopted: its parent's task closed and the same execution sent it again",
                extra={"previous_token_hash": redact_token(existing.task_token)},
            )
            metrics.add_metric(name="JoinsAdopted", unit=MetricUnit.Count, value=1)
        return self.joins.get(existing.join_id)

    def _both_inline(self, first: str | None, second: str | None) -> bool:
        """Both lists are inline lists the tracker wrote (under each token's own key)."""
        inline = f"s3://{self._bucket.bucket_name}/{JOIN_MEMBERS_PREFIX}/"
        return all(url is not None and url.startswith(inline) for url in (first, second))

    def _same_first_chunk(self, existing: JoinItem, payloads: list[ProcessPayload]) -> bool:
        chunk = self.joins.chunk(existing.join_id, 0)
        return chunk is None or set(chunk.members) == {payload.id for payload in payloads}

    def _task_open(self, token: str) -> bool:
        """Whether a parent still waits on ``token`` (a heartbeat is refused once it closed)."""
        assert self._sfn is not None  # noqa: S101  (callers check)
        try:
            self._sfn.send_task_heartbeat(taskToken=token)
        except ClientError as exc:
            if error_code(exc) in PARENT_GONE_CODES:
                return False
            raise
        return True
