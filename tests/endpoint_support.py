"""What the endpoint adapter's tests of ``/metrics`` and drain share (``tests/adapters/test_endpoint_{metrics,drain}.py``):
a live OpenAI-compatible stand-in per test (``server``), an endpoint pointing at it (``endpoint``), and chat
requests sent to it, on a thread when they are to be held running.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from bot.config import EndpointSettings
from bot.sandbox.openai_server import OpenAIServer

SERVED = "Kimi-K3"


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(served_model=SERVED) as running:
        yield running
        running.release()


@pytest.fixture()
def endpoint(server: OpenAIServer) -> EndpointSettings:
    return EndpointSettings(name="kimi-test", url=server.url, served_model_name=SERVED)


def chat(url: str, text: str, *, stream: bool = True) -> httpx.Response:
    body = {"model": SERVED, "messages": [{"role": "user", "content": text}], "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def chats_in_background(url: str, texts: list[str]) -> list[threading.Thread]:
    threads = [threading.Thread(target=chat, args=(url, text), daemon=True) for text in texts]
    for thread in threads:
        thread.start()
    return threads
