"""The OpenAI wire protocol: request bodies (pydantic), read and checked from HTTP, and the
OpenAI-shaped error every refusal becomes."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from starlette.requests import Request
from starlette.responses import JSONResponse

MAX_BODY_BYTES = 1 << 20


# --- errors -----------------------------------------------------------------------------
class APIError(Exception):
    """An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )
        self.headers = headers or {}

    def body(self) -> dict:
        """The JSON both a response body and an in-stream SSE error event carry."""
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": error | {"code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def refuse(code: str, message: str) -> PydanticCustomError:
    """A validator's refusal; `code` becomes the error's OpenAI `code` (`validation_error`)."""
    return PydanticCustomError(code, message)


# --- request schemas --------------------------------------------------------------------
class GenerationRequest(BaseModel):
    """Sampling fields shared by both endpoints. Unknown fields are ignored (as vLLM does)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=0)  # vLLM extension; 0 = all tokens
    n: int = 1
    stream: bool = False
    stream_options: dict[str, bool] | None = None
    stop: str | list[str] | None = Field(default=None, validate_default=True)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    ignore_eos: bool = False  # vLLM extension (benchmarks)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: Any = None
    user: str | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int) -> int:
        if n != 1:
            raise refuse("unsupported_value", "only n=1 is supported by this engine")
        return n

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop: str | list[str] | None) -> list[str]:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4:
            raise refuse("array_above_max_length", "at most 4 stop sequences")
        if any(not s for s in stops):
            raise refuse("invalid_value", "stop sequences must be non-empty strings")
        return stops

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, value: float) -> float:
        if value != 0:
            raise refuse("unsupported_value", "penalties are not supported by this engine (use 0)")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: Any) -> Any:
        if value not in (None, False, 0):
            raise refuse("unsupported_value", "logprobs are not supported by this engine")
        return None

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        kind = (value or {}).get("type", "text")
        if kind != "text":
            raise refuse(
                "unsupported_value",
                f"response_format type {kind!r} is not supported by this engine (it cannot "
                "constrain its output); use type 'text' or leave response_format out",
            )
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("continuous_usage_stats"))


class CompletionRequest(GenerationRequest):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: Any) -> str | list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            if len(prompt) != 1:
                message = "send one prompt per request (batched prompts: use several)"
                raise refuse("unsupported_value", message)
            prompt = prompt[0]
        if not prompt:
            raise refuse("invalid_value", "the prompt is empty; send at least one character")
        return prompt

    @field_validator("echo", mode="after")
    @classmethod
    def _no_echo(cls, echo: bool) -> bool:
        if echo:
            raise refuse("unsupported_value", "echo is not supported by this engine")
        return echo

    @field_validator("suffix", "best_of")
    @classmethod
    def _unsupported(cls, value: Any) -> Any:
        if value not in (None, 1):
            raise refuse("unsupported_parameter", "not supported by this engine")
        return value


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise refuse("unsupported_value", "only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(GenerationRequest):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # Refused, never ignored: a client sending these expects tool calls this engine cannot make.
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None  # the deprecated forms of tools and tool_choice
    function_call: Any = None

    @field_validator("messages")
    @classmethod
    def _some_text(cls, messages: list[Message]) -> list[Message]:
        if not any(m.text() for m in messages):
            raise refuse("invalid_value", "every message is empty; send some text to continue")
        return messages

    @field_validator("tools", "functions")
    @classmethod
    def _no_tools(cls, value: Any) -> Any:
        if value not in (None, []):
            raise refuse("unsupported_parameter", "tool calling is not supported by this engine")
        return value

    @field_validator("tool_choice", "function_call")
    @classmethod
    def _no_tool_choice(cls, value: Any) -> Any:
        if value not in (None, "none"):
            raise refuse(
                "unsupported_parameter",
                "tool calling is not supported by this engine (only 'none' is accepted)",
            )
        return value

    def prompt_text(self) -> str:
        return "\n".join(m.text() for m in self.messages)


# pydantic's error types -> OpenAI's codes (refusals raised with `refuse` carry their own)
_BELOW = ("greater_than", "greater_than_equal")
_ABOVE = ("less_than", "less_than_equal")
_CODES = {
    "missing": "missing_required_parameter",
    "too_long": "array_above_max_length",
    "literal_error": "invalid_value",
}
_REFUSALS = {  # the codes `refuse` is called with
    "unsupported_value",
    "unsupported_parameter",
    "invalid_value",
    "array_above_max_length",
}


def _openai_code(error: dict) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _BELOW + _ABOVE:
        bound = next(iter(ctx.values()), 0)
        number = "decimal" if isinstance(bound, float) else "integer"
        return f"{number}_{'below_min' if kind in _BELOW else 'above_max'}_value"
    if kind == "too_short":
        return "empty_array" if error.get("input") == [] else "array_below_min_length"
    if kind.endswith(("_type", "_parsing")) or kind.startswith("union"):
        return "invalid_type"
    return kind if kind in _REFUSALS else _CODES.get(kind, "invalid_value")


def validation_error(exc: ValidationError) -> APIError:
    """The first failing field as a 400: `param` names it, `code` is OpenAI's word for what
    is wrong with it (`integer_below_min_value`, `invalid_type`, `unsupported_value`...)."""
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first.get("loc", ())) or None
    message = first.get("msg", "invalid request").removeprefix("Value error, ")
    if first["type"] in _BELOW + _ABOVE:
        message += f", got {first.get('input')!r}"
    text = f"{param}: {message}." if param else f"{message}."
    return APIError(400, text, param=param, code=_openai_code(first))


async def parse_request(
    request: Request, schema: type[BaseModel], *, model_name: str, api_key: str | None
) -> Any:
    """The request's body as `schema`, once the API key, the body's size, its JSON and the
    model it names have been checked; APIError (401, 400, 413, 404) otherwise."""
    if api_key and request.headers.get("authorization") != f"Bearer {api_key}":
        raise APIError(
            401,
            "Missing or wrong API key.",
            type_="authentication_error",
            code="invalid_api_key",
        )
    data = _json_object(await _body(request))
    try:
        req = schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if req.model != model_name:
        raise model_not_found(req.model, model_name)
    return req


def model_not_found(asked: str, served: str) -> APIError:
    return APIError(
        404,
        f"The model {asked!r} does not exist; this server has {served!r}.",
        param="model",
        code="model_not_found",
    )


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length") or "0"
    if not length.isdigit():  # a proxy or a hand-made request; uvicorn refuses these
        raise APIError(400, "The Content-Length header is not a number.")
    if int(length) > MAX_BODY_BYTES:
        raise APIError(413, f"Request body over {MAX_BODY_BYTES} bytes.")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise APIError(413, f"Request body over {MAX_BODY_BYTES} bytes.")
    return body


def _json_object(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise APIError(400, "The body is not valid JSON.") from None
    except RecursionError:  # e.g. 5,000 nested brackets
        raise APIError(400, "The body's JSON is nested too deeply.") from None
    if not isinstance(data, dict):
        raise APIError(400, "The body must be a JSON object.")
    return data
