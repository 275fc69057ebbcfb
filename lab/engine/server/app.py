"""The routes: `POST /v1/completions` and `/v1/chat/completions`, `GET /v1/models` and
`/v1/models/{id}`, `/health` and `/metrics`, and the handlers that turn every error into
OpenAI-shaped JSON.
`build_app(served)` puts them in one Starlette app; handlers find `served` on `app.state`."""

from __future__ import annotations

import time

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from lab.engine.server.limits import check_prompt_size, prompt_char_limit, sampling_params
from lab.engine.server.protocol import (
    APIError,
    ChatRequest,
    CompletionRequest,
    check_api_key,
    model_not_found,
    parse_request,
)
from lab.engine.server.responses import Run, respond
from lab.engine.server.served import Served


def tokenize(engine, prompt: str | list[int]) -> list[int]:
    """Runs in a worker thread (anyio's pool): a long prompt must not hold the loop."""
    if isinstance(prompt, str):
        return engine.tokenizer.encode(prompt).ids
    vocab = engine.model.config.vocab_size
    if any(not 0 <= t < vocab for t in prompt):
        raise APIError(400, f"prompt: token ids must be in [0, {vocab}).", param="prompt")
    return list(prompt)


async def generate(request: Request, chat: bool) -> Response:
    """Parse, check and tokenize the prompt, hand it to the engine, answer."""
    t0 = time.perf_counter()
    served: Served = request.app.state.served
    engine = served.worker.engine
    schema = ChatRequest if chat else CompletionRequest
    req = await parse_request(request, schema, model_name=served.model_name, api_key=served.api_key)
    prompt = req.prompt_text() if chat else req.prompt
    char_limit, chars_per_token = request.app.state.prompt_char_limit
    limit = engine.config.max_model_len
    check_prompt_size(
        req, prompt, max_model_len=limit, char_limit=char_limit, chars_per_token=chars_per_token
    )
    tokens = await anyio.to_thread.run_sync(tokenize, engine, prompt)
    tokenized = time.perf_counter()
    params = sampling_params(req, len(tokens), max_model_len=limit)
    run = Run(served, req, chat, t0, tokenized)
    run.handle = served.worker.submit(tokens, params)  # from here on, run.close() must follow
    return await respond(run, request.receive)


async def completions(request: Request) -> Response:
    return await generate(request, chat=False)


async def chat_completions(request: Request) -> Response:
    return await generate(request, chat=True)


def model_card(served: Served) -> dict:
    return {
        "id": served.model_name,
        "object": "model",
        "created": served.created,
        "owned_by": "inference-trainer",
        "max_model_len": served.worker.engine.config.max_model_len,
    }


async def models(request: Request) -> Response:
    check_api_key(request, request.app.state.served.api_key)
    return JSONResponse({"object": "list", "data": [model_card(request.app.state.served)]})


async def model(request: Request) -> Response:
    """One model's card (`client.models.retrieve`); 404 `model_not_found` for another id."""
    served: Served = request.app.state.served
    check_api_key(request, served.api_key)
    asked = request.path_params["model"]
    if asked != served.model_name:
        raise model_not_found(asked, served.model_name)
    return JSONResponse(model_card(served))


async def health(request: Request) -> Response:
    worker = request.app.state.served.worker
    if not worker.alive:
        return JSONResponse({"status": "engine thread stopped", "error": worker.error}, 503)
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """Prometheus text: the worker's counters (`_total`) and gauges."""
    worker = request.app.state.served.worker
    lines = []
    for name, value in sorted(worker.snapshot().items()):
        kind = "counter" if name in worker.counters else "gauge"
        metric = f"mini_engine_{name}" + ("_total" if kind == "counter" else "")
        lines += [f"# TYPE {metric} {kind}", f"{metric} {value:g}"]
    choice = request.app.state.served.dtype
    if choice is not None:  # which dtype runs, and why (lab.engine.dtypes)
        why = choice.describe().replace("\\", "\\\\").replace('"', '\\"')
        lines += ["# TYPE mini_engine_dtype_info gauge",
                  f'mini_engine_dtype_info{{dtype="{choice.dtype}",why="{choice.why}",'
                  f'detail="{why}"}} 1']  # fmt: skip
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


async def api_error(request: Request, exc: APIError) -> Response:
    return exc.response()


async def http_error(request: Request, exc: HTTPException) -> Response:
    type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    message = {
        404: f"No route {request.url.path}.",
        405: f"{request.method} is not allowed on {request.url.path}.",
    }.get(exc.status_code, str(exc.detail))
    return APIError(exc.status_code, message, type_=type_).response()


async def server_error(request: Request, exc: Exception) -> Response:
    return APIError(
        500, f"Internal error: {type(exc).__name__}.", type_="server_error", code="internal_error"
    ).response()


def build_app(served: Served) -> Starlette:
    """The OpenAI-compatible API over `served` (its engine thread already started)."""
    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),  # ids may hold a "/"
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            APIError: api_error,
            HTTPException: http_error,
            Exception: server_error,
        },
    )
    app.state.served = served
    app.state.prompt_char_limit = prompt_char_limit(served.worker.engine)
    return app
