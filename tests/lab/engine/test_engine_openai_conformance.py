"""The engine server as the official `openai` client sees it (issue 20): the routes it calls,
the shapes it parses, and every refusal as the exception, `code` and `param` OpenAI gives.
Real servers in child processes (`spawn`); one with a KV pool of 2 blocks (32 tokens) makes
a real engine step fail once a sequence outgrows it, for the error that arrives mid-stream."""

from __future__ import annotations

import openai
import pytest

from lab.engine.server.launch import spawn
from lab.labs.common import tokenizer

pytestmark = pytest.mark.timeout(240)

ERROR_KEYS = {"message", "type", "param", "code"}
USER = [{"role": "user", "content": "def fib(n):"}]


@pytest.fixture(scope="module")
def client():
    with spawn() as url:
        yield openai.OpenAI(base_url=url, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def small_pool_client():
    with spawn("--num-blocks", "2", "--block-size", "16") as url:
        yield openai.OpenAI(base_url=url, api_key="x", max_retries=0)


def test_models_list_and_retrieve(client):
    listed = client.models.list().data
    assert [m.id for m in listed] == ["target"]
    card = client.models.retrieve("target")
    assert (card.id, card.object, card.owned_by) == ("target", "model", "inference-trainer")
    assert card.created == listed[0].created


@pytest.mark.parametrize("name", ["nope", "org/nope"])
def test_retrieving_an_unknown_model_is_model_not_found(client, name):
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve(name)
    error = caught.value
    assert error.status_code == 404
    assert (error.code, error.param, error.type) == (
        "model_not_found",
        "model",
        "invalid_request_error",
    )
    assert set(error.body) == ERROR_KEYS and repr(name) in error.body["message"]


def test_completions_streamed_and_not_agree(client):
    args = dict(model="target", prompt="def fib(n):", max_tokens=12, temperature=0)
    whole = client.completions.create(**args, extra_body={"ignore_eos": True})
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage.prompt_tokens == len(tokenizer().encode("def fib(n):").ids)
    assert whole.usage.completion_tokens == 12
    chunks = list(
        client.completions.create(
            **args,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == 12


def test_chat_completions_streamed_and_not_agree(client):
    args = dict(model="target", messages=USER, max_tokens=12, temperature=0)
    whole = client.chat.completions.create(**args, response_format={"type": "text"})
    message = whole.choices[0].message
    assert whole.object == "chat.completion" and message.role == "assistant"
    assert message.content and message.tool_calls is None
    chunks = list(client.chat.completions.create(**args, stream=True, tool_choice="none"))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}


@pytest.mark.parametrize(
    ("chat", "args", "code", "param"),
    [
        (True, {"tools": [TOOL]}, "unsupported_parameter", "tools"),
        (True, {"tool_choice": "auto"}, "unsupported_parameter", "tool_choice"),
        (True, {"tools": [TOOL], "stream": True}, "unsupported_parameter", "tools"),
        (
            True,
            {"response_format": {"type": "json_object"}},
            "unsupported_value",
            "response_format",
        ),
        (True, {"response_format": JSON_SCHEMA}, "unsupported_value", "response_format"),
        (
            False,
            {"extra_body": {"response_format": {"type": "json_object"}}},
            "unsupported_value",
            "response_format",
        ),
        (False, {"prompt": ""}, "invalid_value", "prompt"),
        (False, {"prompt": "", "stream": True}, "invalid_value", "prompt"),
        (True, {"messages": [{"role": "user", "content": ""}]}, "invalid_value", "messages"),
        (
            True,
            {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": []}]},
            "invalid_value",
            "messages",
        ),
        (True, {"messages": []}, "empty_array", "messages"),
        (False, {"max_tokens": 0}, "integer_below_min_value", "max_tokens"),
        (False, {"max_tokens": 5000}, "invalid_value", "max_tokens"),
        (True, {"max_completion_tokens": 512}, "invalid_value", "max_completion_tokens"),
        (False, {"temperature": 3}, "decimal_above_max_value", "temperature"),
        (False, {"prompt": [5] * 500, "max_tokens": 50}, "context_length_exceeded", "max_tokens"),
        (False, {"prompt": [5] * 600}, "context_length_exceeded", "prompt"),
        (
            True,
            {"messages": [{"role": "user", "content": "x " * 600}]},
            "context_length_exceeded",
            "messages",
        ),
    ],
)
def test_refusals_are_bad_requests_with_code_and_param(client, chat, args, code, param):
    base = {"model": "target", "max_tokens": 4} | ({"messages": USER} if chat else {"prompt": "a"})
    create = client.chat.completions.create if chat else client.completions.create
    with pytest.raises(openai.BadRequestError) as caught:
        create(**(base | args))
    error = caught.value
    assert error.status_code == 400
    assert (error.code, error.param, error.type) == (code, param, "invalid_request_error")
    assert set(error.body) == ERROR_KEYS
    assert error.body["message"].endswith(".")  # a sentence, not a bare validator string


def test_context_errors_say_the_numbers(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="target", prompt=[5] * 500, max_tokens=50)
    message = caught.value.body["message"]
    assert "maximum context length is 512 tokens" in message
    assert "550 tokens (500 in the prompt, 50 in the completion)" in message


def _stream_until_error(stream, text_of) -> tuple[str, openai.APIError]:
    text = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            text.append(text_of(chunk))
    return "".join(text), caught.value


@pytest.mark.parametrize("chat", [False, True])
def test_an_engine_error_mid_stream_carries_type_param_and_code(small_pool_client, chat):
    """Prompt + 60 tokens outgrow the 32-token pool: the step that needs a third block fails
    after ~25 tokens have been streamed; the client raises the in-band error event."""
    client = small_pool_client
    common = {
        "model": "target",
        "max_tokens": 60,
        "stream": True,
        "extra_body": {"ignore_eos": True},
    }
    if chat:
        stream = client.chat.completions.create(messages=USER, **common)
        text, error = _stream_until_error(stream, lambda c: c.choices[0].delta.content or "")
    else:
        stream = client.completions.create(prompt="def fib(n):", **common)
        text, error = _stream_until_error(stream, lambda c: c.choices[0].text)
    assert text, "the error came before any token: not mid-stream"
    assert not isinstance(error, openai.APIStatusError)  # the 200 had already been sent
    assert set(error.body) == ERROR_KEYS
    assert (error.type, error.code, error.param) == ("server_error", "engine_error", None)
    assert "needs more KV blocks than the pool" in error.message
    # the engine thread survives: a request that fits the pool still completes
    ok = client.completions.create(model="target", prompt="def fib(n):", max_tokens=4)
    assert ok.choices[0].finish_reason in ("length", "stop")


def test_the_same_engine_error_without_streaming_is_a_500(small_pool_client):
    with pytest.raises(openai.InternalServerError) as caught:
        small_pool_client.completions.create(
            model="target", prompt="def fib(n):", max_tokens=60, extra_body={"ignore_eos": True}
        )
    error = caught.value
    assert (error.status_code, error.code, error.param) == (500, "engine_error", None)
    assert set(error.body) == ERROR_KEYS
