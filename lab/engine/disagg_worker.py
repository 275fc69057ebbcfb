"""One engine process of a prefill/decode pair: `python -m lab.engine.disagg_worker`.

The disaggregation lab starts two: the `decode` one listens on a Unix domain socket, the
`prefill` one connects to it. Each loads the bundled `target` model (the same file, so the
same weights) with one torch thread and answers JSON commands, one line each way, on
stdin/stdout (stray prints go to stderr). Commands:

- `calibrate`: time decode-only steps and decode + prefill-of-n steps on a fresh engine.
- `send_probe` / `recv_probe`: frames of a given KV size over the socket (its bandwidth).
- `trace`: run requests arriving at given times; `mode` "colocated" (prefill and decode
  here) or "disagg" (prefill role: prefill, export, send; decode role: receive, import,
  decode). Replies with every token time, each step and every frame's bytes and times.

Times are time.perf_counter() seconds: CLOCK_MONOTONIC on Linux, one clock for both
processes. A failed command replies {"error": "..."}; end of stdin ends the process.
"""

from __future__ import annotations

import argparse
import json
import queue
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.kv_transfer import KVHandoff, recv_handoff, send_handoff
from lab.engine.model import load_model
from lab.engine.sampler import SamplingParams

COMMANDS = ("connect", "send_probe", "recv_probe", "calibrate", "trace")
WEIGHTS = Path(__file__).resolve().parent / "weights" / "target"


def spin(seconds: float) -> None:
    """Wait without sleeping: a sleeping core clocks down and wakes slowly, and in a trace
    both processes are busy stepping, so the socket probe keeps both cores as busy."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


def timed_step(eng: LLMEngine) -> dict:
    """One engine step: its tokens, when it ended, its wall ms and this thread's CPU ms (CPU
    time leaves out time the OS gave the core to another process: the step's own work)."""
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    emitted = eng.step()
    done = time.perf_counter()
    log = eng.step_log[-1]
    return {"emitted": emitted, "t": done, "ms": (done - wall0) * 1000,
            "cpu_ms": (time.thread_time() - cpu0) * 1000, "decodes": log["decode_tokens"],
            "prefill_tokens": log["prefill_tokens"]}  # fmt: skip


def step_record(step: dict, prefilled: list[int]) -> dict:
    """What the lab gets of a step (JSON): times, batch and whose prefill it ran."""
    return {**{k: v for k, v in step.items() if k != "emitted"}, "prefilled": prefilled}


class Worker:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.model = load_model(WEIGHTS)
        self.frames: queue.Queue = queue.Queue()  # (handoff, wire bytes) or an exception
        self.probes: queue.Queue = queue.Queue()
        self.sock: socket.socket | None = None
        if args.role == "decode":
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(args.socket)
            self.listener.listen(1)
            threading.Thread(target=self._receive, daemon=True).start()

    def engine(self) -> LLMEngine:
        a, max_len = self.args, self.model.config.max_position_embeddings
        return LLMEngine(self.model, EngineConfig(
            block_size=a.block_size, num_blocks=a.max_num_seqs * -(-max_len // a.block_size),
            max_model_len=max_len, max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=max_len + a.max_num_seqs,  # a prompt is never chunked
            enable_prefix_caching=False))  # fmt: skip

    # --- the KV socket -------------------------------------------------------------------
    def _receive(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                while (got := recv_handoff(conn)) is not None:
                    handoff, wire = got
                    target = self.probes if "probe" in handoff.meta else self.frames
                    target.put((handoff, wire))
            raise ConnectionError("the prefill process closed the KV socket")
        except Exception as exc:  # surfaces in the next command that waits on a frame
            self.frames.put(exc)
            self.probes.put(exc)

    def connect(self, _: dict) -> dict:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.args.socket)
        return {}

    @staticmethod
    def _get(q: queue.Queue, timeout: float):
        try:
            item = q.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"No KV frame arrived within {timeout:g} s.") from None
        if isinstance(item, Exception):
            raise RuntimeError(f"The KV receiver failed: {item}")
        return item

    def send_probe(self, cmd: dict) -> dict:
        """`count` frames of a KV of `tokens` tokens (random values, the model's shape)."""
        mc = self.model.config
        kv = torch.randn(mc.num_hidden_layers, 2, cmd["tokens"], mc.num_key_value_heads,
                         mc.head_dim, dtype=self.model.dtype)  # fmt: skip
        sent = []
        for i in range(cmd["count"]):
            wire = send_handoff(self.sock, KVHandoff([0] * cmd["tokens"], 0, kv, {"probe": i}))
            sent.append(wire.total)
            spin(0.002)  # one at a time: a frame is received well within 2 ms
        return {"wire_bytes": sent}

    def recv_probe(self, cmd: dict) -> dict:
        out = []
        for _ in range(cmd["count"]):
            handoff, wire = self._get(self.probes, 30)
            out.append([handoff.meta["t_send"], handoff.meta["t_received"], wire.total])
        return {"frames": out}

    # --- calibration ---------------------------------------------------------------------
    def calibrate(self, cmd: dict) -> dict:
        """Per round and length n: a decode-only step of `decodes` sequences, then the same
        decodes with a prefill of n tokens joining them: [plain ms, mixed ms, plain CPU ms,
        mixed CPU ms] (CPU: this thread's). Each round moves n by a seeded offset within
        ±`jitter` tokens: as in a trace, a prompt length is seldom seen twice (a new size
        costs fresh allocations), and a symmetric offset leaves the median at n."""
        eng, gen = self.engine(), torch.Generator().manual_seed(cmd["seed"])
        vocab = self.model.config.vocab_size
        rounds = cmd["rounds"]
        steps = rounds * len(cmd["lengths"]) * 2 + 4
        for _ in range(cmd["decodes"]):
            eng.add_request(torch.randint(3, vocab, (16,), generator=gen).tolist(), greedy(steps))
        eng.step()  # their prefill
        out = []
        for _ in range(rounds):
            row = []
            for n in cmd["lengths"]:
                jitter = min(cmd.get("jitter", 0), n - 1)
                n += int(torch.randint(-jitter, jitter + 1, (1,), generator=gen))
                plain = timed_step(eng)
                eng.add_request(torch.randint(3, vocab, (n,), generator=gen).tolist(), greedy(1))
                mixed = timed_step(eng)
                row.append([plain["ms"], mixed["ms"], plain["cpu_ms"], mixed["cpu_ms"]])
            out.append(row)
        return {"rounds": out}

    # --- a trace -------------------------------------------------------------------------
    def trace(self, cmd: dict) -> dict:
        if cmd["mode"] == "disagg" and self.args.role == "decode":
            return self._decode_trace(cmd)
        return self._trace(cmd, send=cmd["mode"] == "disagg")

    def _trace(self, cmd: dict, send: bool) -> dict:
        """Requests arrive at t0 + arrival_s; steps run while any is unfinished. `send`:
        hand each request off right after its first token (the prefill role)."""
        eng, t0 = self.engine(), cmd["t0"]
        pending = sorted(cmd["requests"], key=lambda r: r["arrival_s"])
        ids: dict[int, dict] = {}  # engine id -> request
        times: dict[int, list[float]] = {}
        steps, frames = [], []
        while pending or eng.has_unfinished():
            now = time.perf_counter()
            while pending and t0 + pending[0]["arrival_s"] <= now:
                r = pending.pop(0)
                ids[eng.add_request(r["prompt"], greedy(r["max_tokens"]))] = r
            if not eng.has_unfinished():
                time.sleep(min(0.002, max(0.0, t0 + pending[0]["arrival_s"] - now)))
                continue
            step = timed_step(eng)
            firsts = [rid for rid in step["emitted"] if not times.get(ids[rid]["id"])]
            for rid in step["emitted"]:
                times.setdefault(ids[rid]["id"], []).append(step["t"])
            steps.append(step_record(step, [ids[rid]["id"] for rid in firsts]))
            for rid in firsts if send else []:
                r = ids[rid]
                handoff = eng.export_kv(rid)  # and releases it here
                handoff.meta = {"request": r["id"], "max_tokens": r["max_tokens"]}
                wire = send_handoff(self.sock, handoff)
                frames.append({"id": r["id"], "t_send": handoff.meta["t_send"],
                               "t_sent": time.perf_counter(), "header": wire.header,
                               "ids": wire.ids, "kv": wire.kv})  # fmt: skip
        return {"times": times, "steps": steps, "frames": frames}

    def _decode_trace(self, cmd: dict) -> dict:
        """Receive `expect` handoffs, import each between steps, decode them all."""
        eng, expect = self.engine(), cmd["expect"]
        received, backlog, imports = 0, [], []
        ids: dict[int, int] = {}
        times: dict[int, list[float]] = {}
        steps = []
        while received < expect or backlog or eng.has_unfinished():
            idle = not eng.has_unfinished() and not backlog
            while True:  # block briefly only when there is nothing to step
                try:
                    item = self.frames.get(timeout=0.05) if idle else self.frames.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, Exception):
                    raise RuntimeError(f"The KV receiver failed: {item}")
                backlog.append(item)
                received, idle = received + 1, False
            while backlog:
                handoff, wire = backlog[0]
                started = time.perf_counter()
                try:
                    rid = eng.add_prefilled(handoff, greedy(handoff.meta["max_tokens"]))
                except RuntimeError:  # full: decode some first (never when empty)
                    if not eng.has_unfinished():
                        raise
                    break
                backlog.pop(0)
                ids[rid] = handoff.meta["request"]
                imports.append({"id": ids[rid], "t_send": handoff.meta["t_send"],
                                "t_received": handoff.meta["t_received"],
                                "import_ms": (time.perf_counter() - started) * 1000,
                                "header": wire.header, "ids": wire.ids, "kv": wire.kv})  # fmt: skip
            if eng.has_unfinished():
                step = timed_step(eng)
                for rid in step["emitted"]:
                    times.setdefault(ids[rid], []).append(step["t"])
                steps.append(step_record(step, []))
        return {"times": times, "steps": steps, "imports": imports}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("prefill", "decode"), required=True)
    parser.add_argument("--socket", required=True, help="the Unix domain socket's path")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out, sys.stdout = sys.stdout, sys.stderr  # the protocol owns stdout

    def reply(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        worker = Worker(args)
    except Exception as exc:
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    reply({"ready": True, "threads": torch.get_num_threads()})
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd.get("cmd") not in COMMANDS:
                raise ValueError(f"unknown command {cmd.get('cmd')!r}; known: {COMMANDS}")
            reply(getattr(worker, cmd["cmd"])(cmd))
        except Exception as exc:
            traceback.print_exc()
            reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
