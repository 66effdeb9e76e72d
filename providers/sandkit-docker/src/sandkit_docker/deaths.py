"""One engine event stream per provider: the containers of its owner that die, and the
execs in them that end.

An exec's hijacked connection normally ends when its container dies, and the
stdio channel with it. Under gVisor it sometimes does not (the engine keeps the
exec's stream open after a SIGKILL of the sandbox), and a call would wait on it
until its own timeout. The engine's `die` event is the platform saying so; the
provider ends the channels into that container when it comes (`on_death`).

The same holds for one agent: killed while a big request was on its way in, its
exec's connection can stay open with the request's sender blocked on it (the engine
still holds the unread stdin). `exec_die` says the agent process is gone
(`on_exec_death`), and the provider ends that one channel.

One watcher serves every box of a provider (one connection to the engine, one
thread, idle between events), started with its first channel. When the engine
goes away the watcher reconnects with a backoff until it is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import docker

log = logging.getLogger("sandkit.docker")

RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 30.0


class DeathWatch:
    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        owner_label: str,
        on_death: Callable[[str], None],
        on_exec_death: Callable[[str, str], None],
    ) -> None:
        self._client = client
        self._filters = {
            "type": ["container"],
            "event": ["die", "exec_die"],
            "label": [owner_label],
        }
        self._on_death = on_death
        self._on_exec_death = on_exec_death
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._events: Any = None

    def start(self) -> None:
        """Start watching (idempotent; cheap to call on every new channel)."""
        if self._thread is not None or self._stopped.is_set():
            return
        with self._lock:
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="sandkit-docker-deaths", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            events = self._events
        if events is not None:
            with contextlib.suppress(Exception):
                events.close()  # ends the blocked read of the thread

    def _dispatch(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        container_id = event.get("id")
        if not isinstance(container_id, str) or not container_id:
            return
        if event.get("Action") == "exec_die":
            exec_id = ((event.get("Actor") or {}).get("Attributes") or {}).get("execID")
            if isinstance(exec_id, str) and exec_id:
                self._on_exec_death(container_id, exec_id)
            return
        self._on_death(container_id)

    def _run(self) -> None:
        pause = RECONNECT_FIRST_S
        while not self._stopped.is_set():
            try:
                events = self._client().events(decode=True, filters=self._filters)
                with self._lock:
                    self._events = events
                if self._stopped.is_set():
                    events.close()
                    return
                pause = RECONNECT_FIRST_S
                for event in events:
                    self._dispatch(event)
            except Exception as exc:  # the engine restarted or went away: try again
                if not self._stopped.is_set():
                    log.debug("container events: %s; reconnecting in %.1f s", exc, pause)
            if self._stopped.wait(pause):
                return
            pause = min(pause * 2, RECONNECT_MAX_S)
