"""The template deployed on moto: its handlers behind a recorder of their AWS calls, and pumps.

``deployed`` creates the stack's tables, queues, bucket and state machines as the template
names them, registers a ``Recorder`` on every client the handlers use, and feeds the handlers
with the local stack's pumps; in cirrus mode moto also holds cirrus's deployment
(``create_cirrus``). ``reset_handlers`` clears what the handlers cache (settings, flows,
clients) before and after a deployment, and between two functions' variables in cirrus mode.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from moto import mock_aws

from dependency_tracker import app
from dependency_tracker.core import clients, settings
from dependency_tracker.table import schema as table_schema
from dependency_tracker_local import pumpset
from dependency_tracker_local import template as template_reader
from dependency_tracker_local.cirrus import CirrusDeployment
from dependency_tracker_local.context import LocalContext
from dependency_tracker_local.iam import machines
from dependency_tracker_local.iam.enforce import IamModel
from dependency_tracker_local.iam.enforce import wanted as iam_wanted
from dependency_tracker_local.iam.policy import Decision, Request, evaluate
from dependency_tracker_local.iam.principal import acting_as
from dependency_tracker_local.iam.requests import Scope, requests_for
from tests.conftest import wait_until
from tests.unit.template_contract.cfn import ACCOUNT, REGION, Stack
from tests.unit.template_contract.functions import (
    CIRRUS_EVENTS_FUNCTION,
    FUNCTIONS,
    HANDLERS,
    POWERTOOLS_VARIABLES,
    environment,
    setting_variables,
)
from tests.unit.template_contract.step_functions import STATE_MACHINE, rendered_definition

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pytest

    from dependency_tracker_local.pumps import ExecutionPump, SqsPump, StreamPump


@dataclass
class Call:
    """One IAM authorization request of an AWS API call a handler made.

    A call AWS authorizes as several requests (a transaction's items, a ``CopyObject``)
    is recorded once per request; ``request`` is what the IAM model evaluates.
    """

    function: str
    action: str
    params: dict[str, Any]
    request: Request

    @property
    def resource(self) -> str:
        return self.request.resource


@dataclass
class Recorder:
    """Records the calls made through the handlers' cached clients, per function.

    Each handler runs as its function's role (``iam``, the local IAM model): a call the
    role does not allow fails at once, as on AWS, and is also kept in ``iam.denials``.
    """

    iam: IamModel
    # Whether handlers run as their roles (the IAM model on: unless DEPTRACK_IAM=0).
    enforcing: bool = True
    function: str | None = None
    calls: list[Call] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    record_fields: set[str] = field(default_factory=set)  # keys of the stream records' "dynamodb"
    # Given: called with a function's logical id before it runs, when the previous
    # invocation was another function's (cirrus mode: each runs with its own variables).
    switch: Callable[[str], None] | None = None
    _environment_of: str | None = None

    def hook(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        function = self.function or "<outside a handler>"
        scope = Scope(REGION, ACCOUNT, self.iam.token_owner)
        service = model.service_model.service_name
        requests = requests_for(service, model.name, params, scope)
        if not requests and "taskToken" in params:
            # A token no execution holds (a test's own, or its task closed): named later,
            # from the dependency table (``with_token_owners``).
            requests = [Request(f"states:{model.name}", "")]
        for request in requests:
            self.calls.append(Call(function, request.action, dict(params), request))

    def handler(self, stack: Stack, logical_id: str) -> Callable[..., Any]:
        name = stack.physical(logical_id).ref
        local_name = template_reader.functions(stack)[logical_id].name

        def invoke(event: dict[str, Any], _context: object = None) -> Any:
            if logical_id == "CallbackFunction":
                self.images.extend(r["dynamodb"].get("NewImage", {}) for r in event["Records"])
                self.record_fields.update(key for r in event["Records"] for key in r["dynamodb"])
            if self.switch is not None and self._environment_of != logical_id:
                self.switch(logical_id)
                self._environment_of = logical_id
            self.function = logical_id
            try:
                with acting_as(self.iam.function(local_name) if self.enforcing else None):
                    return HANDLERS[logical_id](event, LocalContext(function_name=name))
            finally:
                self.function = None

        return invoke


# The services whose clients get the recorder; a handler building any other
# client fails the test (clients.client's cache grows) instead of going unseen.
RECORDED_SERVICES = ("dynamodb", "stepfunctions", "s3", "sqs", "sns", "events", "lambda")


def reset_handlers(*, keep_clients: bool = False) -> None:
    """Forget the settings, the app the handlers built on them and (unless kept) their clients.

    ``keep_clients`` keeps the recorded clients: cirrus mode switches one function's
    variables for another's between invocations.
    """
    if not keep_clients:
        clients.client.cache_clear()
    settings.get_settings.cache_clear()
    # The handlers' composition root is built again from the environment on next use.
    app.use(None)


@dataclass
class Deployment:
    """The template's resources on moto, its handlers behind the recorder, and the pumps."""

    stack: Stack
    recorder: Recorder
    sfn: Any
    s3: Any
    dynamodb: Any
    sqs: Any
    pumps: list[SqsPump | ExecutionPump | StreamPump]
    cirrus: CirrusDeployment | None = None  # cirrus mode: cirrus's resources in moto
    session: Any = None

    def pump(self) -> int:
        """One round of every pump; how many events they delivered."""
        return sum(pump.pump_once() for pump in self.pumps)

    def settle(self) -> None:
        prefix = f"{self.stack.parameter('Prefix')}-"

        def running() -> bool:
            for machine in self.sfn.list_state_machines()["stateMachines"]:
                if (
                    machine["name"].startswith(prefix)
                    and self.sfn.list_executions(
                        stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
                    )["executions"]
                ):
                    return True
            return False

        def quiet() -> bool:
            moved = sum(pump.pump_once() for pump in self.pumps)
            waiting = [
                self.sqs.get_queue_attributes(
                    QueueUrl=self.stack.physical(name).ref,
                    AttributeNames=["ApproximateNumberOfMessages"],
                )["Attributes"]["ApproximateNumberOfMessages"]
                for name in ("ProcessQueue", "JoinQueue")
            ]
            return moved == 0 and not running() and waiting == ["0", "0"]

        # A deadline, not a pause: under a loaded machine (two workers beside a benchmark)
        # settling took more than 30 s once; a passing run returns as soon as all is quiet.
        wait_until(quiet, timeout=120)

    def parents_by_token(self) -> dict[str, str]:
        """Task token → ARN of the state machine whose execution holds it."""
        table = self.stack.physical("DependencyTable").ref
        parents = {}
        for item in self.dynamodb.scan(TableName=table)["Items"]:
            if "task_token" in item and "parent_execution" in item:
                execution = item["parent_execution"]["S"]
                machine = execution.replace(":execution:", ":stateMachine:").rpartition(":")[0]
                parents[item["task_token"]["S"]] = machine
                # A join's later sends by the same parent: their tokens are its own too.
                for token in item.get("retry_tokens", {}).get("M", {}).values():
                    parents[token["S"]] = machine
        return parents


def function_environments(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], None] | None:
    """Set the functions' variables; in cirrus mode, what sets one function's before it runs.

    In normal mode every function's variables are the same, and are set once here. In cirrus
    mode they differ (the cirrus variables reach the process, sweeper and cirrus-events
    functions only), so each handler runs with exactly its own function's variables.
    """
    cirrus_mode = stack.condition("CirrusMode")
    functions = (*FUNCTIONS, CIRRUS_EVENTS_FUNCTION) if cirrus_mode else FUNCTIONS
    environments = {function: environment(stack, function) for function in functions}
    for name in setting_variables() | POWERTOOLS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if not cirrus_mode:
        variables: dict[str, str] = {}
        for function in FUNCTIONS:
            for name, value in environments[function].items():
                assert variables.setdefault(name, value) == value, f"{name} differs"
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        return None

    def switch(function: str) -> None:
        for name in setting_variables() | POWERTOOLS_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in environments[function].items():
            monkeypatch.setenv(name, value)
        reset_handlers(keep_clients=True)

    return switch


@contextlib.contextmanager
def deployed(
    template: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    parameters: dict[str, str] | None = None,
) -> Iterator[Deployment]:
    """The stack ``parameters`` deploy, on moto, its handlers behind the recorder.

    Each handler runs with its function's variables (``function_environments``). In cirrus
    mode moto also holds cirrus's deployment, laid out as cirrus's CloudFormation lays it out
    (``CirrusDeployment``, no cirrus code), with the template's subscription on its topic.
    """
    stack = Stack(template, parameters or {})
    cirrus_mode = stack.condition("CirrusMode")
    switch = function_environments(stack, monkeypatch)
    reset_handlers()
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        session = clients.session()
        dynamodb: Any = session.client("dynamodb")
        sqs: Any = session.client("sqs")
        s3: Any = session.client("s3")
        sfn: Any = session.client("stepfunctions")
        stream_arn = table_schema.create_tables(
            dynamodb,
            state_table=stack.physical("StateTable").ref,
            dependency_table=stack.physical("DependencyTable").ref,
        )
        queue = stack.physical("ProcessQueue")
        assert sqs.create_queue(QueueName=queue.attributes["QueueName"])["QueueUrl"] == queue.ref
        joins = stack.physical("JoinQueue")
        assert sqs.create_queue(QueueName=joins.attributes["QueueName"])["QueueUrl"] == joins.ref
        reports = stack.physical("StatusReportQueue")
        assert (
            sqs.create_queue(QueueName=reports.attributes["QueueName"])["QueueUrl"] == reports.ref
        )
        s3.create_bucket(Bucket=stack.physical("PayloadBucket").ref)
        for logical_id in stack.of_type(STATE_MACHINE):
            properties = stack.resolved_properties(logical_id)
            created = sfn.create_state_machine(
                name=properties["Name"],
                definition=rendered_definition(stack, logical_id),
                roleArn=properties["Role"],
                type=properties.get("Type", "STANDARD"),
            )
            assert created["stateMachineArn"] == stack.physical(logical_id).ref
        cirrus = create_cirrus(stack, session) if cirrus_mode else None
        # The IAM model: each handler runs as its function's role, each state machine's
        # tasks as the state machine's.
        iam = IamModel.from_deployed(stack, str(stack.parameter("Prefix")))
        enforcing = iam_wanted()
        if enforcing:
            machines.register(iam)
        recorder = Recorder(iam, enforcing=enforcing, switch=switch)
        for service in RECORDED_SERVICES:
            clients.client(service).meta.events.register("before-parameter-build", recorder.hook)
        # The local stack's pumps, each on its function's handler behind the recorder.
        logical_ids = {f.name: f.logical_id for f in template_reader.functions(stack).values()}
        sources = pumpset.event_sources(stack)
        streams = session.client("dynamodbstreams")
        services = {"sqs": sqs, "stepfunctions": sfn, "dynamodbstreams": streams}
        built = pumpset.build_pumps(
            sources,
            handler_for=lambda function: recorder.handler(stack, logical_ids[function]),
            client=services.__getitem__,
            queues={
                source.queue: pumpset.QueueAddress(
                    stack.physical(source.queue).ref, stack.physical(source.queue).attributes["Arn"]
                )
                for source in sources.sqs.values()
            },
            stream_arns={"DependencyTable": stream_arn},
            prefix=str(stack.parameter("Prefix")),
            region=REGION,
            account=ACCOUNT,
            names=pumpset.CIRRUS_PUMP_NAMES if cirrus_mode else pumpset.PUMP_NAMES,
        )
        pumps: list[SqsPump | ExecutionPump | StreamPump] = list(built.values())
        try:
            yield Deployment(stack, recorder, sfn, s3, dynamodb, sqs, pumps, cirrus, session)
        finally:
            machines.unregister(iam)
    reset_handlers()


def create_cirrus(stack: Stack, session: Any) -> CirrusDeployment:
    """cirrus's deployment as the parameters name it, and the template's subscription to it."""
    cirrus = CirrusDeployment(
        prefix=str(stack.parameter("CirrusPrefix")), region=REGION, account=ACCOUNT
    )
    cirrus.create(session.client)
    variables = environment(stack, "ProcessFunction")
    assert variables[settings.ENV_CIRRUS_STATE_TABLE] == cirrus.outputs["CirrusStateTableName"]
    assert (
        variables[settings.ENV_CIRRUS_PROCESS_QUEUE_URL] == cirrus.outputs["CirrusProcessQueueUrl"]
    )
    assert (
        variables[settings.ENV_CIRRUS_PAYLOAD_BUCKET] == cirrus.outputs["CirrusPayloadBucketName"]
    )
    events = stack.physical("CirrusEventsQueue")
    sqs = session.client("sqs")
    assert sqs.create_queue(QueueName=events.attributes["QueueName"])["QueueUrl"] == events.ref
    subscription = stack.resolved_properties("CirrusWorkflowEventSubscription")
    assert subscription["TopicArn"] == cirrus.outputs["CirrusWorkflowEventTopicArn"]
    assert subscription["Endpoint"] == events.attributes["Arn"]
    session.client("sns").subscribe(
        TopicArn=subscription["TopicArn"],
        Protocol=subscription["Protocol"],
        Endpoint=subscription["Endpoint"],
        Attributes={
            "RawMessageDelivery": str(subscription["RawMessageDelivery"]).lower(),
            "FilterPolicyScope": subscription["FilterPolicyScope"],
            "FilterPolicy": json.dumps(subscription["FilterPolicy"]),
        },
    )
    return cirrus


def with_token_owners(calls: list[Call], parents: dict[str, str]) -> list[Call]:
    """``calls``, each answer to a token no execution held named by the parent it was for.

    ``parents`` maps a task token to the ARN of its parent's state machine (from
    ``Deployment.parents_by_token``); IAM authorizes ``SendTask*`` on that state machine.
    """
    return [
        replace(call, request=replace(call.request, resource=parents[call.params["taskToken"]]))
        if call.resource == "" and "taskToken" in call.params
        else call
        for call in calls
    ]


def denied_calls(stack: Stack, calls: list[Call]) -> list[tuple[str, str, str]]:
    """(function, action, resource) of every call its function's statements do not allow.

    Evaluated by the IAM model with the request's condition keys, after the fact: the
    runtime check already refused each one as it was made (``Recorder.iam.denials``).
    """
    return [
        (call.function, call.action, call.resource)
        for call in calls
        if evaluate(stack.statements(call.function), call.request) is not Decision.ALLOW
    ]
