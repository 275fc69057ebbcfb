"""The engine behind an OpenAI-compatible HTTP API:
`python -m lab.engine.server --model lab/engine/weights/target --port 8100`.

Routes: `POST /v1/completions`, `POST /v1/chat/completions` (stream true or false; SSE
chunks ending with `data: [DONE]`; `usage` with prompt and completion tokens), `GET
/v1/models` and `/v1/models/{id}`, `GET /health`, `GET /metrics` (Prometheus text: counters
and gauges). What is refused, with which OpenAI error code: docs/ENGINE.md.

How a request flows (the hops a client can draw as a waterfall; each response carries them
in a `Server-Timing` header and, for streams, in the final chunk's `server_timing`):

    tokenize  the handler encodes the prompt (in a worker thread, never on the event loop)
    queue     submitted to the engine thread -> first scheduled in an engine step
    prefill   first scheduled -> first token sampled (several steps if chunked)
    decode    first token -> last token
    stream    last token -> response complete (final detokenize, last writes)

These five are sequential and sum to `total`. `detokenize` (time spent turning tokens into
text, summed) overlaps decode in a stream and is reported beside them.

The engine is not thread-safe, so it lives in one thread (`EngineWorker`) that owns it: the
event loop hands requests and aborts over an inbox, and the worker hands tokens back with one
`call_soon_threadsafe` per step. Admission is bounded: at most `max_num_seqs` run and
`max_queue` wait; beyond that a request gets 429 at once, never an unbounded pile-up.

Abort on disconnect (as in vLLM and mini-sglang): while a response is pending, the handler
also listens for `http.disconnect`; when a client goes away the request is aborted before the
engine's next step, so at most the step already running produces a token for nobody and the
sequence's KV blocks are freed at once. `--no-abort-on-disconnect` keeps decoding to the end
instead (the contrast the cancellation labs measure). Counters: `aborted_requests`,
`tokens_after_disconnect` (tokens generated after the disconnect was noticed).

Chat requests use a plain template (the bundled model is a code model with no chat format):
the messages' contents joined by newlines.

One concept per module:

    protocol.py   request bodies (pydantic), reading them from HTTP, OpenAI-shaped APIError
    limits.py     what fits the context: prompt size before tokenising, max_tokens after
    worker.py     EngineWorker, the thread that owns and steps the engine; Handle
    text.py       Detokenizer (incremental) and StopChecker (`stop` strings)
    timing.py     HOPS and the Server-Timing header (plain Python: labs import it)
    responses.py  Run (one request's events -> OpenAI JSON or SSE chunks), SSEResponse
    served.py     Served (engine thread + model name + API key), make_served, WEIGHTS
    app.py        the route handlers and build_app
    __main__.py   the command line
    launch.py     spawn a server as a child process and wait on it, read its /metrics
                  (labs, tests, benches; imports no Starlette and no torch)

This `__init__` imports nothing, so importing `launch` or `timing` stays light.
"""
