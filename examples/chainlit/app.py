"""A Chainlit chat in front of tern: the official `openai` AsyncOpenAI client
pointed at `tern serve` (TERN_BASE_URL, default http://127.0.0.1:8000/v1;
TERN_API_KEY when the server has a key; TERN_MAX_TOKENS, TERN_SYSTEM_PROMPT), answers streamed token by token with
msg.stream_token, the conversation kept in the Chainlit session, and a status
line under each answer: tokens in, tokens out, time to first token, total
time, tokens per second.

    pip install -r requirements.txt && chainlit run app.py
"""

import os
import time

import chainlit as cl
from openai import AsyncOpenAI

BASE_URL = os.environ.get("TERN_BASE_URL", "http://127.0.0.1:8000/v1")
API_KEY = os.environ.get("TERN_API_KEY", "none")  # the client needs a value; tern ignores it without --api-key
SYSTEM_PROMPT = os.environ.get("TERN_SYSTEM_PROMPT", "")
# Unset: answers may run to the end of the context, as the server decides.
MAX_TOKENS = int(os.environ["TERN_MAX_TOKENS"]) if os.environ.get("TERN_MAX_TOKENS") else None

client = AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY)


def format_ms(ms):
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"


def status_line(usage, timings):
    """The line under an answer, from the stream's `usage` and tern's `tern` timings."""
    return (f"{usage.prompt_tokens} tokens in · {usage.completion_tokens} out · "
            f"{format_ms(timings['ttft_ms'])} to first token · {format_ms(timings['total_ms'])} total · "
            f"{timings['tokens_per_second']:.1f} tokens/s")


@cl.on_chat_start
async def start():
    models = await client.models.list()
    cl.user_session.set("model", models.data[0].id)
    history = [{"role": "system", "content": SYSTEM_PROMPT}] if SYSTEM_PROMPT else []
    cl.user_session.set("history", history)


@cl.on_message
async def answer(message: cl.Message):
    history = cl.user_session.get("history")
    history.append({"role": "user", "content": message.content})
    reply = cl.Message(content="")
    started = time.monotonic()
    first_token_at = None
    usage = timings = None
    stream = await client.chat.completions.create(
        model=cl.user_session.get("model"), messages=history, max_tokens=MAX_TOKENS, stream=True,
        stream_options={"include_usage": True})
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                if first_token_at is None:
                    first_token_at = time.monotonic()
                await reply.stream_token(choice.delta.content)
        if chunk.usage:
            usage = chunk.usage
        extra = chunk.model_extra or {}
        if "tern" in extra:
            timings = extra["tern"]
    text = reply.content
    history.append({"role": "assistant", "content": text})
    if usage is not None:
        if timings is None:  # a server without tern's timings: measured here
            total_ms = (time.monotonic() - started) * 1000
            ttft_ms = ((first_token_at or time.monotonic()) - started) * 1000
            decode_s = max(total_ms - ttft_ms, 1e-3) / 1000
            timings = {"ttft_ms": ttft_ms, "total_ms": total_ms,
                       "tokens_per_second": max(usage.completion_tokens - 1, 0) / decode_s}
        await reply.stream_token("\n\n---\n*" + status_line(usage, timings) + "*")
    await reply.send()
