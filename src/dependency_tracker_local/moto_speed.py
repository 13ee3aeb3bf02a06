"""moto's per-request work that gives the same answer every time, done once for local runs.

A profile of a 1,000-member join on the embedded stack (py-spy, GIL holder only)
put a third of the engine's time into work whose result never changes:

* **Step Functions definitions parsed at every execution start.** moto's
  interpreter parses the ASL of a state machine with ANTLR each time an
  execution starts (8 % of the run). The parsed program is a tree of
  components that hold no per-run state (every run's state lives in its own
  ``Environment`` and workers), so one parse per definition serves every run.
  The cache is also the lock that parsing needs: moto's parser keeps state on
  the class, and two parses at once corrupt it.
* **DynamoDB update expressions parsed at every request** (4 %). The parsed
  tree is deep-copied by moto's validator before it is touched, so a cached
  tree is never changed.
* **The list of a handler's methods rebuilt with ``inspect`` at every request** (2 %).
* **Data-plane DynamoDB responses serialized by walking botocore's shape model**
  (12 %). Their bodies are already DynamoDB JSON (``DynamoResult`` turned every
  value into its wire form), so ``json.dumps`` writes the same body; a result
  holding anything but plain JSON values falls back to moto's serializer, and
  ``tests/unit/local/test_moto_speed.py`` compares both on every kind of
  attribute value.

Semantics are moto's own: the same checks, the same errors, the same answers.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import json
import pickle
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import moto.core.responses as core_responses
from botocore.utils import parse_to_aware_datetime
from moto.core.responses import ActionResult, BaseResponse
from moto.core.serialize import TimestampSerializer
from moto.core.utils import get_service_model
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import Node  # type: ignore[attr-defined]
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

from dependency_tracker_local.patching import Patch, Switched

if TYPE_CHECKING:
    from collections.abc import Callable

# Operations whose output is items, keys, counts and consumed capacity only.
DATA_PLANE = frozenset(
    {
        "BatchGetItem",
        "BatchWriteItem",
        "DeleteItem",
        "GetItem",
        "PutItem",
        "Query",
        "Scan",
        "TransactGetItems",
        "TransactWriteItems",
        "UpdateItem",
    }
)
_DEFINITIONS_CACHED = 512
_EXPRESSIONS_CACHED = 1024

_NOT_PLAIN = object()
_TIMESTAMPS = TimestampSerializer(TimestampSerializer.TIMESTAMP_FORMAT_UNIX)
_parse_lock = threading.Lock()


def _cached_parse(original: Callable[[str], Any]) -> Callable[[str], Any]:
    parsed = functools.lru_cache(maxsize=_DEFINITIONS_CACHED)(original)

    @functools.wraps(original)
    def parse(definition: str) -> Any:
        with _parse_lock:
            return parsed(definition)

    return parse


def _cached_make(original: Callable[..., Any]) -> Callable[..., Any]:
    return functools.lru_cache(maxsize=_EXPRESSIONS_CACHED)(original)


def _cached_method_names(original: Callable[[type], list[str]]) -> Callable[[type], list[str]]:
    return functools.cache(original)


def _plain(value: Any) -> Any:  # noqa: PLR0911 (one return per JSON type)
    """``value`` as the JSON the shape serializer writes, or ``_NOT_PLAIN``.

    Binary values become base64 and timestamps epoch seconds, as the JSON protocols'
    serializer writes them (moto keeps binary attribute values as bytes).
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            plain = _plain(item)
            if plain is _NOT_PLAIN or not isinstance(key, str):
                return _NOT_PLAIN
            out[key] = plain
        return out
    if isinstance(value, list):
        items = [_plain(item) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime):
        return _TIMESTAMPS._timestamp_unixtimestamp(parse_to_aware_datetime(value))  # type: ignore[arg-type]
    return _NOT_PLAIN


@functools.cache
def _content_type(service: str) -> str:
    version = get_service_model(service).metadata.get("jsonVersion", "1.0")
    return f"application/x-amz-json-{version}"


@functools.cache
def _output_members(service: str, operation: str) -> frozenset[str]:
    shape = get_service_model(service).operation_model(operation).output_shape
    return frozenset(shape.members) if shape is not None else frozenset()


def quick_response(handler: BaseResponse, result: Any) -> tuple[int, dict[str, str], str] | None:
    """The response to ``result`` without the shape walk, or None where it does not apply.

    It applies to data-plane DynamoDB results and DynamoDB Streams' ``GetRecords``:
    their results are already in wire form, field names included.
    """
    if isinstance(handler, DynamoHandler):
        if handler._get_action() not in DATA_PLANE:
            return None
    elif not (
        isinstance(handler, DynamoDBStreamsHandler) and handler._get_action() == "GetRecords"
    ):
        return None
    if type(result) not in (ActionResult, DynamoResult) or not isinstance(result.result, dict):
        return None
    # The serializer writes only what the output shape names (moto adds legacy fields).
    members = _output_members(handler.boto3_service_name, handler._get_action())
    body = _plain({key: value for key, value in result.result.items() if key in members})
    if not isinstance(body, dict):
        return None
    headers = {"Content-Type": _content_type(handler.boto3_service_name)}
    headers.update(handler.response_headers)
    return 200, headers, json.dumps(body)


def _serialized(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def serialized(self: BaseResponse, action_result: Any) -> Any:
        quick = quick_response(self, action_result)
        if quick is not None:
            return quick
        return original(self, action_result)

    return serialized


def _tree_copies(original: Callable[..., Any]) -> Callable[..., Any]:
    def tree_copy(value: Any, memo: Any = None) -> Any:
        """``copy.deepcopy`` of an expression tree, by a pickle round trip (3 times faster)."""
        if isinstance(value, Node):
            with contextlib.suppress(pickle.PicklingError, TypeError, AttributeError):
                return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))  # noqa: S301 (our own bytes)
        return original(value, memo)

    return tree_copy


def _cached_lexing(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.lru_cache(maxsize=_EXPRESSIONS_CACHED)
    def lexed(expression: str) -> tuple[Any, ...]:
        # The lexer reads only the expression's text.
        return tuple(original(ConditionExpressionParser(expression, {}, {})))

    def lex_condition_expression(parser: ConditionExpressionParser) -> deque[Any]:
        # Lexed nodes are named tuples of strings: a cached tuple of them is never changed.
        return deque(lexed(parser.condition_expression))

    return lex_condition_expression


def _patches() -> list[Patch]:
    return [
        (validators, "deepcopy", _tree_copies),
        (ConditionExpressionParser, "_lex_condition_expression", _cached_lexing),
        (AmazonStateLanguageParser, "parse", _cached_parse),
        (UpdateExpressionParser, "make", _cached_make),
        (core_responses, "method_names_from_class", _cached_method_names),
        (BaseResponse, "serialized", _serialized),
    ]


_SWITCHED = Switched(_patches)


def quick_requests() -> contextlib.AbstractContextManager[None]:
    """Within the block, moto does each request's fixed work once. Re-entrant."""
    return _SWITCHED.active()


__all__ = ["DATA_PLANE", "quick_requests", "quick_response"]
