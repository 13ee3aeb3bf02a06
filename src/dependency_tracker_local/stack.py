"""``EmbeddedStack``: the whole tracker on one machine, on moto, with real state machines.

``LocalStack`` is the same class under its first name, kept because programs outside the
project use it (the public contract); it has nothing to do with the LocalStack product.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import warnings
from typing import IO, TYPE_CHECKING, Any, Self

from aws_lambda_powertools.metrics.provider.cloudwatch_emf import cloudwatch as emf_module
from botocore import UNSIGNED
from botocore.config import Config
from moto import mock_aws

from dependency_tracker import app as app_module
from dependency_tracker.app import App
from dependency_tracker.cirrus.models import subscription_attributes
from dependency_tracker.core import clients, settings
from dependency_tracker.core.clients import config as client_config
from dependency_tracker.core.observability import logger
from dependency_tracker.core.settings import Settings
from dependency_tracker.handlers import callback, cirrus_events, process, sweeper, update_state
from dependency_tracker.table.schema import create_tables
from dependency_tracker_local import definitions, pumpset
from dependency_tracker_local import platform as platform_model
from dependency_tracker_local import rates as rate_model
from dependency_tracker_local import template as template_reader
from dependency_tracker_local.iam import enforce as iam_model
from dependency_tracker_local.iam import machines as iam_machines
from dependency_tracker_local.iam import roles as iam_roles
from dependency_tracker_local.moto_costs import aws_like_costs
from dependency_tracker_local.pumps import ExecutionPump, Pump, SchedulePump, SqsPump, StreamPump
from dependency_tracker_local.queues import queue_arn
from dependency_tracker_local.runner import Invoker, PumpRunner, ThreadRoutedStdout
from dependency_tracker_local.server import MotoServer
from dependency_tracker_local.sfn_sync import sync_executions
from dependency_tracker_local.strict import strict_limits
from dependency_tracker_local.strict import wanted as strict_wanted
from dependency_tracker_local.timeouts import FunctionTimeouts

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from types import TracebackType

    from dependency_tracker_local.cirrus import CirrusDeployment

ACCOUNT = "123456789012"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/deptrack-local"
_UNSIGNED = Config(signature_version=UNSIGNED)
_MOTO_SFN_LOGGER = logging.getLogger("moto.stepfunctions.parser")
# The IAM model's denials: with the handlers' logs (serve's log file), beside the refused call.
_IAM_LOGGER = logging.getLogger(iam_model.__name__)
# A handler invocation still running when the stack stops (a large join) may finish first.
STOP_TIMEOUT_SECONDS = 120.0
# The sweeper's schedule, as the template's (rate(5 minutes)).
DEFAULT_SWEEPER_INTERVAL_SECONDS = 300.0
# The deadlines schedule (rate(1 minute) in the template): every second here, so a join's
# deadline is decided within a few seconds on the embedded stack.
DEFAULT_DEADLINES_INTERVAL_SECONDS = 1.0
# A queue's outputs are its logical id + Url (+ Arn for a queue a trigger reads), but the
# cirrus-events queue's kept their first names, which programs and tests read.
_QUEUE_OUTPUTS = {"CirrusEventsQueue": "CirrusEventQueue", "CirrusEventsDlq": "CirrusEventDlq"}


class EmbeddedStack:
    """Context manager running the embedded stack and its pumps (also named ``LocalStack``).

    On entry it starts moto in-process (state machines really execute), creates
    the queues its pumps read with their DLQs and redrive policies, both tables
    (stream on the dependency table) and the payload bucket, as ``template.yaml``
    declares them for ``prefix`` (:mod:`dependency_tracker_local.template`: names,
    ``MaximumMessageSize``, ``MessageRetentionPeriod``, which DLQ each queue
    redrives to, which queue each trigger reads), registers every definition in
    ``stepfunctions/`` as ``{prefix}-{name}``, points the handlers' settings at
    these resources, and starts the pumps. On exit it stops the pumps and moto
    and restores the environment.

    Two of the template's values are overridden, so a test sees a failed message
    again within seconds: ``visibility_timeout`` (2 s; the template's queues say
    360 to 720 s) and ``max_receive_count`` (3; the template's
    ``ProcessMaxReceiveCount`` is 10). Outside a checkout (the
    package installed without ``template.yaml``) the stack takes the same
    resources from :func:`~dependency_tracker_local.template.builtin_resources`.

    With ``port`` (0 picks a free one) moto runs as a server on ``host``
    instead, so other processes can use the stack with any AWS SDK and
    ``endpoint_url``: ``outputs`` then also holds ``EndpointUrl``, and the
    handlers and ``client()`` go through that endpoint.

    With ``strict`` (the default, unless ``DEPTRACK_STRICT=0``) moto refuses
    what AWS would refuse (item and key sizes, batch sizes, execution input and
    task output sizes, execution names, message sizes; see
    :mod:`dependency_tracker_local.strict` and the limits table in
    ``docs/local.md``), for the stack's handlers and for any other code in the
    process, such as a user's own pipeline tests. Queues get the template's
    ``MaximumMessageSize`` (256 KiB).

    With ``platform`` (the default, unless ``DEPTRACK_PLATFORM=0``) the stack
    also models Lambda's own guards (:mod:`dependency_tracker_local.platform`,
    ``docs/local.md``): start refuses a ``template.yaml`` whose reserved
    concurrency an account of ``account_concurrency`` (a new account's 10 by
    default) cannot grant, or whose SQS trigger's maximum concurrency is out of
    range; the process pump holds that maximum concurrency; and a record whose
    chain of events would invoke the same function a 17th time is not delivered
    (recursive-loop detection, each function's ``RecursiveLoop`` as the
    template sets it): it reaches its queue's DLQ, and ``platform.stopped``
    lists it. Each pumped invocation is bounded by its function's ``Timeout``
    (``function_timeouts`` overrides it per function, e.g. ``{"process": 2.0}``):
    one that runs past it is failed as Lambda fails it (an SQS batch returns
    whole after the visibility timeout) and ``platform.timed_out`` lists it.
    While the stack runs, moto throttles Step Functions' ``StartExecution`` and
    ``SendTask*`` calls with AWS's token buckets (:mod:`~dependency_tracker_local.rates`),
    divided by ``rate_scale`` (default ``DEPTRACK_RATE_SCALE``, else 1: AWS's
    figures); ``rates`` holds the buckets' figures and counts.

    The sweeper runs every ``sweeper_interval`` seconds (None: never on its
    own) and once on demand with :meth:`sweep_once`; ``sweeper_min_age_seconds``
    overrides how long it leaves a terminal row to the stream (the deployed
    default, 15 minutes, is long for a test). Its deadlines schedule (the
    template's minute) runs every ``deadlines_interval`` seconds (None: never).

    With ``iam`` (the default, unless ``DEPTRACK_IAM=0``) each handler the stack
    runs calls AWS as its function's role, and each state machine's tasks as the
    state machine's, as ``template.yaml`` grants them
    (:mod:`dependency_tracker_local.iam`, ``docs/local.md``, "The IAM model"): a call
    the role does not allow fails with AWS's ``AccessDenied`` error and ``iam.denials``
    lists it. ``parameters`` sets more of the template's parameters (default: the JSON
    object in ``DEPTRACK_STACK_PARAMETERS``), such as ``ExtraParentStateMachineArns``
    for parents of your own, which the callback function may answer only when named
    there, as on AWS.

    With ``cirrus`` (a cirrus-geo prefix, or True for ``cirrus``) the stack runs
    in cirrus mode (docs/cirrus.md) beside a cirrus-geo v2 deployment laid out
    as cirrus's CloudFormation lays it out, whose own ``process`` and
    ``update_state`` Lambdas (the installed ``cirrus-geo`` package; Python 3.12+)
    run on its queue and its state machines' status changes. ``cirrus`` is then
    the :class:`~dependency_tracker_local.cirrus.CirrusDeployment`, and
    ``outputs`` also holds its ``Cirrus*`` names and ``CirrusEventQueueUrl``.

    Example:
        >>> with EmbeddedStack(prefix="deptrack") as stack:  # doctest: +SKIP
        ...     stack.client("sqs").send_message(QueueUrl=stack.outputs["ProcessQueueUrl"], ...)
    """

    def __init__(
        self,
        prefix: str = settings.DEFAULT_PREFIX,
        *,
        region: str = "us-east-1",
        definitions_dir: Path | None = None,
        poll_interval: float = 0.05,
        visibility_timeout: int = 2,
        max_receive_count: int = 3,
        default_timeout_seconds: int = 300,
        default_max_concurrency: int = 40,
        log_level: str | None = None,
        sink: IO[str] | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        strict: bool | None = None,
        platform: bool | None = None,
        account_concurrency: int = platform_model.NEW_ACCOUNT_CONCURRENCY,
        rate_scale: float | None = None,
        function_timeouts: dict[str, float] | None = None,
        sweeper_interval: float | None = DEFAULT_SWEEPER_INTERVAL_SECONDS,
        sweeper_min_age_seconds: int | None = None,
        deadlines_interval: float | None = DEFAULT_DEADLINES_INTERVAL_SECONDS,
        cirrus: bool | str = False,
        iam: bool | None = None,
        parameters: Mapping[str, str] | None = None,
    ) -> None:
        self.prefix = prefix
        self._cirrus_prefix = (
            None if cirrus is False else ("cirrus" if cirrus is True else str(cirrus))
        )
        self.cirrus: CirrusDeployment | None = None
        self.region = region
        self._definitions_dir = definitions_dir
        self._poll_interval = poll_interval
        self._visibility_timeout = visibility_timeout
        self._max_receive_count = max_receive_count
        self._defaults = {
            "DefaultTimeoutSeconds": str(default_timeout_seconds),
            "DefaultMaxConcurrency": str(default_max_concurrency),
        }
        self._log_level = log_level
        self._sink = sink
        self._mock: Any = None
        self._port = port
        self._host = host
        self.strict = strict_wanted() if strict is None else strict
        self._platform_wanted = platform_model.wanted() if platform is None else platform
        self._account_concurrency = account_concurrency
        self._iam_wanted = iam_model.wanted() if iam is None else iam
        # More template parameters (e.g. ExtraParentStateMachineArns): what the roles grant.
        self._parameters = dict(iam_model.stack_parameters() if parameters is None else parameters)
        # The IAM model once started (None before, with the model off, or without a template).
        self.iam: iam_model.IamModel | None = None
        # The state machines' roles by name after "{prefix}-" (from the template).
        self._machine_roles: dict[str, str] = {}
        # The model of the stack once started (None before, or with the model off).
        self.platform: platform_model.PlatformModel | None = None
        # Step Functions' buckets while the stack runs with the model (None with it off).
        self.rates: rate_model.RateModel | None = None
        self._rate_scale = rate_scale
        self._function_timeouts = dict(function_timeouts or {})
        self._process_maximum_concurrency: int | None = None
        self._join_maximum_concurrency: int | None = None
        self._sweeper_interval = sweeper_interval
        self._sweeper_min_age_seconds = sweeper_min_age_seconds
        self._deadlines_interval = deadlines_interval
        self._strict_block: contextlib.ExitStack | None = None
        self.endpoint_url: str | None = None
        self._saved_env: dict[str, str | None] = {}
        self._saved_log_level: int | None = None
        self._saved_log_stream: IO[str] | None = None
        self._moto_log_handler: logging.Handler | None = None
        self._iam_log_handler: logging.Handler | None = None
        self._stdout: ThreadRoutedStdout | None = None
        self._runner: PumpRunner | None = None
        self._invoker: Invoker | None = None
        self.outputs: dict[str, Any] = {}
        # The handlers' composition root while the stack runs (its settings, its clients).
        self.app: App | None = None
        self.pumps: dict[str, SqsPump | ExecutionPump | StreamPump | SchedulePump] = {}
        self._sweeper: SchedulePump | None = None
        # The template's event sources the pumps stand in for (read on start).
        self._sources: pumpset.EventSources | None = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start moto, create every resource and start the pumps."""
        # The AWS SDK's own variables, for any code in the process (moto is process-wide);
        # the tracker's settings go to the handlers through the stack's app, not the environment.
        self._set_env(
            {"AWS_DEFAULT_REGION": self.region, "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled"}
        )
        # A handler that had nothing to count (a filtered-out record) makes
        # Powertools warn on every invocation; in Lambda that is a log line.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        if self._log_level is not None:
            self._saved_log_level = logger.log_level
            logger.setLevel(self._log_level)
        if self._sink is not None:
            self._stdout = ThreadRoutedStdout(sys.stdout, self._sink)
            sys.stdout = self._stdout
            emf_module.print = self._stdout.print  # type: ignore[attr-defined]
            self._saved_log_stream = _log_handler(logger).setStream(self._sink)
            # moto's interpreter logs expected failures (timeouts) at ERROR.
            self._moto_log_handler = logging.StreamHandler(self._sink)
            _MOTO_SFN_LOGGER.addHandler(self._moto_log_handler)
            _MOTO_SFN_LOGGER.propagate = False
            self._iam_log_handler = logging.StreamHandler(self._sink)
            self._iam_log_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
            _IAM_LOGGER.addHandler(self._iam_log_handler)
        self._strict_block = contextlib.ExitStack()
        # Not a limit: moto's transactions would otherwise copy whole tables.
        self._strict_block.enter_context(aws_like_costs())
        # Not a limit either: nested parents (startExecution.sync) run only with it.
        self._strict_block.enter_context(sync_executions())
        if self.strict:
            self._strict_block.enter_context(strict_limits())
        try:
            path = template_reader.TEMPLATE_PATH
            template = template_reader.load_template(path) if path.is_file() else None
            self._model_platform(template)
            self._model_iam(template)
            resources = self._resources(template)
            self._sources = self._event_sources(template)
            self._start_moto()
            self._create(resources)
            if self._cirrus_prefix is not None:
                self._create_cirrus(self._cirrus_prefix)
            self.app = App(self._settings(), self._handler_client)
            app_module.use(self.app)
            self._start_pumps()
        except BaseException:
            self.stop()
            raise

    def _settings(self) -> Settings:
        """The handlers' settings: ``DEPTRACK_*`` variables that are set, the stack's resources."""
        found = self.outputs
        return Settings.from_env(
            state_table=found["StateTableName"],
            dependency_table=found["DependencyTableName"],
            prefix=self.prefix,
            workflow_arn_prefix=self._workflow_arn_prefix(),
            payload_bucket=found["PayloadBucketName"],
            # As the template: the redrive policy's count, so the last receive answers.
            process_max_receive_count=self._max_receive_count,
            process_queue_url=found["ProcessQueueUrl"],
            join_queue_url=found["JoinQueueUrl"],
            sweeper_min_age_seconds=self._sweeper_min_age_seconds,
            cirrus_state_table=found.get("CirrusStateTableName"),
            cirrus_process_queue_url=found.get("CirrusProcessQueueUrl"),
            cirrus_payload_bucket=found.get("CirrusPayloadBucketName"),
        )

    def _handler_client(self, service: str) -> Any:
        """A client for the handlers and pumps: the tracker's config, bound to the stack.

        Unsigned in process, where moto checks no signature (signing was 5 % of a join's
        local run). Signed behind an endpoint, where moto's server tells services apart by
        the signature's scope, and for S3, which treats an unsigned request as anonymous.
        """
        config = client_config()
        unsigned = self.endpoint_url is None and service != "s3"
        return clients.session().client(  # type: ignore[call-overload]
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            config=config.merge(_UNSIGNED) if unsigned else config,
        )

    def configure(self, **changes: Any) -> App:
        """Change settings of the running stack (e.g. ``claim_lease_seconds=3600``).

        The handlers get a new app on these settings and the stack's clients.

        Raises:
            RuntimeError: The stack is not running.
            TypeError: A name is not a setting.
            pydantic.ValidationError: A value is not valid for its setting (nothing changes).
        """
        if self.app is None:
            msg = "the embedded stack is not running"
            raise RuntimeError(msg)
        unknown = set(changes) - set(Settings.model_fields)
        if unknown:
            msg = f"not settings: {', '.join(sorted(unknown))}"
            raise TypeError(msg)
        # Validated like the environment's values: a lease of "soon" is refused, not kept.
        settings = Settings.model_validate({**self.app.settings.model_dump(), **changes})
        self.app = App(settings, self.app.clients)
        app_module.use(self.app)
        return self.app

    def stop(self) -> None:
        """Stop the pumps, then moto; restore the environment."""
        if self._invoker is not None:
            # No event reaches a handler once stopping began; the one running finishes
            # while moto still answers, before the mock and the environment go.
            self._invoker.close()
            self._invoker = None
        if self._runner is not None:
            self._runner.stop(timeout=STOP_TIMEOUT_SECONDS)
            self._runner = None
        self._sweeper = None
        if self._mock is not None:
            self._mock.stop()
            self._mock = None
        if self.iam is not None:
            iam_machines.unregister(self.iam)
        if self._strict_block is not None:
            self._strict_block.close()
            self._strict_block = None
        self._restore_output()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        if self.app is not None and app_module.current_or_none() is self.app:
            app_module.use(None)
        self.app = None

    def _restore_output(self) -> None:
        """Give the tracker's logger, stdout and moto's logger back their streams."""
        if self._saved_log_level is not None:
            logger.setLevel(self._saved_log_level)
            self._saved_log_level = None
        if self._saved_log_stream is not None:
            _log_handler(logger).setStream(self._saved_log_stream)
            self._saved_log_stream = None
        if self._stdout is not None:
            if sys.stdout is self._stdout:
                sys.stdout = self._stdout.original
            vars(emf_module).pop("print", None)
            self._stdout = None
        if self._moto_log_handler is not None:
            _MOTO_SFN_LOGGER.removeHandler(self._moto_log_handler)
            _MOTO_SFN_LOGGER.propagate = True
            self._moto_log_handler = None
        if self._iam_log_handler is not None:
            _IAM_LOGGER.removeHandler(self._iam_log_handler)
            self._iam_log_handler = None

    # ------------------------------------------------------------------ API

    def client(self, service: str) -> Any:
        """A boto3 client bound to the stack (region, and the server's endpoint if any)."""
        return clients.session().client(  # type: ignore[call-overload]
            service, region_name=self.region, endpoint_url=self.endpoint_url
        )

    @property
    def pump_errors(self) -> int:
        """Rounds a pump failed (not handler failures, which follow source semantics)."""
        return 0 if self._runner is None else self._runner.errors

    @property
    def dead_letters(self) -> dict[str, list[dict[str, Any]]]:
        """Events the pumps gave up on, by function (the on-failure destinations).

        Process-queue messages that fail for good are in the real DLQ
        (``ProcessDlqUrl``) instead.
        """
        executions, stream = self.pumps.get("executions"), self.pumps.get("stream")
        return {
            "update-state": executions.dead_letters
            if isinstance(executions, ExecutionPump)
            else [],
            "callback": stream.dead_letters if isinstance(stream, StreamPump) else [],
        }

    def sweep_once(self) -> dict[str, Any]:
        """Run the sweeper function once now (between other invocations); its report.

        Raises:
            RuntimeError: The stack is not running.
        """
        if self._sweeper is None:
            msg = "the embedded stack is not running"
            raise RuntimeError(msg)
        report: dict[str, Any] = self._sweeper.invoke()
        return report

    def update_parameters(self, parameters: Mapping[str, str]) -> None:
        """Change template parameters of the running stack, as a stack update would.

        What the IAM model reads follows at once: each role's statements, e.g. the
        callback role's grant on ``ExtraParentStateMachineArns``. Nothing is created
        again (queues, tables, state machines keep what they were started with).

        Raises:
            RuntimeError: The stack is not running, or runs without ``template.yaml``.
        """
        path = template_reader.TEMPLATE_PATH
        if self.app is None or not path.is_file():
            msg = "parameters change on a running stack started from template.yaml"
            raise RuntimeError(msg)
        self._parameters.update(parameters)
        if self.iam is not None:
            self.iam.update(self._deployed(template_reader.load_template(path)))

    def state_machine_arn(self, name: str) -> str:
        """ARN of ``{prefix}-{name}``."""
        return f"{self._workflow_arn_prefix()}{name}"

    # ------------------------------------------------------------------ internals

    def _resources(self, template: dict[str, Any] | None) -> template_reader.Resources:
        """What the stack creates: the template's queues, tables and bucket for its parameters."""
        cirrus = self._cirrus_prefix is not None
        if template is None:
            return template_reader.builtin_resources(
                self.prefix, cirrus=cirrus, account=ACCOUNT, region=self.region
            )
        return template_reader.describe(self._deployed(template))

    def _deployed(self, template: dict[str, Any]) -> template_reader.Deployed:
        """The template deployed with the stack's parameters."""
        # The stack registers the example workflows too: the deployment that has them.
        parameters = {"DeployExamples": "true", **self._parameters, "Prefix": self.prefix}
        if self._cirrus_prefix is not None:
            parameters["CirrusPrefix"] = self._cirrus_prefix
        return template_reader.Deployed(template, parameters, account=ACCOUNT, region=self.region)

    def _model_platform(self, template: dict[str, Any] | None) -> None:
        """Check the template as a new account's Lambda would, and build the model.

        Outside a checkout (the package installed without ``template.yaml``) only
        the recursion limit is modelled, with every function on ``Terminate``.
        """
        if not self._platform_wanted:
            return
        parameters = {} if self._cirrus_prefix is None else {"CirrusPrefix": self._cirrus_prefix}
        functions = (
            {} if template is None else platform_model.template_functions(template, parameters)
        )
        platform_model.check_concurrency(functions, self._account_concurrency)
        self._process_maximum_concurrency = platform_model.process_maximum_concurrency(functions)
        self._join_maximum_concurrency = platform_model.process_maximum_concurrency(
            functions, "JoinQueue"
        )
        timeouts = {f.name: f.timeout_seconds for f in functions.values()}
        self.platform = platform_model.PlatformModel(
            recursive_loop={f.name: f.recursive_loop for f in functions.values()},
            timeouts=FunctionTimeouts({**timeouts, **self._function_timeouts}),
        )
        scale = rate_model.scale_from_env() if self._rate_scale is None else self._rate_scale
        self.rates = rate_model.RateModel(scale=scale)
        if self._strict_block is not None:
            self._strict_block.enter_context(rate_model.throttling(self.rates))

    def _model_iam(self, template: dict[str, Any] | None) -> None:
        """Read every role of the template; build the IAM model unless it is off.

        Each state machine is created with its own role's ARN either way. Outside a
        checkout (no ``template.yaml``) there are no roles to read: nothing is checked.
        """
        if template is None:
            return
        deployed = self._deployed(template)
        machine_prefix = self._workflow_arn_prefix()
        self._machine_roles = {
            arn.removeprefix(machine_prefix): role.arn
            for arn, role in iam_roles.state_machine_roles(deployed).items()
        }
        if self._iam_wanted:
            self.iam = iam_model.IamModel.from_deployed(deployed, self.prefix)
            iam_machines.register(self.iam)

    def _as_role(self, function: str, handler: Any) -> Any:
        """``handler`` run as function ``function``'s role (as is with the IAM model off)."""
        return handler if self.iam is None else self.iam.as_function(function, handler)

    def _workflow_arn_prefix(self) -> str:
        return f"arn:aws:states:{self.region}:{ACCOUNT}:stateMachine:{self.prefix}-"

    def _start_moto(self) -> None:
        if self._port is None:
            self._mock = mock_aws(config={"stepfunctions": {"execute_state_machine": True}})
            self._mock.start()
            return
        # Server mode: moto behind a local endpoint; stop() stops it like mock_aws.
        server = MotoServer(self._host, self._port, sink=self._sink)
        self._mock = server
        self.endpoint_url = server.start()
        self._set_env(server.environment())

    def _set_env(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def _create(self, resources: template_reader.Resources) -> None:
        sqs = self.client("sqs")
        queues = self._create_queues(sqs, resources)
        names = {
            f"{logical_id}Name": name
            for logical_id, name in {**resources.tables, **resources.buckets}.items()
        }
        stream_arn = create_tables(
            self.client("dynamodb"),
            state_table=names["StateTableName"],
            dependency_table=names["DependencyTableName"],
        )
        self.client("s3").create_bucket(Bucket=names["PayloadBucketName"])
        substitutions = {
            "ProcessQueueUrl": queues["ProcessQueueUrl"],
            "StateTableName": names["StateTableName"],
            "DependencyTableName": names["DependencyTableName"],
            "PayloadBucketName": names["PayloadBucketName"],
            "Prefix": self.prefix,
            "StatusReportQueueUrl": queues["StatusReportQueueUrl"],
            **self._defaults,
        }
        sfn = self.client("stepfunctions")
        machines = {}
        for name, path in definitions.discover(self._definitions_dir).items():
            created = sfn.create_state_machine(
                name=f"{self.prefix}-{name}",
                roleArn=self._machine_roles.get(name, ROLE_ARN),
                definition=definitions.render(path, substitutions),
                type=definitions.state_machine_type(name),
            )
            machines[name] = created["stateMachineArn"]
        self.outputs = {
            **queues,
            "StateTableName": names["StateTableName"],
            "DependencyTableName": names["DependencyTableName"],
            "DependencyStreamArn": stream_arn,
            "PayloadBucketName": names["PayloadBucketName"],
            "Prefix": self.prefix,
            "Region": self.region,
            "StateMachines": machines,
        }
        if self.endpoint_url is not None:
            self.outputs["EndpointUrl"] = self.endpoint_url

    def _create_queues(self, sqs: Any, resources: template_reader.Resources) -> dict[str, str]:
        """Every queue of ``resources`` with its redrive policy; their outputs.

        The template's attributes, but the stack's ``visibility_timeout`` wherever the
        template sets one and the stack's ``max_receive_count`` in every redrive policy.
        """
        read = set(resources.triggers.values())
        outputs: dict[str, str] = {}
        arns: dict[str, str] = {}
        # DLQs first: a redrive policy names its DLQ's ARN (no DLQ of the template has one).
        for queue in sorted(resources.queues.values(), key=lambda q: q.redrive is not None):
            attributes = dict(queue.attributes)
            if "VisibilityTimeout" in attributes:
                attributes["VisibilityTimeout"] = str(self._visibility_timeout)
            if queue.redrive is not None:
                redrive = {
                    "deadLetterTargetArn": arns[queue.redrive.target],
                    "maxReceiveCount": self._max_receive_count,
                }
                attributes["RedrivePolicy"] = json.dumps(redrive)
            url = str(sqs.create_queue(QueueName=queue.name, Attributes=attributes)["QueueUrl"])
            arns[queue.logical_id] = queue_arn(sqs, url)
            output = _QUEUE_OUTPUTS.get(queue.logical_id, queue.logical_id)
            outputs[f"{output}Url"] = url
            if queue.logical_id in read:
                outputs[f"{output}Arn"] = arns[queue.logical_id]
        return outputs

    def _create_cirrus(self, cirrus_prefix: str) -> None:
        """Lay out cirrus's deployment, and subscribe the tracker's queue to its event topic."""
        from dependency_tracker_local.cirrus import CirrusDeployment  # noqa: PLC0415

        deployment = self.cirrus = CirrusDeployment(
            prefix=cirrus_prefix, region=self.region, account=ACCOUNT
        )
        deployment.create(self.client)
        found = deployment.outputs
        events_arn = self.outputs["CirrusEventQueueArn"]
        # As the template subscribes it: raw delivery (the body is cirrus's event itself) and
        # the template's filter (template_contract/test_cirrus_mode.py holds both to it).
        self.client("sns").subscribe(
            TopicArn=found["CirrusWorkflowEventTopicArn"],
            Protocol="sqs",
            Endpoint=events_arn,
            Attributes=subscription_attributes(),
        )
        self.outputs.update(found)
        # cirrus's own Lambdas read their configuration from the environment, as in Lambda.
        self._set_env(deployment.environment())

    def _event_sources(self, template: dict[str, Any] | None) -> pumpset.EventSources:
        """What each pump takes from its trigger: the template's settings for its parameters."""
        if template is None:
            return pumpset.builtin_sources(cirrus=self._cirrus_prefix is not None)
        return pumpset.event_sources(self._deployed(template))

    def _start_pumps(self) -> None:
        invoker = self._invoker = Invoker(self._stdout)
        sources = self._sources
        if sources is None:
            msg = "the pumps start after the template's event sources are read"
            raise RuntimeError(msg)
        handlers = {
            "process": process.lambda_handler,
            "update-state": update_state.lambda_handler,
            "callback": callback.lambda_handler,
            "cirrus-events": cirrus_events.lambda_handler,
        }
        queues: dict[str, pumpset.QueueAddress] = {}
        for source in sources.sqs.values():
            output = _QUEUE_OUTPUTS.get(source.queue, source.queue)
            if f"{output}Arn" in self.outputs:
                queues[source.queue] = pumpset.QueueAddress(
                    self.outputs[f"{output}Url"], self.outputs[f"{output}Arn"]
                )
        self.pumps = {}
        self.pumps.update(
            pumpset.build_pumps(
                sources,
                handler_for=lambda function: invoker.wrap(
                    self._as_role(function, handlers[function])
                ),
                client=self._handler_client,
                queues=queues,
                stream_arns={"DependencyTable": self.outputs["DependencyStreamArn"]},
                prefix=self.prefix,
                region=self.region,
                account=ACCOUNT,
                names=pumpset.PUMP_NAMES if self.cirrus is None else pumpset.CIRRUS_PUMP_NAMES,
            )
        )
        # The sweeper's schedule: one more pump; sweep_once() invokes the same function.
        self._sweeper = SchedulePump(
            handler=invoker.wrap(self._as_role("sweeper", sweeper.lambda_handler)),
            interval=self._sweeper_interval or 0.0,
            region=self.region,
            account=ACCOUNT,
        )
        # Its minute schedule, whose input asks only for the joins past their deadline.
        deadlines = SchedulePump(
            handler=invoker.wrap(self._as_role("sweeper", sweeper.lambda_handler)),
            interval=self._deadlines_interval or 0.0,
            region=self.region,
            account=ACCOUNT,
            name="deadlines",
            input={sweeper.DEADLINES_EVENT_KEY: True},
        )
        if self.cirrus is not None:
            self.pumps.update(self.cirrus.pumps(client=self.client, wrap=invoker.wrap))
        # One model for every pump (the cirrus ones too), or none with the model off.
        for pump in [*self.pumps.values(), self._sweeper, deadlines]:
            pump.platform = self.platform
        for name, maximum in (
            ("sqs", self._process_maximum_concurrency),
            ("joins", self._join_maximum_concurrency),
        ):
            sqs_pump = self.pumps[name]
            if isinstance(sqs_pump, SqsPump):
                sqs_pump.maximum_concurrency = maximum
        pumps: list[Pump] = list(self.pumps.values())
        if self._sweeper_interval is not None:
            self.pumps["sweeper"] = self._sweeper
            pumps.append(self._sweeper)
        if self._deadlines_interval is not None:
            self.pumps["deadlines"] = deadlines
            pumps.append(deadlines)
        self._runner = PumpRunner(pumps, poll_interval=self._poll_interval)
        self._runner.start()


def _log_handler(powertools_logger: Any) -> logging.StreamHandler[IO[str]]:
    handler: logging.StreamHandler[IO[str]] = powertools_logger.registered_handler
    return handler


# The first name, kept as an alias: the public contract names it (docs/versioning.md).
LocalStack = EmbeddedStack
