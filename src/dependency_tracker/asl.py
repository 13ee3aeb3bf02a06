"""Building blocks for your own parent state machines: the tracker's wait Task states as ASL.

A parent waits on a dependency by sending it to the tracker's process queue with
``sqs:sendMessage.waitForTaskToken`` and pausing until the tracker answers. The
functions here build that Task state as a plain ASL dict (JSONPath), with the
message body the tracker expects (the public contract) and a ``Catch`` for every
error the wait can end in, so nothing is forgotten when a state is pasted:

* :func:`wait_state`: one dependency, one token. Success output (at ``result_path``):
  ``{"payload_id", "state": "SUCCEEDED", "execution_arn", "replayed", "result"}``,
  where ``result`` is ``{"items": [{"id", "collection", "href"?}], "output": ...}``
  or, when the result was too large to keep inline, ``{"url": "s3://...", ...}``.
  Errors: :data:`WAIT_ERRORS` and :data:`CALLBACK_TIMEOUT`.
* :func:`join_state`: k of n dependencies, one token (all-of, either-or, quorum),
  listed or named by a manifest. Success output: the join summary
  (``join_id``, ``quorum``, ``total``, ``counts``, ``succeeded``, ``failed``,
  ``pending``, ``winner`` when the quorum is 1). Errors: :data:`JOIN_ERRORS` and
  :data:`CALLBACK_TIMEOUT`.

The queue url is given as is: a literal, or a placeholder your deployment
substitutes (``"${ProcessQueueUrl}"`` with SAM's ``DefinitionSubstitutions``); so is
the partition of the Task's ``Resource`` (``"aws"`` unless given, ``"${Partition}"``
for a deployment to fill in with ``AWS::Partition``).

Each Task retries the send itself (:func:`send_retry`) when SQS throttles or fails
it (:data:`SQS_TRANSIENT_ERRORS`; briefly, :data:`SQS_UNCLASSIFIED_ERRORS`), and
nothing else: not SQS's permanent refusals, not the tracker's answers, not the
callback timeout. A retried attempt waits on a new task token; if the
failed attempt's message was delivered anyway, the tracker's answer to its token
is refused (``TaskTimedOut``) and dropped as "parent gone".
The dicts serialise with :func:`json.dumps` into a definition, and fit CDK's
``CustomState(self, "Wait", state_json=wait_state(...))``.

Example:
    >>> state = wait_state(
    ...     "${ProcessQueueUrl}", payload_path="$.tile", result_path="$.waited",
    ...     next_state="UseItems", on_error="Failed",
    ... )
    >>> state["Resource"]
    'arn:aws:states:::sqs:sendMessage.waitForTaskToken'
    >>> [retrier["ErrorEquals"] for retrier in state["Retry"]]  # doctest: +NORMALIZE_WHITESPACE
    [['SQS.RequestThrottledException', 'SQS.KmsThrottledException', 'SQS.SdkClientException'],
     ['SQS.AmazonSQSException']]
    >>> [catcher["ErrorEquals"] for catcher in state["Catch"]]  # doctest: +NORMALIZE_WHITESPACE
    [['DependencyFailed', 'DependencyInvalid', 'DependencyAborted', 'DependencyCycle',
      'States.Timeout']]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dependency_tracker.core.enums import DependencyError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SEND_AND_WAIT = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
# The ARN above in any partition (aws, aws-cn, aws-us-gov): ``send_and_wait("${Partition}")``.
_SEND_AND_WAIT = "arn:{partition}:states:::sqs:sendMessage.waitForTaskToken"
DEFAULT_PARTITION = "aws"
# What Step Functions names a failed call of its optimized SQS integration: "SQS." and the
# class the AWS SDK raised. Transient by their names: SQS's own throttling classes, and a
# call that never got an answer (network, a timeout on the client's side: SdkClientException).
SQS_TRANSIENT_ERRORS: tuple[str, ...] = (
    "SQS.RequestThrottledException",
    "SQS.KmsThrottledException",
    "SQS.SdkClientException",
)
# The SDK's base class, the name of every error code it has no class of its own for: the
# common throttling and 5xx codes (ThrottlingException, InternalFailure, ServiceUnavailable),
# but also permanent refusals (AccessDenied, InvalidParameterValue for a message over SQS's
# size limit, MissingParameter). A Retry matches names only and this one does not tell them
# apart, so it is retried briefly (two more attempts, about 3 s): enough for a blip, without
# a minute of retries before a permanent refusal fails the parent. The SDK's classes of
# permanent refusals (QueueDoesNotExistException, InvalidMessageContentsException, the Kms*
# access and key errors, ...) are never retried.
SQS_UNCLASSIFIED_ERRORS: tuple[str, ...] = ("SQS.AmazonSQSException",)
UNCLASSIFIED_MAX_ATTEMPTS = 2
# The same for its optimized DynamoDB integration: the throttling and 5xx errors by
# their own names (``DynamoDB.<code>``), AmazonDynamoDBException for those the SDK
# has no class of its own for (ThrottlingException), SdkClientException as above.
DYNAMODB_TRANSIENT_ERRORS: tuple[str, ...] = (
    "DynamoDB.ProvisionedThroughputExceededException",
    "DynamoDB.ThrottlingException",
    "DynamoDB.RequestLimitExceeded",
    "DynamoDB.RequestLimitExceededException",
    "DynamoDB.InternalServerError",
    "DynamoDB.InternalServerErrorException",
    "DynamoDB.AmazonDynamoDBException",
    "DynamoDB.SdkClientException",
)
# Backoff of those retries: about a minute in all at most, jittered so that the
# iterations of a large Map throttled together do not retry together.
RETRY_INTERVAL_SECONDS = 1
RETRY_BACKOFF_RATE = 2
RETRY_MAX_ATTEMPTS = 6
RETRY_MAX_DELAY_SECONDS = 20
# What the Task raises when the tracker did not answer within its callback timeout.
# The tracker's own parents re-raise it as DependencyTimedOut; yours may do the same.
CALLBACK_TIMEOUT = "States.Timeout"
# Every error the tracker sends to a single waiter.
WAIT_ERRORS: tuple[str, ...] = (
    DependencyError.FAILED.value,
    DependencyError.INVALID.value,
    DependencyError.ABORTED.value,
    DependencyError.CYCLE.value,
)
# Every error the tracker sends to a join (a member's failure counts; the join
# fails only when the quorum became impossible).
JOIN_ERRORS: tuple[str, ...] = (
    DependencyError.QUORUM_UNREACHABLE.value,
    DependencyError.INVALID_JOIN.value,
    DependencyError.CYCLE.value,
)
# Sent to a join with a deadline that passed with too few successes: caught only by a
# state made with a deadline (an ``on_error`` mapping names it then).
DEADLINE_ERROR = DependencyError.DEADLINE_EXCEEDED.value
# The catch-all error name: allowed last in ``on_error`` (for your own handling).
CATCH_ALL = "States.ALL"
DEFAULT_TIMEOUT_SECONDS = 300
# Never retried by a wait's Task: the callback timeout (the dependency was too slow; a
# new attempt would publish it again), and the catch-alls, which take in the tracker's
# own answers (a SendTaskFailure reaches the parent as a task failure of that name).
NEVER_RETRIED: frozenset[str] = frozenset(
    {CALLBACK_TIMEOUT, CATCH_ALL, "States.TaskFailed", "States.HeartbeatTimeout"}
)


def send_and_wait(partition: str = DEFAULT_PARTITION) -> str:
    """The ``sqs:sendMessage.waitForTaskToken`` resource ARN in ``partition``."""
    return _SEND_AND_WAIT.format(partition=partition)


def send_retry() -> list[dict[str, Any]]:
    """The ``Retry`` of a Task that sends to SQS: throttling and 5xx only (a fresh list).

    The transient names get the full backoff; SQS's unclassified errors a brief one
    (:data:`SQS_UNCLASSIFIED_ERRORS`).
    """
    return [
        _retrier(SQS_TRANSIENT_ERRORS),
        _retrier(SQS_UNCLASSIFIED_ERRORS, max_attempts=UNCLASSIFIED_MAX_ATTEMPTS),
    ]


def dynamodb_retry() -> list[dict[str, Any]]:
    """The ``Retry`` of a Task that calls DynamoDB: throttling and 5xx only (a fresh list)."""
    return [_retrier(DYNAMODB_TRANSIENT_ERRORS)]


def _retrier(errors: Sequence[str], max_attempts: int = RETRY_MAX_ATTEMPTS) -> dict[str, Any]:
    return {
        "ErrorEquals": list(errors),
        "IntervalSeconds": RETRY_INTERVAL_SECONDS,
        "BackoffRate": RETRY_BACKOFF_RATE,
        "MaxAttempts": max_attempts,
        "MaxDelaySeconds": RETRY_MAX_DELAY_SECONDS,
        "JitterStrategy": "FULL",
    }


def wait_state(
    queue_url: str,
    *,
    on_error: str | Mapping[str, str],
    payload_path: str = "$.payload",
    result_path: str | None = "$.dependency",
    error_path: str = "$.error",
    next_state: str | None = None,
    timeout_seconds: int | None = DEFAULT_TIMEOUT_SECONDS,
    timeout_seconds_path: str | None = None,
    waiter_payload_id_path: str | None = None,
    comment: str | None = None,
    partition: str = DEFAULT_PARTITION,
) -> dict[str, Any]:
    """The Task state that waits on one dependency payload.

    Args:
        queue_url: The tracker's process queue url (or a placeholder for it).
        on_error: Where each error goes: one state name for all of them, or a
            mapping from every name in :data:`WAIT_ERRORS` and
            :data:`CALLBACK_TIMEOUT` to a state (``"States.ALL"`` may be added).
        payload_path: JSONPath to the dependency: a cirrus payload or ``{"url": "s3://..."}``.
        result_path: Where the success output goes in the state (None: dropped).
        error_path: Where a caught error (``{"Error", "Cause"}``) goes.
        next_state: The state after a success (None: the Task ends the machine).
        timeout_seconds: The callback timeout (Step Functions raises ``States.Timeout``).
        timeout_seconds_path: JSONPath to the callback timeout, in place of ``timeout_seconds``.
        waiter_payload_id_path: JSONPath to the waiting payload's id, if it has one:
            the tracker then refuses waits that would close a cycle (``DependencyCycle``)
            and ``dependency-tracker graph`` names the parent by it.
        comment: The state's ``Comment``.
        partition: The AWS partition of the ``Resource`` ARN (``"${Partition}"``: a
            placeholder your deployment fills in).

    Returns:
        The state, a plain ASL dict.

    Raises:
        ValueError: ``on_error`` misses or misspells an error name, or the options clash.

    Example:
        >>> state = wait_state("${ProcessQueueUrl}", on_error={
        ...     "DependencyFailed": "Retry", "DependencyInvalid": "Reject",
        ...     "DependencyAborted": "Retry", "DependencyCycle": "Reject",
        ...     "States.Timeout": "TooSlow"}, next_state="Publish")
        >>> catch = state["Catch"]
        >>> [(c["ErrorEquals"], c["Next"]) for c in catch]  # doctest: +NORMALIZE_WHITESPACE
        [(['DependencyFailed', 'DependencyAborted'], 'Retry'),
         (['DependencyInvalid', 'DependencyCycle'], 'Reject'),
         (['States.Timeout'], 'TooSlow')]
    """
    callback: dict[str, Any] = {
        "task_token.$": "$$.Task.Token",
        "parent_execution.$": "$$.Execution.Id",
    }
    if waiter_payload_id_path is not None:
        callback["waiter_payload_id.$"] = _path(waiter_payload_id_path, "waiter_payload_id_path")
    body = {"payload.$": _path(payload_path, "payload_path"), "callback": callback}
    return _task(
        queue_url,
        body,
        errors=WAIT_ERRORS,
        on_error=on_error,
        result_path=result_path,
        error_path=error_path,
        next_state=next_state,
        timeout_seconds=timeout_seconds,
        timeout_seconds_path=timeout_seconds_path,
        comment=comment,
        partition=partition,
    )


def _parent_gone(value: str | None) -> dict[str, str]:
    """The join's ``on_parent_gone`` field, when given.

    Raises:
        ValueError: Not ``"keep"`` or ``"cancel"``.
    """
    if value is None:
        return {}
    if value not in ("keep", "cancel"):
        msg = f"on_parent_gone must be 'keep' or 'cancel', got {value!r}"
        raise ValueError(msg)
    return {"on_parent_gone": value}


def join_state(
    queue_url: str,
    *,
    on_error: str | Mapping[str, str],
    payloads_path: str | None = "$.payloads",
    payloads_url_path: str | None = None,
    quorum: int | None = None,
    quorum_path: str | None = None,
    join_id_path: str | None = None,
    result_path: str | None = "$.join",
    error_path: str = "$.error",
    next_state: str | None = None,
    timeout_seconds: int | None = DEFAULT_TIMEOUT_SECONDS,
    timeout_seconds_path: str | None = None,
    waiter_payload_id_path: str | None = None,
    deadline: int | str | None = None,
    deadline_path: str | None = None,
    min_succeeded: int | None = None,
    on_parent_gone: str | None = None,
    comment: str | None = None,
    partition: str = DEFAULT_PARTITION,
) -> dict[str, Any]:
    """The Task state that waits on k of n dependency payloads with one token.

    Args:
        queue_url: The tracker's process queue url (or a placeholder for it).
        on_error: Where each error goes: one state name for all, or a mapping from
            every name in :data:`JOIN_ERRORS` and :data:`CALLBACK_TIMEOUT` to a state.
        payloads_path: JSONPath to the list of members (payloads or ``{"url": ...}``).
        payloads_url_path: JSONPath to a manifest's ``s3://`` url (a JSON array or
            JSON Lines object of members), in place of ``payloads_path``; pass
            ``payloads_path=None`` with it.
        quorum: k, fixed (None and no ``quorum_path``: all of them; 1: either-or).
        quorum_path: JSONPath to k, in place of ``quorum`` (a null value means all).
        join_id_path: JSONPath to a join id of your own (e.g. from ``States.UUID()``),
            to find the join's row after a timeout; without it the join is keyed by
            the hash of the task token.
        result_path: Where the summary goes in the state (None: dropped).
        error_path: Where a caught error goes; a ``QuorumUnreachable`` cause is the summary.
        next_state: The state after a success (None: the Task ends the machine).
        timeout_seconds: The callback timeout.
        timeout_seconds_path: JSONPath to the callback timeout, in place of ``timeout_seconds``.
        waiter_payload_id_path: JSONPath to the waiting payload's id, if it has one.
        deadline: When the join is decided with what succeeded: an RFC 3339 time or
            whole seconds after the tracker registers it (keep the timeout past it).
            The state then also catches :data:`DEADLINE_ERROR`.
        deadline_path: JSONPath to the deadline, in place of ``deadline``.
        min_succeeded: Successes the join needs at its deadline (1 when not given).
        on_parent_gone: ``"cancel"``: when this execution ends (or its answer is
            refused, or an operator releases it) the members nobody else waits on are
            stopped; ``"keep"`` or None: they run on.
        comment: The state's ``Comment``.
        partition: The AWS partition of the ``Resource`` ARN.

    Returns:
        The state, a plain ASL dict.

    Raises:
        ValueError: ``on_error`` misses or misspells an error name, or the options clash.

    Example:
        >>> state = join_state("${ProcessQueueUrl}", quorum=1, on_error="NoWinner",
        ...                    result_path="$.race", next_state="UseWinner")
        >>> state["Parameters"]["MessageBody"]["join"]["quorum"]
        1
    """
    if (payloads_path is None) == (payloads_url_path is None):
        msg = "give exactly one of payloads_path and payloads_url_path"
        raise ValueError(msg)
    if quorum is not None and quorum_path is not None:
        msg = "give at most one of quorum and quorum_path"
        raise ValueError(msg)
    if quorum is not None and quorum < 1:
        msg = f"quorum must be at least 1, got {quorum}"
        raise ValueError(msg)
    join: dict[str, Any] = {
        "task_token.$": "$$.Task.Token",
        "parent_execution.$": "$$.Execution.Id",
    }
    if quorum is not None:
        join["quorum"] = quorum
    elif quorum_path is not None:
        join["quorum.$"] = _path(quorum_path, "quorum_path")
    if join_id_path is not None:
        join["join_id.$"] = _path(join_id_path, "join_id_path")
    if waiter_payload_id_path is not None:
        join["waiter_payload_id.$"] = _path(waiter_payload_id_path, "waiter_payload_id_path")
    with_deadline = _deadline(deadline, deadline_path, min_succeeded)
    join.update(with_deadline)
    join.update(_parent_gone(on_parent_gone))
    body: dict[str, Any] = {"join": join}
    if payloads_path is not None:
        body["payloads.$"] = _path(payloads_path, "payloads_path")
    else:
        body["payloads_url.$"] = _path(str(payloads_url_path), "payloads_url_path")
    return _task(
        queue_url,
        body,
        errors=JOIN_ERRORS + ((DEADLINE_ERROR,) if with_deadline else ()),
        on_error=on_error,
        result_path=result_path,
        error_path=error_path,
        next_state=next_state,
        timeout_seconds=timeout_seconds,
        timeout_seconds_path=timeout_seconds_path,
        comment=comment,
        partition=partition,
    )


def _deadline(
    deadline: int | str | None, deadline_path: str | None, min_succeeded: int | None
) -> dict[str, Any]:
    """The join fields of a deadline (none without one); the tracker checks the values."""
    if deadline is not None and deadline_path is not None:
        msg = "give at most one of deadline and deadline_path"
        raise ValueError(msg)
    fields: dict[str, Any] = {}
    if deadline is not None:
        fields["deadline"] = deadline
    elif deadline_path is not None:
        fields["deadline.$"] = _path(deadline_path, "deadline_path")
    if min_succeeded is not None:
        if not fields:
            msg = "min_succeeded needs a deadline (or deadline_path)"
            raise ValueError(msg)
        fields["min_succeeded"] = min_succeeded
    return fields


def catchers(
    errors: Sequence[str], on_error: str | Mapping[str, str], error_path: str = "$.error"
) -> list[dict[str, Any]]:
    """A ``Catch`` list covering ``errors`` and the callback timeout.

    Errors that go to the same state share one catcher, in the order of
    ``errors``; ``States.ALL`` (if mapped) comes last, as ASL requires.

    Raises:
        ValueError: A mapping misses one of the names, or names one that is not caught here.
    """
    names = [*errors, CALLBACK_TIMEOUT]
    if isinstance(on_error, str):
        return [{"ErrorEquals": names, "ResultPath": error_path, "Next": on_error}]
    missing = [name for name in names if name not in on_error]
    unknown = sorted(set(on_error) - {*names, CATCH_ALL})
    if missing or unknown:
        msg = f"on_error must map every error name: missing {missing}, unknown {unknown}"
        raise ValueError(msg)
    grouped: dict[str, list[str]] = {}
    for name in names:
        grouped.setdefault(on_error[name], []).append(name)
    result = [
        {"ErrorEquals": group, "ResultPath": error_path, "Next": target}
        for target, group in grouped.items()
    ]
    if CATCH_ALL in on_error:
        result.append(
            {"ErrorEquals": [CATCH_ALL], "ResultPath": error_path, "Next": on_error[CATCH_ALL]}
        )
    return result


def _task(
    queue_url: str,
    body: dict[str, Any],
    *,
    errors: Sequence[str],
    on_error: str | Mapping[str, str],
    result_path: str | None,
    error_path: str,
    next_state: str | None,
    timeout_seconds: int | None,
    timeout_seconds_path: str | None,
    comment: str | None,
    partition: str,
) -> dict[str, Any]:
    if (timeout_seconds is None) == (timeout_seconds_path is None):
        msg = "give exactly one of timeout_seconds and timeout_seconds_path"
        raise ValueError(msg)
    state: dict[str, Any] = {"Type": "Task"}
    if comment is not None:
        state["Comment"] = comment
    state["Resource"] = send_and_wait(partition)
    state["Parameters"] = {"QueueUrl": queue_url, "MessageBody": body}
    if timeout_seconds is not None:
        # Without a timeout a parent whose answer is lost would wait up to a year.
        if timeout_seconds < 1:
            msg = f"timeout_seconds must be at least 1, got {timeout_seconds}"
            raise ValueError(msg)
        state["TimeoutSeconds"] = timeout_seconds
    else:
        state["TimeoutSecondsPath"] = _path(str(timeout_seconds_path), "timeout_seconds_path")
    state["ResultPath"] = None if result_path is None else _path(result_path, "result_path")
    # Retried before caught: a throttled send is not a dependency's failure.
    state["Retry"] = send_retry()
    state["Catch"] = catchers(errors, on_error, _path(error_path, "error_path"))
    if next_state is None:
        state["End"] = True
    else:
        state["Next"] = next_state
    return state


def _path(value: str, name: str) -> str:
    """A reference path into the state (``$...``) or the context object (``$$...``)."""
    if not value.startswith("$"):
        msg = f"{name} must be a JSONPath starting with $, got {value!r}"
        raise ValueError(msg)
    return value
