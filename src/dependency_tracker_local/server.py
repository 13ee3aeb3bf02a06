"""moto as a local AWS endpoint: the embedded stack, reachable from other processes.

Requires moto's ``server`` extra (Flask). :class:`~dependency_tracker_local.EmbeddedStack`
uses it when given a ``port``; ``dependency-tracker serve`` is the command around that.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.request
from typing import IO, TYPE_CHECKING, Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

# werkzeug's access log: the pumps poll many times a second, so only warnings pass.
_ACCESS_LOGGER = logging.getLogger("werkzeug")


class MotoServer:
    """moto's server in a thread of this process, like ``moto.server.ThreadedMotoServer``.

    Unlike ``ThreadedMotoServer``, a port that cannot be bound raises in
    :meth:`start` (``ThreadedMotoServer.start`` waits forever for a server
    thread that died). On start the server's backends are reset and state
    machines really execute (``POST /moto-api/config``).

    Example:
        >>> server = MotoServer(port=0)  # doctest: +SKIP
        >>> endpoint_url = server.start()  # doctest: +SKIP
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, sink: IO[str] | None = None):
        self.host = host
        self.port = port
        self._sink = sink
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._log_handler: logging.Handler | None = None
        self._saved_log: tuple[int, bool] = (logging.NOTSET, True)

    @property
    def endpoint_url(self) -> str:
        """``http://host:port`` of the server (a wildcard address is reached on loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)  # noqa: S104
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def environment(self) -> dict[str, str]:
        """Variables the process needs for handlers and state machines to use the server."""
        return {
            # moto's Step Functions service integrations call http://localhost:$MOTO_PORT.
            "MOTO_PORT": str(self.port),
            "AWS_ENDPOINT_URL": self.endpoint_url,
            # A local endpoint needs no real credentials (and must never get them).
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }

    def start(self) -> str:
        """Bind, serve in a daemon thread, reset moto; returns the endpoint url.

        Raises:
            OSError: The address cannot be bound (for example, the port is in use).
        """
        # Bind here: werkzeug would print and sys.exit(1) on a port in use.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.create_server((self.host, self.port), family=family)
        try:
            self.port = int(listener.getsockname()[1])
            self._server = make_server(
                self.host,
                self.port,
                DomainDispatcherApplication(create_backend_app),
                threaded=True,
                request_handler=MotoRequestHandler,
                fd=listener.fileno(),  # werkzeug serves a duplicate of it
            )
        finally:
            listener.close()
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="moto-server", daemon=True
        )
        self._thread.start()
        self._quiet_access_log()
        try:
            # One process, one set of moto backends: start from a fresh account.
            self._moto_api("reset", None)
            self._moto_api("config", {"stepfunctions": {"execute_state_machine": True}})
        except BaseException:
            self.stop()
            raise
        return self.endpoint_url

    def stop(self) -> None:
        """Stop serving and wait for the server thread."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._log_handler is not None:
            _ACCESS_LOGGER.removeHandler(self._log_handler)
            _ACCESS_LOGGER.setLevel(self._saved_log[0])
            _ACCESS_LOGGER.propagate = self._saved_log[1]
            self._log_handler = None

    def _quiet_access_log(self) -> None:
        self._saved_log = (_ACCESS_LOGGER.level, _ACCESS_LOGGER.propagate)
        self._log_handler = (
            logging.NullHandler() if self._sink is None else logging.StreamHandler(self._sink)
        )
        _ACCESS_LOGGER.addHandler(self._log_handler)
        _ACCESS_LOGGER.setLevel(logging.WARNING)
        _ACCESS_LOGGER.propagate = False

    def _moto_api(self, path: str, body: dict[str, Any] | None) -> None:
        request = urllib.request.Request(  # noqa: S310  (our own http:// endpoint)
            f"{self.endpoint_url}/moto-api/{path}",
            data=b"" if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass
