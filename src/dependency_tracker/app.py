"""The composition root: settings and a client factory in, every store and flow out, built once.

Each part is built on first use (a Lambda function builds only what its handler
needs) and then kept: the process function's flow, the update-state flow it records
lease takeovers with, and the join registration all share one state table, one
dependency table and one set of clients. No flow builds another flow or a store:
they are handed what they use here.

In Lambda, :func:`current` builds the one ``App`` of the environment from
``Settings.from_env()`` and boto3's default clients. The embedded stack and the
tests build their own (their settings, their clients) and :func:`use` it; nothing
is read from or written to ``os.environ`` for them.

Example:
    >>> app = App(settings, clients={"dynamodb": dynamodb, "stepfunctions": sfn})  # doctest: +SKIP
    >>> app.process.handle(message)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from dependency_tracker.answers.parent import ParentAnswers
from dependency_tracker.callbacks.flow import CallbackFlow
from dependency_tracker.cirrus.flow import CirrusEvents, CirrusRuns
from dependency_tracker.cirrus.store import CirrusQueue, CirrusStateTable
from dependency_tracker.core.clients import client
from dependency_tracker.core.pacing import START_PACING
from dependency_tracker.core.settings import Settings
from dependency_tracker.cycles.edges import WaitEdges
from dependency_tracker.cycles.guard import CycleGuard
from dependency_tracker.intake.invalid import InvalidMessages
from dependency_tracker.intake.last_receive import LastReceive
from dependency_tracker.intake.route import Intake
from dependency_tracker.joins.adoption import JoinAdoption
from dependency_tracker.joins.cancellation import JoinCancellation
from dependency_tracker.joins.chunks import ChunkRegistrar
from dependency_tracker.joins.counting import JoinCounting
from dependency_tracker.joins.deadlines import JoinDeadlines
from dependency_tracker.joins.fan_out import ChunkFanOut
from dependency_tracker.joins.manifest import ManifestReader
from dependency_tracker.joins.member_list import MemberLists
from dependency_tracker.joins.notify import JoinNotifier
from dependency_tracker.joins.parent_links import ParentLinks
from dependency_tracker.joins.registration import JoinRegistration
from dependency_tracker.joins.registration_rows import ChunkRows
from dependency_tracker.joins.reopening import MemberReopening
from dependency_tracker.joins.results import JoinResults
from dependency_tracker.joins.row_access import RowAccess
from dependency_tracker.joins.store import JoinStore
from dependency_tracker.payloads.bucket import PayloadBucket
from dependency_tracker.payloads.runner import PayloadRunner, TrackerRunner
from dependency_tracker.payloads.runs import Runs
from dependency_tracker.payloads.state_table import StateTable
from dependency_tracker.payloads.update_state import UpdateStateFlow
from dependency_tracker.sweeper.flow import SweeperFlow
from dependency_tracker.sweeper.store import CursorStore, SweepStore
from dependency_tracker.table.dependency_table import DependencyTable
from dependency_tracker.waits.callback import WaiterNotifier
from dependency_tracker.waits.process import ProcessFlow

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from dependency_tracker.core.backoff import Backoff

ClientFactory = Callable[[str], Any]
"""``service name -> boto3 client`` (e.g. ``"dynamodb"``); called once per service."""

_T = TypeVar("_T")


class Clients:
    """One boto3 client per service, made by a factory on first use and then kept."""

    def __init__(self, factory: ClientFactory | Mapping[str, Any] | None = None) -> None:
        if isinstance(factory, Mapping):
            given = dict(factory)
            self._factory: ClientFactory = given.__getitem__
        else:
            # The process's cached clients: a test hooking ``clients.client(...)`` hooks these.
            self._factory = factory or client
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, service: str) -> Any:
        """The client of ``service``, made once."""
        with self._lock:
            if service not in self._made:
                self._made[service] = self._factory(service)
            return self._made[service]

    @property
    def dynamodb(self) -> DynamoDBClient:
        """The DynamoDB client."""
        return cast("DynamoDBClient", self.get("dynamodb"))

    @property
    def sfn(self) -> SFNClient:
        """The Step Functions client."""
        return cast("SFNClient", self.get("stepfunctions"))

    @property
    def s3(self) -> S3Client:
        """The S3 client."""
        return cast("S3Client", self.get("s3"))

    @property
    def sqs(self) -> SQSClient:
        """The SQS client."""
        return cast("SQSClient", self.get("sqs"))


class App:
    """Every store and flow of one Lambda environment (or one embedded stack, or one test).

    ``clients`` is a :class:`Clients`, a factory, or a mapping of service names to
    clients (default: :func:`dependency_tracker.core.clients.client`). The keyword parts
    replace the ones the root would build (a test's dependency table with one resolver
    thread, say; ``start_pacing``, how a throttled start waits, with a test's clock);
    everything built from them uses them.
    """

    def __init__(
        self,
        settings: Settings,
        clients: Clients | ClientFactory | Mapping[str, Any] | None = None,
        *,
        states: StateTable | None = None,
        dependencies: DependencyTable | None = None,
        bucket: PayloadBucket | None = None,
        runner: PayloadRunner | None = None,
        backoff: Backoff | None = None,
        start_pacing: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.clients = clients if isinstance(clients, Clients) else Clients(clients)
        given = {"states": states, "dependencies": dependencies, "bucket": bucket, "runner": runner}
        self._parts: dict[str, object] = {k: v for k, v in given.items() if v is not None}
        self._backoff = backoff
        self._start_pacing = start_pacing or START_PACING
        # Reentrant: building a flow builds its stores through the same lock.
        self._lock = threading.RLock()

    def _part(self, name: str, build: Callable[[], _T]) -> _T:
        with self._lock:
            if name not in self._parts:
                self._parts[name] = build()
            return cast("_T", self._parts[name])

    # ------------------------------------------------------------------ stores

    @property
    def states(self) -> StateTable:
        """The payload state table."""
        return self._part(
            "states", lambda: StateTable(self.clients.dynamodb, self.settings.state_table)
        )

    @property
    def dependencies(self) -> DependencyTable:
        """The dependency table's waiter rows."""
        return self._part(
            "dependencies",
            lambda: DependencyTable(self.clients.dynamodb, self.settings.dependency_table),
        )

    @property
    def bucket(self) -> PayloadBucket:
        """The payload bucket (payloads and results by pointer; may be unset)."""
        return self._part(
            "bucket", lambda: PayloadBucket(self.clients.s3, self.settings.payload_bucket)
        )

    @property
    def joins(self) -> JoinStore:
        """The join rows of the dependency table."""
        return self._part(
            "joins",
            lambda: JoinStore(self.dependencies.client, self.dependencies.table_name),
        )

    @property
    def manifests(self) -> ManifestReader:
        """Reads join manifests a slice at a time."""
        return self._part("manifests", lambda: ManifestReader(self.bucket.client))

    @property
    def cycles(self) -> CycleGuard:
        """Wait edges and the cycle check."""
        return self._part(
            "cycles",
            lambda: CycleGuard(
                states=self.states,
                edges=WaitEdges(
                    self.dependencies.client,
                    self.dependencies.table_name,
                    retention_days=self.settings.waiter_retention_days,
                ),
                max_length=self.settings.cycle_depth,
            ),
        )

    # ------------------------------------------------------------------ runners

    @property
    def runs(self) -> Runs:
        """The tracker's own runs (their input, start, and what a lease asks of them)."""
        return self._part(
            "runs",
            lambda: Runs(
                settings=self.settings,
                states=self.states,
                sfn=self.clients.sfn,
                bucket=self.bucket,
                pacing=self._start_pacing if self.settings.pace_starts else None,
            ),
        )

    @property
    def runner(self) -> PayloadRunner:
        """Who runs payloads: cirrus in cirrus mode, else the tracker itself."""
        return self._part("runner", self._runner)

    def _runner(self) -> PayloadRunner:
        settings = self.settings
        if not settings.cirrus_mode:
            return TrackerRunner(
                states=self.states,
                dependencies=self.dependencies,
                runs=self.runs,
                recorder=self.update_state,
                claim_lease_seconds=settings.claim_lease_seconds,
                reopener=MemberReopening(joins=self.joins),
            )
        if settings.cirrus_state_table is None or settings.cirrus_process_queue_url is None:
            msg = "cirrus mode needs the cirrus state table and process queue"
            raise ValueError(msg)
        return CirrusRuns(
            states=CirrusStateTable(self.clients.dynamodb, settings.cirrus_state_table),
            queue=CirrusQueue(
                self.clients.sqs,
                settings.cirrus_process_queue_url,
                s3=self.clients.s3,
                bucket=settings.cirrus_payload_bucket,
                root_prefix=settings.cirrus_payload_root_prefix,
            ),
            dependencies=self.dependencies,
            executions_url=settings.cirrus_executions_url,
        )

    # ------------------------------------------------------------------ flows

    @property
    def update_state(self) -> UpdateStateFlow:
        """The update-state function's flow (and the lease takeover's recorder)."""
        return self._part(
            "update_state",
            lambda: UpdateStateFlow(
                settings=self.settings,
                states=self.states,
                dependencies=self.dependencies,
                sfn=self.clients.sfn,
                bucket=self.bucket,
                sqs=self.clients.sqs,
                parent_ended=(
                    self.cancellation.parent_ended if self.cancellation is not None else None
                ),
            ),
        )

    @property
    def join_access(self) -> RowAccess:
        """The dependency table's calls that a join's rows share (reads, queries, transactions)."""
        dependencies = self.dependencies
        return self._part(
            "join_access", lambda: RowAccess(dependencies.client, dependencies.table_name)
        )

    @property
    def chunk_rows(self) -> ChunkRows:
        """A join's registration rows (membership and chunk rows)."""
        return self._part("chunk_rows", lambda: ChunkRows(self.join_access))

    @property
    def cancellation(self) -> JoinCancellation | None:
        """Stops a gone parent's join members (None in cirrus mode: cirrus runs them)."""
        settings = self.settings
        if settings.cirrus_mode:
            return None
        return self._part(
            "cancellation",
            lambda: JoinCancellation(
                joins=self.joins,
                links=ParentLinks(
                    RowAccess(self.dependencies.client, self.dependencies.table_name)
                ),
                rows=self.chunk_rows,
                dependencies=self.dependencies,
                states=self.states,
                sfn=lambda: self.clients.sfn,
                sqs=lambda: self.clients.sqs,
                queue_url=settings.join_queue_url or settings.process_queue_url,
            ),
        )

    @property
    def registration(self) -> JoinRegistration:
        """Join creation and chunked member registration, built from its parts."""
        settings = self.settings
        dependencies = self.dependencies

        def build() -> JoinRegistration:
            chunk_size = settings.join_chunk_size
            return JoinRegistration(
                joins=self.joins,
                lists=MemberLists(
                    bucket=self.bucket, manifests=self.manifests, chunk_size=chunk_size
                ),
                fan_out=ChunkFanOut(
                    manifests=self.manifests,
                    chunk_size=chunk_size,
                    sqs=self.clients.sqs,
                    queue_url=settings.join_queue_url or settings.process_queue_url,
                ),
                adoption=JoinAdoption(self.joins),
                registrar=ChunkRegistrar(
                    joins=self.joins,
                    rows=self.chunk_rows,
                    dependencies=dependencies,
                    states=self.states,
                    cycles=self.cycles,
                    runner=self.runner,
                    cancellation=self.cancellation,
                ),
                cancellation=self.cancellation,
            )

        return self._part("registration", build)

    @property
    def process(self) -> Intake:
        """The process function's flow: each message parsed once and routed by its kind."""
        return self._part("process", self._intake)

    def _intake(self) -> Intake:
        invalid = InvalidMessages(
            settings=self.settings, states=self.states, dependencies=self.dependencies
        )
        return Intake(
            waits=self.waits,
            joins=self.registration,
            bucket=self.bucket,
            invalid=invalid,
            last_receive=LastReceive(invalid=invalid, joins=self.joins),
            cancellation=self.cancellation,
        )

    @property
    def waits(self) -> ProcessFlow:
        """The flow of payload and wait messages (the process function routes them to it)."""
        return self._part(
            "waits",
            lambda: ProcessFlow(
                dependencies=self.dependencies, runner=self.runner, cycles=self.cycles
            ),
        )

    @property
    def counting(self) -> JoinCounting:
        """Member outcomes counted on their joins."""
        return self._part(
            "counting",
            lambda: JoinCounting(
                joins=self.joins,
                retention_days=self.settings.waiter_retention_days,
                results=self.join_results,
            ),
        )

    @property
    def join_results(self) -> JoinResults | None:
        """Writes decided joins' results manifests (None without a payload bucket)."""
        if not self.bucket.writable:
            return None
        return self._part("join_results", lambda: JoinResults(bucket=self.bucket, joins=self.joins))

    @property
    def answers(self) -> ParentAnswers:
        """Answers parents' tokens: for the waiters' callbacks and the joins' alike."""
        return self._part(
            "answers",
            lambda: ParentAnswers(
                sfn=self.clients.sfn,
                dependencies=self.dependencies,
                bucket=self.bucket,
                backoff=self._backoff,
            ),
        )

    @property
    def waiter_notifier(self) -> WaiterNotifier:
        """Tells the parents of terminal waiter rows."""
        return self._part(
            "waiter_notifier",
            lambda: WaiterNotifier(
                answers=self.answers,
                dependencies=self.dependencies,
                retention_days=self.settings.waiter_retention_days,
            ),
        )

    @property
    def join_notifier(self) -> JoinNotifier:
        """Counts members on their joins and tells the parents of decided joins."""
        return self._part(
            "join_notifier",
            lambda: JoinNotifier(
                answers=self.answers,
                joins=self.joins,
                counting=self.counting,
                dependencies=self.dependencies,
                retention_days=self.settings.waiter_retention_days,
                results=self.join_results,
                cancellation=self.cancellation,
            ),
        )

    @property
    def callback(self) -> CallbackFlow:
        """The callback function's flow (and the sweeper's): each row to its notifier."""
        return self._part(
            "callback",
            lambda: CallbackFlow(
                answers=self.answers, waiters=self.waiter_notifier, joins=self.join_notifier
            ),
        )

    @property
    def cirrus_events(self) -> CirrusEvents:
        """The cirrus-events function's flow (cirrus mode only).

        Raises:
            ValueError: The settings are not in cirrus mode.
        """
        return self._part("cirrus_events", self._cirrus_events)

    def _cirrus_events(self) -> CirrusEvents:
        if self.settings.cirrus_state_table is None:
            msg = "cirrus mode needs the cirrus state table"
            raise ValueError(msg)
        return CirrusEvents(
            states=CirrusStateTable(self.clients.dynamodb, self.settings.cirrus_state_table),
            dependencies=self.dependencies,
            executions_url=self.settings.cirrus_executions_url,
        )

    @property
    def deadlines(self) -> JoinDeadlines:
        """Joins decided at their deadlines (the sweeper's minute schedule)."""
        return self._part(
            "deadlines",
            lambda: JoinDeadlines(
                joins=self.joins,
                client=self.dependencies.client,
                table_name=self.dependencies.table_name,
            ),
        )

    @property
    def sweeper(self) -> SweeperFlow:
        """The sweeper function's flow (no cursor without a payload bucket)."""
        settings = self.settings
        return self._part(
            "sweeper",
            lambda: SweeperFlow(
                settings=settings,
                sweeps=SweepStore(
                    self.clients.dynamodb,
                    dependency_table=settings.dependency_table,
                    state_table=settings.state_table,
                ),
                callback=self.callback,
                cursors=None
                if settings.payload_bucket is None
                else CursorStore(self.clients.s3, settings.payload_bucket),
                cirrus=self.cirrus_events if settings.cirrus_mode else None,
            ),
        )


_current: App | None = None
_current_lock = threading.Lock()


def current() -> App:
    """The app the handlers use: the one given to :func:`use`, else one built from the environment.

    Raises:
        ConfigurationError: A required ``DEPTRACK_*`` variable is missing or malformed.
    """
    global _current  # noqa: PLW0603  (one app per Lambda environment)
    with _current_lock:
        if _current is None:
            _current = App(Settings.from_env())
        return _current


def current_or_none() -> App | None:
    """The app given to :func:`use` or built by :func:`current`, if any (nothing is built)."""
    with _current_lock:
        return _current


def use(app: App | None) -> None:
    """Make ``app`` the handlers' app (None: build it from the environment on next use)."""
    global _current  # noqa: PLW0603
    with _current_lock:
        _current = app
