"""What fits the context: a prompt's size, refused before tokenising when it cannot fit,
and `max_tokens`, checked against the room the prompt leaves (OpenAI's 400 messages)."""

from __future__ import annotations

from typing import Any

from lab.engine.server.protocol import APIError, ChatRequest, CompletionRequest, GenerationRequest

# A prompt longer than max_model_len x this many characters cannot fit the context, whatever
# it says: no token of a byte-level BPE covers more characters than its vocabulary string has
# bytes (the bundled tokenizer's longest is 45), so such prompts are refused before tokenising
# (a 1 MB prompt used to hold the event loop for seconds). Raised to the vocabulary's longest
# token if a tokenizer has longer ones.
CHARS_PER_TOKEN_BOUND = 64


def prompt_char_limit(engine) -> tuple[int, int]:
    """(the longest prompt in characters that could still fit the context, the bound on
    characters per token it assumes)."""
    longest = max((len(t) for t in engine.tokenizer.get_vocab()), default=1)
    per_token = max(CHARS_PER_TOKEN_BOUND, longest)
    return engine.config.max_model_len * per_token, per_token


def _param(req: GenerationRequest) -> str:
    return "messages" if isinstance(req, ChatRequest) else "prompt"


def check_prompt_size(
    req: GenerationRequest,
    prompt: str | list[int],
    *,
    max_model_len: int,
    char_limit: int,
    chars_per_token: int,
) -> None:
    """Refuse, before any tokenising, a prompt too long to fit the context whatever
    its tokens (text: by characters; token ids: by count)."""
    limit = max_model_len
    if isinstance(prompt, str) and len(prompt) > char_limit:
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens, so a prompt can be at "
            f"most {char_limit} characters ({limit} tokens x at most {chars_per_token} "
            f"characters per token); yours is {len(prompt)} characters. Please reduce "
            "the prompt.",
            param=_param(req),
            code="context_length_exceeded",
        )
    if isinstance(prompt, list) and len(prompt) >= limit:
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"is {len(prompt)} tokens, which leaves no room for a completion. Please reduce "
            "the prompt.",
            param=_param(req),
            code="context_length_exceeded",
        )


def _max_tokens(req: GenerationRequest) -> tuple[int | None, str]:
    """The completion's token cap the client sent, and the field it came in."""
    if getattr(req, "max_completion_tokens", None) is not None:
        return req.max_completion_tokens, "max_completion_tokens"
    return req.max_tokens, "max_tokens"


def sampling_params(req: GenerationRequest, prompt_len: int, *, max_model_len: int) -> Any:
    """The engine's SamplingParams for a request whose prompt has `prompt_len` tokens;
    APIError 400 when the prompt and `max_tokens` do not fit the context (OpenAI's codes:
    `invalid_value` for a max_tokens no prompt leaves room for, `context_length_exceeded`
    for a prompt, or prompt + max_tokens, past the context)."""
    from lab.engine.sampler import SamplingParams

    limit = max_model_len
    max_tokens, field = _max_tokens(req)
    if prompt_len >= limit:  # no room for even one token (the default would be <= 0)
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"is {prompt_len} tokens, which leaves no room for a completion. Please reduce "
            "the prompt.",
            param=_param(req),
            code="context_length_exceeded",
        )
    if max_tokens is not None and max_tokens >= limit:
        raise APIError(
            400,
            f"{field} is too large: {max_tokens}. This model's maximum context length is "
            f"{limit} tokens, which must hold the prompt too, so {field} can be at most "
            f"{limit - 1} (here {limit - prompt_len}, for a {prompt_len}-token prompt).",
            param=field,
            code="invalid_value",
        )
    if max_tokens is None:
        max_tokens = (
            min(16, limit - prompt_len)
            if isinstance(req, CompletionRequest)
            else limit - prompt_len
        )
    if prompt_len + max_tokens > limit:
        raise APIError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} in "
            f"the completion). Please reduce the prompt or {field}.",
            param=field,
            code="context_length_exceeded",
        )
    return SamplingParams(
        temperature=req.temperature,
        top_k=req.top_k,
        top_p=req.top_p,
        seed=req.seed,
        max_tokens=max_tokens,
        ignore_eos=req.ignore_eos,
    )
