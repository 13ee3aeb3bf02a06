"""The payload state table: one item per payload id, changed only by conditional writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dependency_tracker.core.enums import PayloadState, utcnow
from dependency_tracker.core.errors import TransitionConflictError
from dependency_tracker.table.dynamodb import (
    batch_get,
    is_conditional_failure,
    put_if_absent,
    update_if,
    values,
)
from dependency_tracker.table.items import InvalidMessageItem, PayloadStateItem, key_attributes
from dependency_tracker.table.keys import FULL_ATTRIBUTES, partition_key

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mypy_boto3_dynamodb import DynamoDBClient

    from dependency_tracker.payloads.model import ProcessPayload


class StateTable:
    """Reads and writes payload state items.

    Every transition is conditional on the state it expects, so concurrent
    process and update-state invocations cannot overwrite each other.
    """

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self.table_name = table_name

    def get(self, payload_id: str) -> PayloadStateItem | None:
        """Strongly consistent read of one payload's state."""
        response = self._client.get_item(
            TableName=self.table_name, Key=_key(payload_id), ConsistentRead=True
        )
        item = response.get("Item")
        return None if item is None else PayloadStateItem.from_item(item)

    def batch_get(self, payload_ids: Iterable[str]) -> dict[str, PayloadStateItem]:
        """Strongly consistent read of many payloads; missing ids are left out."""
        keys = [_key(pid) for pid in sorted(set(payload_ids))]
        found: dict[str, PayloadStateItem] = {}
        for raw in batch_get(self._client, self.table_name, keys):
            item = PayloadStateItem.from_item(raw)
            found[item.payload_id] = item
        return found

    def claim(
        self,
        payload: ProcessPayload,
        seen: PayloadStateItem | None,
        *,
        message_id: str | None = None,
    ) -> PayloadStateItem:
        """Take the right to start the next attempt of ``payload``.

        The write only succeeds if the item is still what ``seen`` says it was,
        so of two concurrent claimers exactly one wins.

        Raises:
            TransitionConflictError: Someone else changed the item first.
        """
        now = utcnow()
        attempt = 1 if seen is None else seen.attempt + 1
        claimed = PayloadStateItem(
            payload_id=payload.id,
            state=PayloadState.CLAIMED,
            workflow=payload.workflow,
            attempt=attempt,
            created_at=now if seen is None else seen.created_at,
            updated_at=now,
            claimed_at=now,
            claim_message_id=message_id,
        )
        try:
            if seen is None:
                self._client.put_item(
                    TableName=self.table_name,
                    Item=claimed.to_item(),
                    ConditionExpression="attribute_not_exists(payload_id)",
                )
            else:
                self._client.update_item(
                    TableName=self.table_name,
                    Key=_key(payload.id),
                    UpdateExpression=(
                        "SET #state = :claimed, attempt = :attempt, workflow = :workflow, "
                        "claimed_at = :now, updated_at = :now, claim_message_id = :message "
                        # The previous attempt's run is not this attempt's: liveness and
                        # report ordering must not look at it (it stays in executions).
                        "REMOVE finished_at, execution_arn, run_rank, start_refused_at"
                    ),
                    ConditionExpression="#state = :seen_state AND attempt = :seen_attempt",
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues=values(
                        claimed=PayloadState.CLAIMED.value,
                        attempt=attempt,
                        workflow=payload.workflow,
                        now=now,
                        message=message_id,
                        seen_state=seen.state.value,
                        seen_attempt=seen.attempt,
                    ),
                )
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise TransitionConflictError(f"claim of {payload.id} attempt {attempt}") from exc
            raise
        if seen is not None:
            claimed = claimed.model_copy(
                update={
                    "executions": seen.executions,
                    "last_error": seen.last_error,
                    "last_cause": seen.last_cause,
                }
            )
        return claimed

    def set_processing(self, payload_id: str, attempt: int, execution_arn: str) -> None:
        """Record the started execution of a claimed attempt.

        Raises:
            TransitionConflictError: The attempt is no longer the claimed one
                (another process recorded it, or the execution already ended).
        """
        now = utcnow()
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=_key(payload_id),
                UpdateExpression=(
                    "SET #state = :processing, execution_arn = :arn, updated_at = :now "
                    "ADD executions :arns REMOVE start_refused_at"
                ),
                ConditionExpression="#state = :claimed AND attempt = :attempt",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(
                    processing=PayloadState.PROCESSING.value,
                    claimed=PayloadState.CLAIMED.value,
                    arn=execution_arn,
                    arns={execution_arn},
                    now=now,
                    attempt=attempt,
                ),
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise TransitionConflictError(
                    f"{payload_id} attempt {attempt} not claimed"
                ) from exc
            raise

    def refuse_start(self, payload_id: str, attempt: int) -> bool:
        """Mark a claimed attempt whose ``StartExecution`` AWS answered with an error.

        Only while the attempt is still ``CLAIMED``; False when the item moved on.
        """
        now = utcnow()
        return (
            update_if(
                self._client,
                TableName=self.table_name,
                Key=_key(payload_id),
                UpdateExpression="SET start_refused_at = :now, updated_at = :now",
                ConditionExpression="#state = :claimed AND attempt = :attempt",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(
                    claimed=PayloadState.CLAIMED.value, attempt=attempt, now=now
                ),
            )
            is not None
        )

    def reclaim_refused(
        self, seen: PayloadStateItem, *, message_id: str | None = None
    ) -> PayloadStateItem:
        """Take the right to start a claimed attempt whose start AWS refused, under its name.

        The write only succeeds while the attempt is still ``CLAIMED`` with its start
        refused, so of two concurrent messages exactly one starts it; the claim's age and
        message are the new claimer's.

        Raises:
            TransitionConflictError: Someone else changed the item first.
        """
        now = utcnow()
        taken = update_if(
            self._client,
            TableName=self.table_name,
            Key=_key(seen.payload_id),
            UpdateExpression=(
                "SET claimed_at = :now, updated_at = :now, claim_message_id = :message "
                "REMOVE start_refused_at"
            ),
            ConditionExpression=(
                "#state = :claimed AND attempt = :attempt AND attribute_exists(start_refused_at)"
            ),
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues=values(
                claimed=PayloadState.CLAIMED.value,
                attempt=seen.attempt,
                now=now,
                message=message_id,
            ),
        )
        if taken is None:
            raise TransitionConflictError(f"restart of {seen.payload_id} attempt {seen.attempt}")
        return seen.model_copy(
            update={
                "claimed_at": now,
                "updated_at": now,
                "claim_message_id": message_id,
                "start_refused_at": None,
            }
        )

    def set_final(
        self,
        *,
        payload_id: str,
        workflow: str,
        state: PayloadState,
        execution_arn: str,
        attempt: int | None,
        error: str | None = None,
        cause: str | None = None,
        result_json: str | None = None,
        run_rank: int = 0,
    ) -> PayloadStateItem:
        """Write the terminal state of an execution.

        ``attempt`` is the attempt the execution ran for (None for an execution
        the tracker did not start). Refused, so the caller can tell them apart
        by re-reading:

        * a stale report: an older attempt, a foreign execution while an attempt
          is live, or a second run of an attempt that already ended (an Express
          start is not idempotent: the first run to end decides the attempt);
        * an older report of the same execution: ``run_rank`` (redrive count,
          then stop date) not above the recorded one, so a late event from
          before a redrive never overwrites the redriven run's result;
        * a repeat of the recorded report.

        Raises:
            TransitionConflictError: The item moved on or already holds this result.
        """
        if not state.is_terminal:
            msg = f"{state} is not terminal"
            raise ValueError(msg)
        plain: dict[str, object] = {
            "state": state.value,
            "arn": execution_arn,
            "arns": {execution_arn},
            "workflow": workflow,
            "now": utcnow(),
            "attempt": attempt or 0,
            "rank": run_rank,
            "claimed": PayloadState.CLAIMED.value,
            "processing": PayloadState.PROCESSING.value,
        }
        sets = [
            "#state = :state",
            "execution_arn = :arn",
            "workflow = :workflow",
            "updated_at = :now",
            "finished_at = :now",
            "created_at = if_not_exists(created_at, :now)",
            "attempt = if_not_exists(attempt, :attempt)",
            "run_rank = :rank",
        ]
        # The last error outlives a later success (attempt history); a result
        # belongs to the run that produced it.
        removes = []
        for name, value in (
            ("last_error", error),
            ("last_cause", cause),
            ("result_json", result_json),
        ):
            if value is not None:
                sets.append(f"{name} = :{name}")
                plain[name] = value
            elif name == "result_json":
                removes.append(name)
        if partition_key(payload_id) != payload_id:
            # This update may create the item (a run the tracker did not start):
            # keep the whole id beside its derived key, as to_item does.
            sets.append(f"{FULL_ATTRIBUTES['payload_id']} = :full_id")
            plain["full_id"] = payload_id
        expression = f"SET {', '.join(sets)} ADD executions :arns"
        if removes:
            expression += f" REMOVE {', '.join(removes)}"
        live = "#state IN (:claimed, :processing)"
        # The same execution reporting again: only a newer run of it (a redrive)
        # replaces what is recorded. Items written before ranks existed compare
        # by state, as they did then.
        newer = (
            "(execution_arn = :arn AND (run_rank < :rank "
            "OR (attribute_not_exists(run_rank) AND #state <> :state)))"
        )
        if attempt is None:
            # Not started by the tracker: record it unless an attempt is live.
            ours = (
                f"NOT ({live}) AND "
                f"(attribute_not_exists(execution_arn) OR execution_arn <> :arn OR {newer})"
            )
        else:
            # The attempt's first run to end decides it; later only a redrive of that run.
            ours = f"attempt = :attempt AND ({live} OR {newer})"
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=_key(payload_id),
                UpdateExpression=expression,
                ConditionExpression=f"attribute_not_exists(payload_id) OR ({ours})",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(**plain),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise TransitionConflictError(
                    f"final state of {payload_id} from {execution_arn}"
                ) from exc
            raise
        return PayloadStateItem.from_item(response["Attributes"])

    def record_invalid(self, item: InvalidMessageItem) -> bool:
        """Store an invalid message once; returns False for a duplicate delivery."""
        return put_if_absent(self._client, self.table_name, item.to_item(), "payload_id")


def _key(payload_id: str) -> dict[str, Any]:
    return key_attributes(payload_id=payload_id)
