"""The engine thread: `EngineWorker` owns the engine (it is not thread-safe) and drives it;
the event loop hands requests and aborts over an inbox, and the worker hands tokens back with
one `call_soon_threadsafe` per step. Admission is bounded: at most `max_num_seqs` run and
`max_queue` wait; beyond that a request gets 429 at once, never an unbounded pile-up."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lab.engine.server.protocol import APIError


@dataclass
class Handle:
    """One request in flight, shared by its handler (event loop) and the engine thread."""

    tokens: list[int]
    params: Any  # SamplingParams
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    submitted: float = field(default_factory=time.perf_counter)
    request_id: int | None = None
    disconnected_at: float | None = None
    done: bool = False


class EngineWorker:
    """Owns the engine in one thread; requests and aborts arrive over an inbox."""

    def __init__(self, engine, max_queue: int = 64, abort_on_disconnect: bool = True):
        self.engine = engine
        engine.step_log = collections.deque(maxlen=256)  # a server runs for days
        self.max_queue = max_queue
        self.capacity = engine.config.max_num_seqs + max_queue
        self.abort_on_disconnect = abort_on_disconnect
        self.counters = collections.Counter()
        self.gauges: dict[str, float] = {}
        self.in_flight = 0
        self._lock = threading.Lock()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._active: dict[int, Handle] = {}
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.error: str | None = None

    # event-loop side
    def start(self) -> None:
        self._refresh_gauges()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, tokens: list[int], params) -> Handle:
        """Hand a request to the engine; APIError 429 when running + waiting is full."""
        with self._lock:
            if self.in_flight >= self.capacity:
                self.counters["rejected_requests"] += 1
                raise APIError(
                    429,
                    f"The server is at capacity ({self.engine.config.max_num_seqs} running, "
                    f"{self.max_queue} waiting); retry later.",
                    type_="rate_limit_error",
                    code="server_busy",
                    headers={"Retry-After": "1"},
                )
            self.in_flight += 1
        handle = Handle(tokens, params, asyncio.get_running_loop())
        self._inbox.put(("add", handle))
        self._wake.set()
        return handle

    def disconnected(self, handle: Handle) -> None:
        """The client went away: abort (unless configured not to) before the next step."""
        if handle.done or handle.disconnected_at is not None:
            return
        handle.disconnected_at = time.perf_counter()
        self.counters["disconnects"] += 1
        if self.abort_on_disconnect:
            self._inbox.put(("abort", handle))
            self._wake.set()

    def cancel(self, handle: Handle) -> None:
        """The handler is done with a request that may still run (a stop string matched)."""
        if not handle.done:
            self._inbox.put(("abort", handle))
            self._wake.set()

    def release(self) -> None:
        with self._lock:
            self.in_flight -= 1

    # engine-thread side
    def _run(self) -> None:
        engine = self.engine
        while not self._stop.is_set():
            self._drain_inbox()
            if not engine.has_unfinished():
                self._refresh_gauges()
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            started = time.perf_counter()
            try:
                emitted = engine.step()
            except Exception as exc:  # keep serving: fail the requests in this batch
                self.error = f"{type(exc).__name__}: {exc}"
                self.counters["engine_errors"] += 1
                for handle in list(self._active.values()):
                    engine.abort(handle.request_id)
                    self._finish(handle, "error", {"error": self.error})
                continue
            now = time.perf_counter()
            self.counters["engine_steps"] += 1
            self.counters["engine_busy_seconds"] += now - started
            self.counters["generated_tokens"] += len(emitted)
            out: dict[asyncio.AbstractEventLoop, list] = collections.defaultdict(list)
            for rid, token in emitted.items():
                handle = self._active[rid]
                out[handle.loop].append((handle, ("token", token)))
            for rid, handle in list(self._active.items()):
                seq = engine.requests[rid].seq
                if seq.is_done:
                    params = seq.sampling_params
                    eos = seq.last_token in params.stop_token_ids or (
                        not params.ignore_eos
                        and seq.last_token in engine.model.config.eos_token_ids
                    )
                    reason = "stop" if eos else "length"
                    out[handle.loop].append((handle, self._finish(handle, reason, deliver=False)))
            for loop, items in out.items():
                self._deliver(loop, items)
            self._refresh_gauges()

    def _drain_inbox(self) -> None:
        while True:
            try:
                kind, handle = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                try:
                    handle.request_id = self.engine.add_request(handle.tokens, handle.params)
                except ValueError as exc:
                    self._deliver(handle.loop, [(handle, ("error", str(exc)))])
                    handle.done = True
                    continue
                self._active[handle.request_id] = handle
                self.counters["requests"] += 1
                self.counters["prompt_tokens"] += len(handle.tokens)
            elif handle.request_id in self._active:  # abort
                self.engine.abort(handle.request_id)
                reason = "abort" if handle.disconnected_at is not None else "cancelled"
                self._finish(handle, reason)

    def _finish(self, handle: Handle, reason: str, extra: dict | None = None, deliver=True):
        """Close a request: metrics, counters, forget it. Returns the event for the handler."""
        state = self.engine.requests.pop(handle.request_id)
        self._active.pop(handle.request_id, None)
        handle.done = True
        metrics = state.metrics()
        metrics["first_scheduled"] = state.first_scheduled
        metrics["token_times"] = state.token_times
        self.counters[f"finished_{reason}"] += 1
        if handle.disconnected_at is not None:
            late = sum(t > handle.disconnected_at for t in state.token_times)
            self.counters["tokens_after_disconnect"] += late
            metrics["tokens_after_disconnect"] = late
            if reason == "abort":
                self.counters["aborted_requests"] += 1
        event = ("done", reason, {**metrics, **(extra or {})})
        if deliver:
            self._deliver(handle.loop, [(handle, event)])
        return event

    @staticmethod
    def _deliver(loop: asyncio.AbstractEventLoop, items: list) -> None:
        def put_all() -> None:
            for handle, event in items:
                handle.events.put_nowait(event)

        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody to tell
            loop.call_soon_threadsafe(put_all)

    def _refresh_gauges(self) -> None:
        engine = self.engine
        stats = engine.manager.stats()
        self.gauges = {
            "running_requests": len(engine.scheduler.running),
            "waiting_requests": len(engine.scheduler.waiting),
            "kv_blocks_allocated": stats.get("allocated_blocks", stats.get("num_seqs", 0)),
            "kv_blocks_free": stats["free_blocks"],
            "kv_blocks_total": stats.get("num_blocks", engine.config.max_num_seqs),
        }

    def snapshot(self) -> dict[str, float]:
        """Counters and gauges (the engine's as of its last step; in-flight live)."""
        return {**self.counters, **self.gauges, "in_flight_requests": self.in_flight}
