"""Text out of tokens: incremental detokenization, and OpenAI `stop` strings."""

from __future__ import annotations

import time


class Detokenizer:
    """Incremental detokenization (as vLLM's): text for new tokens only, holding back a
    token that ends in the middle of a UTF-8 character."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.prefix_offset = self.read_offset = 0
        self.seconds = 0.0

    def add(self, tokens: list[int]) -> str:
        started = time.perf_counter()
        self.tokens.extend(tokens)
        decode = self.tokenizer.decode
        prefix = decode(self.tokens[self.prefix_offset : self.read_offset])
        full = decode(self.tokens[self.prefix_offset :])
        delta = ""
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        self.seconds += time.perf_counter() - started
        return delta


class StopChecker:
    """OpenAI `stop` strings: text is released only once no stop string can start in it."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, delta: str, final: bool = False) -> str:
        """Text that can be released now; sets `stopped` when a stop string appears."""
        start = max(0, len(self.text) - self.hold)
        self.text += delta
        hits = [i for s in self.stops if (i := self.text.find(s, start)) >= 0]
        if hits:
            self.text, self.stopped = self.text[: min(hits)], True
        end = len(self.text) if (final or self.stopped) else len(self.text) - self.hold
        out = self.text[self.sent : max(end, self.sent)]
        self.sent += len(out)
        return out
