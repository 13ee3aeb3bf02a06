"""The strict layer: moto refuses what AWS would refuse, with AWS's error codes and texts.

moto accepts much that AWS turns down (a 300 KB ``SendTaskSuccess`` output, a
string set that grows an item past 400 KB, a 2 KB key on ``GetItem``, an
execution name with a slash), so code that passes on moto can fail in
production. While :func:`strict_limits` is active, every request moto serves in
this process, in-process (``mock_aws``) or through the server
(``EmbeddedStack(port=...)``, ``dependency-tracker serve``), is checked against
the quotas in :mod:`dependency_tracker.core.limits` first, and refused the way AWS
refuses it. ``EmbeddedStack`` turns it on unless given ``strict=False``.

It also refuses strings with no UTF-8 form (a lone surrogate) with AWS's client
errors, where moto crashed with ``UnicodeEncodeError``, and answers task-token
callbacks as AWS does (:mod:`dependency_tracker_local.task_tokens`: the cause
of ``SendTaskFailure`` is kept, an answer about a closed task is refused with
``TaskTimedOut``) and ``StopExecution`` (:mod:`dependency_tracker_local.stop_execution`:
the execution is ``ABORTED`` at once, with the request's error and cause).

The checks wrap moto's request handlers (one per API action) and, for item
sizes after an update, moto's update-expression executor, so they see exactly
what moto is asked to do. ``docs/local.md`` lists each limit, where AWS
documents it and whether moto enforces it without this layer.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
import threading
from typing import TYPE_CHECKING, Any

from moto.dynamodb.exceptions import ItemSizeTooLarge, MockValidationException
from moto.dynamodb.models.dynamo_type import LimitedSizeDict
from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
from moto.dynamodb.responses import DynamoHandler
from moto.sqs.exceptions import InvalidParameterValue, SQSException
from moto.sqs.responses import SQSResponse
from moto.stepfunctions.exceptions import InvalidExecutionInput, InvalidName, ValidationException
from moto.stepfunctions.parser.api import InvalidOutput
from moto.stepfunctions.responses import StepFunctionResponse

from dependency_tracker.core import limits
from dependency_tracker_local import express, stop_execution, task_tokens

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# AWS's texts (ValidationException unless said otherwise).
HASH_KEY_TOO_LONG = (
    "One or more parameter values were invalid: Size of hashkey has exceeded the maximum "
    f"size limit of {limits.DDB_MAX_PARTITION_KEY_BYTES} bytes"
)
RANGE_KEY_TOO_LONG = (
    "One or more parameter values were invalid: Aggregated size of all range keys has "
    f"exceeded the size limit of {limits.DDB_MAX_SORT_KEY_BYTES} bytes"
)
ITEM_TOO_LARGE = "Item size has exceeded the maximum allowed size"
UPDATE_TOO_LARGE = "Item size to update has exceeded the maximum allowed size"
# A string with no UTF-8 form (a lone UTF-16 surrogate such as "\ud800", which JSON
# can escape): AWS documents no text for it, so these are the layer's own words.
DDB_NOT_UTF8 = (
    "One or more parameter values were invalid: a string is not valid UTF-8 "
    "(it holds an unpaired surrogate)"
)
SQS_ALLOWED = "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"

# StartExecution: "A name must not contain: white space, brackets < > { } [ ], wildcard
# characters ? *, special characters " # % \ ^ | ~ ` $ & , ; : /, control characters
# (U+0000-001F, U+007F-009F)".
_BAD_NAME = re.compile(r"[\s<>{}\[\]?*\"#%\\^|~`$&,;:/\x00-\x1f\x7f-\x9f]")

_lock = threading.Lock()
_active = 0
_installed = False


@contextlib.contextmanager
def strict_limits() -> Iterator[None]:
    """Make moto, in this process, refuse what AWS refuses while the block runs.

    Re-entrant: nested blocks (a ``EmbeddedStack`` inside a test that is already
    strict) keep the layer on until the outermost one ends.

    Example:
        >>> with strict_limits(), mock_aws():  # doctest: +SKIP
        ...     sfn.send_task_success(taskToken=token, output="x" * 300_000)  # ValidationException
    """
    global _active  # noqa: PLW0603 - one switch for the process, like moto's own patches
    with _lock:
        _install()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1


def wanted() -> bool:
    """Whether the stack and the tests turn the layer on: yes unless ``DEPTRACK_STRICT=0``.

    The switch exists to measure the layer's cost, and to reproduce moto's
    own behaviour when a difference is in doubt.
    """
    return os.environ.get("DEPTRACK_STRICT", "1") != "0"


def is_active() -> bool:
    """True while some :func:`strict_limits` block runs."""
    return _active > 0


# ---------------------------------------------------------------------- text AWS cannot read


class InvalidMessageContents(SQSException):
    """SQS's refusal of a character outside the allowed set (moto has no such error)."""

    code = "InvalidMessageContents"


def _first_unencodable(value: Any) -> str | None:
    """The first character of ``value`` (any JSON) with no UTF-8 form, or None.

    Counting a size encodes to UTF-8, and moto encodes keys and bodies itself:
    such a character made both raise ``UnicodeEncodeError`` (HTTP 500 through
    the server), where AWS answers with a client error.
    """
    text = json.dumps(value, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


# ---------------------------------------------------------------------- DynamoDB


def _key_schema(handler: DynamoHandler, table_name: str) -> tuple[str, str | None]:
    table = handler.dynamodb_backend.get_table(table_name)
    return table.hash_key_attr, table.range_key_attr


def _check_key(handler: DynamoHandler, table_name: str, key: dict[str, Any]) -> None:
    """Partition key <= 2,048 bytes, sort key <= 1,024 bytes (any request naming a key)."""
    hash_name, range_name = _key_schema(handler, table_name)
    if hash_name in key and limits.attribute_value_size(key[hash_name]) > (
        limits.DDB_MAX_PARTITION_KEY_BYTES
    ):
        raise MockValidationException(HASH_KEY_TOO_LONG)
    if (
        range_name is not None
        and range_name in key
        and limits.attribute_value_size(key[range_name]) > limits.DDB_MAX_SORT_KEY_BYTES
    ):
        raise MockValidationException(RANGE_KEY_TOO_LONG)


def _check_put(handler: DynamoHandler, table_name: str, item: dict[str, Any]) -> None:
    _check_key(handler, table_name, item)
    if limits.item_size(item) > limits.DDB_MAX_ITEM_BYTES:
        raise MockValidationException(ITEM_TOO_LARGE)


def _ddb_readable(handler: DynamoHandler) -> None:
    """Every name and value of the request has a UTF-8 form."""
    if _first_unencodable(handler.body) is not None:
        raise MockValidationException(DDB_NOT_UTF8)


def _readable_first(check: Callable[[DynamoHandler], None]) -> Callable[[DynamoHandler], None]:
    @functools.wraps(check)
    def checked(handler: DynamoHandler) -> None:
        _ddb_readable(handler)
        check(handler)

    return checked


def _ddb_put_item(handler: DynamoHandler) -> None:
    _check_put(handler, handler.body["TableName"], handler.body["Item"])


def _ddb_keyed(handler: DynamoHandler) -> None:
    _check_key(handler, handler.body["TableName"], handler.body["Key"])


def _ddb_query(handler: DynamoHandler) -> None:
    """The values a key condition compares the keys with obey the key limits too."""
    body = handler.body
    condition = body.get("KeyConditionExpression")
    if not condition:
        return
    names = body.get("ExpressionAttributeNames") or {}
    values = body.get("ExpressionAttributeValues") or {}
    hash_name, _ = _key_schema(handler, body["TableName"])
    hash_placeholders = set()
    for match in re.finditer(r"(#?[\w.]+)\s*=\s*(:\w+)|(:\w+)\s*=\s*(#?[\w.]+)", condition):
        attribute = match.group(1) or match.group(4)
        if names.get(attribute, attribute) == hash_name:
            hash_placeholders.add(match.group(2) or match.group(3))
    for placeholder in set(re.findall(r":\w+", condition)):
        value = values.get(placeholder)
        if value is None:
            continue
        if placeholder in hash_placeholders:
            if limits.attribute_value_size(value) > limits.DDB_MAX_PARTITION_KEY_BYTES:
                raise MockValidationException(HASH_KEY_TOO_LONG)
        elif limits.attribute_value_size(value) > limits.DDB_MAX_SORT_KEY_BYTES:
            raise MockValidationException(RANGE_KEY_TOO_LONG)


def _ddb_batch_write(handler: DynamoHandler) -> None:
    requests = handler.body.get("RequestItems") or {}
    count = sum(len(writes) for writes in requests.values())
    if count > limits.DDB_MAX_BATCH_WRITE_ITEMS:
        raise MockValidationException(
            "1 validation error detected: Value at 'requestItems' failed to satisfy "
            "constraint: Map value must satisfy constraint: [Member must have length less "
            f"than or equal to {limits.DDB_MAX_BATCH_WRITE_ITEMS}, Member must have length "
            "greater than or equal to 1]"
        )
    for table_name, writes in requests.items():
        for write in writes:
            if "PutRequest" in write:
                _check_put(handler, table_name, write["PutRequest"]["Item"])
            elif "DeleteRequest" in write:
                _check_key(handler, table_name, write["DeleteRequest"]["Key"])


def _ddb_batch_get(handler: DynamoHandler) -> None:
    requests = handler.body.get("RequestItems") or {}
    if sum(len(table["Keys"]) for table in requests.values()) > limits.DDB_MAX_BATCH_GET_KEYS:
        # moto checks each table's list; AWS counts the keys of the whole request.
        raise MockValidationException("Too many items requested for the BatchGetItem call")
    for table_name, table in requests.items():
        for key in table["Keys"]:
            _check_key(handler, table_name, key)


def _ddb_transact_write(handler: DynamoHandler) -> None:
    for action in handler.body.get("TransactItems") or []:
        ((kind, request),) = action.items()
        if kind == "Put":
            _check_put(handler, request["TableName"], request["Item"])
        else:  # Update, Delete, ConditionCheck: the item size after an Update is checked
            # by the update executor, like UpdateItem's.
            _check_key(handler, request["TableName"], request["Key"])


def _ddb_transact_get(handler: DynamoHandler) -> None:
    for action in handler.body.get("TransactItems") or []:
        request = action["Get"]
        _check_key(handler, request["TableName"], request["Key"])


def _ddb_update_item(handler: DynamoHandler, original: Callable[[Any], Any]) -> Any:
    """Keys, then the item as the update leaves it (checked by the executor).

    moto creates a missing item with its keys before it applies the update; an
    update refused for size must not leave that item behind.
    """
    body = handler.body
    _ddb_readable(handler)
    _check_key(handler, body["TableName"], body["Key"])
    table = handler.dynamodb_backend.get_table(body["TableName"])
    existed = handler.dynamodb_backend.get_item(body["TableName"], body["Key"]) is not None
    try:
        return original(handler)
    except MockValidationException as exc:
        if not existed and exc.message in (UPDATE_TOO_LARGE, ITEM_TOO_LARGE):
            with contextlib.suppress(Exception):
                table.delete_item(*_key_values(table, body["Key"]))
        raise


def _key_values(table: Any, key: dict[str, Any]) -> tuple[Any, Any]:
    from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: PLC0415 - moto internal

    hash_value = DynamoType(key[table.hash_key_attr])
    range_key = table.range_key_attr
    return hash_value, DynamoType(key[range_key]) if range_key in key else None


def _executing_update(original: Callable[..., Any]) -> Callable[..., Any]:
    """Apply an update expression; undo it and refuse when the item outgrows 400 KB.

    moto checks sizes only when an attribute is assigned at the top level (and
    with its own arithmetic): ``ADD`` to a set or ``SET a.b`` grows an item
    past the limit unnoticed. moto turns the raised ``ItemSizeTooLarge`` into
    AWS's "Item size to update has exceeded the maximum allowed size".
    """

    @functools.wraps(original)
    def execute(executor: Any, node: Any = None) -> Any:
        if node is not None or not is_active():  # the executor recurses over the tree
            return original(executor, node)
        item = executor.item
        saved = copy.deepcopy(item.attrs)
        result = original(executor)
        if limits.item_size(item.to_json()["Attributes"]) > limits.DDB_MAX_ITEM_BYTES:
            item.attrs = saved
            raise ItemSizeTooLarge
        return result

    return execute


def _aws_sized(original: Callable[..., None]) -> Callable[..., None]:
    """The item check of moto itself (from 405,000 bytes, its own count) yields to AWS's.

    moto refuses items between 405,000 and 409,600 bytes that AWS stores; while
    the layer is on, the checks above count sizes as AWS does instead.
    """

    @functools.wraps(original)
    def setitem(attributes: dict[str, Any], name: str, value: Any) -> None:
        if is_active():
            dict.__setitem__(attributes, name, value)
        else:
            original(attributes, name, value)

    return setitem


# ---------------------------------------------------------------------- Step Functions


def _too_long(field: str, maximum: int) -> ValidationException:
    # The fields checked here are sensitive in the API model: AWS leaves the value out.
    return ValidationException(
        f"1 validation error detected: Value at '{field}' failed to satisfy constraint: "
        f"Member must have length less than or equal to {maximum}"
    )


def _sfn_start(handler: StepFunctionResponse) -> None:
    name = handler._get_param("name")
    if name is not None and _first_unencodable(name) is not None:
        raise InvalidName(f"Invalid Name: '{name.encode('utf-8', 'backslashreplace').decode()}'")
    text = handler._get_param("input")
    if text is not None and _first_unencodable(text) is not None:
        raise InvalidExecutionInput("Invalid State Machine Execution Input: 'not valid UTF-8'")
    if name is not None:
        if len(name) > limits.SFN_MAX_EXECUTION_NAME:
            raise ValidationException(
                f"1 validation error detected: Value '{name}' at 'name' failed to satisfy "
                "constraint: Member must have length less than or equal to "
                f"{limits.SFN_MAX_EXECUTION_NAME}"
            )
        if not name or _BAD_NAME.search(name):
            raise InvalidName(f"Invalid Name: '{name}'")
    if text is not None and limits.utf8_size(text) > limits.SFN_MAX_PAYLOAD_BYTES:
        raise _too_long("input", limits.SFN_MAX_PAYLOAD_BYTES)


def _sfn_task_success(handler: StepFunctionResponse) -> None:
    output = handler._get_param("output")
    if output is not None and _first_unencodable(output) is not None:
        raise InvalidOutput("Invalid Output: 'not valid UTF-8'", "InvalidOutput")
    if output is not None and limits.utf8_size(output) > limits.SFN_MAX_PAYLOAD_BYTES:
        raise _too_long("output", limits.SFN_MAX_PAYLOAD_BYTES)


def _sfn_task_failure(handler: StepFunctionResponse) -> None:
    error = handler._get_param("error")
    if error is not None and len(error) > limits.SFN_MAX_ERROR_CHARS:
        raise _too_long("error", limits.SFN_MAX_ERROR_CHARS)
    cause = handler._get_param("cause")
    if cause is not None and len(cause) > limits.SFN_MAX_CAUSE_CHARS:
        raise _too_long("cause", limits.SFN_MAX_CAUSE_CHARS)


# ---------------------------------------------------------------------- SQS


def _sqs_message_size(body: str, attributes: dict[str, Any] | None) -> int:
    """Bytes SQS counts: the body and each attribute's name, type and value, in UTF-8."""
    size = limits.utf8_size(body)
    for name, attribute in (attributes or {}).items():
        size += limits.utf8_size(name) + limits.utf8_size(attribute.get("DataType", ""))
        if "StringValue" in attribute:
            size += limits.utf8_size(attribute["StringValue"])
        if "BinaryValue" in attribute:
            value = attribute["BinaryValue"]
            size += len(value) if isinstance(value, bytes) else limits.utf8_size(value)
    return size


def _sqs_readable(body: str, attributes: dict[str, Any] | None) -> None:
    """SQS refuses characters outside XML's set, an unpaired surrogate among them."""
    bad = _first_unencodable([body, attributes])
    if bad is not None:
        raise InvalidMessageContents(
            f"Invalid binary character '#x{ord(bad):X}' was found in the message body, "
            f"the set of allowed characters is {SQS_ALLOWED}"
        )


def _queue_maximum(handler: SQSResponse) -> int:
    queue = handler.sqs_backend.get_queue(handler._get_queue_name())
    return int(getattr(queue, "maximum_message_size"))  # noqa: B009 - set from attributes


def _sqs_send(handler: SQSResponse) -> None:
    # moto compares len(body) in characters and leaves attributes out; AWS counts bytes.
    maximum = _queue_maximum(handler)
    body, attributes = (
        handler._get_param("MessageBody") or "",
        handler._get_param("MessageAttributes"),
    )
    _sqs_readable(body, attributes)
    size = _sqs_message_size(body, attributes)
    if size > maximum:
        raise InvalidParameterValue(
            f"One or more parameters are invalid. Reason: Message must be shorter than "
            f"{maximum} bytes."
        )


def _sqs_send_batch(handler: SQSResponse) -> None:
    maximum = _queue_maximum(handler)
    for entry in handler._get_param("Entries") or []:
        _sqs_readable(entry.get("MessageBody") or "", entry.get("MessageAttributes"))
        size = _sqs_message_size(entry.get("MessageBody") or "", entry.get("MessageAttributes"))
        if size > maximum:
            raise InvalidParameterValue(
                f"One or more parameters are invalid. Reason: Message must be shorter than "
                f"{maximum} bytes."
            )


# ---------------------------------------------------------------------- installation

_CHECKS: dict[type, dict[str, Callable[[Any], None]]] = {
    DynamoHandler: {
        "put_item": _readable_first(_ddb_put_item),
        "get_item": _readable_first(_ddb_keyed),
        "delete_item": _readable_first(_ddb_keyed),
        "query": _readable_first(_ddb_query),
        "scan": _ddb_readable,
        "batch_write_item": _readable_first(_ddb_batch_write),
        "batch_get_item": _readable_first(_ddb_batch_get),
        "transact_write_items": _readable_first(_ddb_transact_write),
        "transact_get_items": _readable_first(_ddb_transact_get),
    },
    StepFunctionResponse: {
        "start_execution": _sfn_start,
        "send_task_success": _sfn_task_success,
        "send_task_failure": _sfn_task_failure,
    },
    SQSResponse: {
        "send_message": _sqs_send,
        "send_message_batch": _sqs_send_batch,
    },
}


def _checked(original: Callable[[Any], Any], check: Callable[[Any], None]) -> Callable[[Any], Any]:
    @functools.wraps(original)
    def action(handler: Any) -> Any:
        if is_active():
            check(handler)
        return original(handler)

    return action


def _around(
    original: Callable[[Any], Any], wrapper: Callable[[Any, Callable[[Any], Any]], Any]
) -> Callable[[Any], Any]:
    @functools.wraps(original)
    def action(handler: Any) -> Any:
        if is_active():
            return wrapper(handler, original)
        return original(handler)

    return action


def _install() -> None:
    """Wrap moto's handlers once per process; the wrappers do nothing while inactive."""
    global _installed  # noqa: PLW0603
    if _installed:
        return
    for handler_class, checks in _CHECKS.items():
        for action, check in checks.items():
            setattr(handler_class, action, _checked(getattr(handler_class, action), check))
    DynamoHandler.update_item = _around(  # type: ignore[method-assign, assignment]
        DynamoHandler.update_item, _ddb_update_item
    )
    StepFunctionResponse.start_execution = _around(  # type: ignore[method-assign, assignment]
        StepFunctionResponse.start_execution, express.start_execution
    )
    express.install()
    task_tokens.install(is_active)
    stop_execution.install(is_active)
    LimitedSizeDict.__setitem__ = _aws_sized(LimitedSizeDict.__setitem__)  # type: ignore[method-assign]
    UpdateExpressionExecutor.execute = _executing_update(  # type: ignore[method-assign]
        UpdateExpressionExecutor.execute
    )
    _installed = True
