"""A local OpenAI-compatible server that answers like vLLM, for tests and `kimi-ops sandbox`.

It serves ``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus text with
vLLM's metric names) and ``POST /v1/chat/completions``, streamed as Server-Sent
Events in vLLM's chunk shape (ending ``data: [DONE]``) or as one JSON body. It runs
in a background thread on 127.0.0.1 and an ephemeral port::

    with OpenAIServer() as server:
        server.configure(first_token_delay=0.2)   # any Behaviour field, while running
        httpx.get(f"{server.url}/health")

What it can be made to do (see :class:`~bot.sandbox.openai_answers.Behaviour`):
answer well; be slow to the first token; fail with an HTTP status and a vLLM error
body; fail mid-stream with an error event in either of vLLM's shapes
(``fail_after_tokens``, ``error_shape``); cut the stream mid-answer
(``cut_after_tokens``) or end it without ``data: [DONE]`` (``omit_done``); answer
empty; answer as another model or list other models; omit the finish
reason; expose vLLM ≤ 0.6's prefix-cache hit-rate gauge instead of the counters
(``prefix_hit_rate_gauge``); count traffic it never served, to show an error-budget burn or a healthy busy
hour cheaply (:meth:`OpenAIServer.simulate`); saturate (first-token latency grows with concurrency, requests queue past
``max_running`` and get the overflow status past ``max_waiting``); call a tool or
answer JSON when asked; refuse on a marker or pattern; and hold requests before
their first token (:meth:`OpenAIServer.hold`) so a drain can be watched.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from bot.logs import logger_for
from bot.sandbox.openai_answers import (
    Answer,
    Behaviour,
    RequestError,
    check_context,
    compose,
    max_tokens,
    pieces,
    read_prompt,
)
from bot.sandbox.openai_engine import Engine, EngineStats, Overflow, Stopped, Ticket

log = logger_for(__name__)

ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 422: "UnprocessableEntityError",
               429: "TooManyRequestsError", 500: "InternalServerError", 503: "ServiceUnavailableError"}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # The stdlib's backlog of 5 drops simultaneous connects (the traffic gate's bursts) into
    # one-second SYN retries; a real server's backlog is far larger.
    request_queue_size = 1024
    engine: Engine
    users: Counter[str]
    users_lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    # -- plumbing --------------------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("openai stand-in: " + format, *args)

    @property
    def engine(self) -> Engine:
        return self.server.engine

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        # http.server answers a request line it could not parse (a client that hung up mid-line) before it sets
        # ``path``: that answer counts for no route.
        path = getattr(self, "path", "").split("?", 1)[0]
        if path == "/v1/chat/completions":
            self.engine.count_http(path, self.command, code)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Mapping[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode())

    def _error_body(self, status: int, message: str, kind: str | None, param: str | None) -> dict[str, Any]:
        info = {"message": message, "type": kind or ERROR_TYPES.get(status, "InternalServerError"), "param": param,
                "code": status}
        if self.engine.behaviour.error_shape == "flat":
            return {"object": "error", **info}
        return {"error": info}

    def _error(self, status: int, message: str, kind: str | None = None, param: str | None = None) -> None:
        self._json(status, self._error_body(status, message, kind, param))

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            raise RequestError(400, "BadRequestError", "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise RequestError(400, "BadRequestError", "the request body must be a JSON object")
        return body

    # -- routes ----------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(self.engine.behaviour.health_status, b"")
        elif path == "/v1/models":
            self._json(200, _model_list(self.engine.behaviour))
        elif path == "/metrics":
            self._send(200, self.engine.metrics_text(), CONTENT_TYPE_LATEST)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/v1/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        try:
            self._chat()
        except RequestError as exc:
            self._error(exc.status, exc.message, exc.kind, exc.param)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("openai stand-in: client went away")

    def _chat(self) -> None:
        body = self._body()
        if isinstance(body.get("user"), str):
            with self.server.users_lock:  # who sent it (the OpenAI ``user`` field), counted on arrival
                self.server.users[body["user"]] += 1
        behaviour = self.engine.behaviour
        model = body.get("model") or behaviour.served_model
        if model not in (behaviour.served_model, *behaviour.extra_models):
            raise RequestError(404, "NotFoundError", f"The model `{model}` does not exist.", "model")
        if behaviour.fail_status is not None:
            raise RequestError(behaviour.fail_status, ERROR_TYPES.get(behaviour.fail_status, "InternalServerError"),
                               behaviour.fail_message)
        prompt = read_prompt(body)
        check_context(behaviour, prompt)
        limit = max_tokens(body)  # validates before a slot is taken
        try:
            ticket = self.engine.admit(prompt, limit)
        except Overflow as exc:
            raise RequestError(behaviour.overflow_status, ERROR_TYPES.get(behaviour.overflow_status, "Overflow"),
                               str(exc)) from None
        except Stopped:
            raise RequestError(503, "ServiceUnavailableError", "the server is shutting down") from None
        behaviour = self.engine.behaviour  # a queued request is served as the server behaves now
        answer = compose(behaviour, body, prompt, f"{ticket.id:032x}")
        reason = "abort"
        try:
            if body.get("stream") is True:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(ticket, behaviour, answer, include_usage)
            else:
                self._complete(ticket, behaviour, answer)
            reason = _engine_reason(answer)
        except Stopped:
            self.close_connection = True
        finally:
            self.engine.finish(ticket, reason)

    # -- answers ---------------------------------------------------------------------------------------------

    def _emit_tokens(self, ticket: Ticket, count: int, each: Callable[[int], None]) -> None:
        """Pace ``count`` tokens: the first after the first-token delay, the rest one interval apart."""
        for index in range(count):
            if index == 0:
                self.engine.first_token(ticket)
            else:
                self.engine.next_token(ticket)
            each(index)

    def _stream(self, ticket: Ticket, behaviour: Behaviour, answer: Answer, include_usage: bool) -> None:
        model = behaviour.answer_model or behaviour.served_model
        head = {"id": f"chatcmpl-{ticket.id:032x}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": model}
        started = False

        def send(delta: dict[str, Any], finish: str | None = None, final: bool = False) -> None:
            nonlocal started
            if not started:
                # vLLM sends headers and the role chunk together with the first output.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                started = True
                self._event({**head, "choices": [_choice({"role": "assistant", "content": ""})]})
            choice = _choice(delta, finish)
            if final and finish is not None:
                choice["stop_reason"] = None
            self._event({**head, "choices": [choice]})

        reasoning, text, call = answer.reasoning_pieces, answer.pieces, answer.tool_call
        call_pieces = pieces(call.arguments) if call else ()
        steps: list[dict[str, Any]] = [{"reasoning_content": p} for p in reasoning]
        if call is not None:
            steps.append({"tool_calls": [{"index": 0, "id": call.id, "type": "function",
                                          "function": {"name": call.name, "arguments": ""}}]})
            steps += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in call_pieces]
        steps += [{"content": p} for p in text]
        limit = behaviour.fail_after_tokens
        cut = behaviour.cut_after_tokens
        shown = steps[:limit] if limit is not None else steps[:cut] if cut is not None else steps
        self._emit_tokens(ticket, len(shown), lambda i: send(shown[i]))
        if cut is not None and limit is None:
            if not shown:
                send({"content": ""})
            self.engine.finish(ticket, "abort")
            # A proxy or the pod dying mid-answer: the connection just ends, with neither finish reason nor [DONE].
            self.close_connection = True
            self.wfile.flush()
            return
        if limit is not None:
            if not shown:
                send({"content": ""})  # opens the stream: the error still arrives as an event with status 200
            self.engine.finish(ticket, "abort")
            # vLLM reports an error raised after the response started as one event, then ends the stream.
            self._event(self._error_body(500, behaviour.fail_message, "InternalServerError", None))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            return
        if not steps:
            self.engine.first_token(ticket)  # the end-of-sequence token is still a token
        send({"content": ""} if call is None else {}, answer.finish_reason, final=True)
        # The engine frees the slot when generation ends, before the last bytes reach the client
        # (as vLLM does); freeing it afterwards would reject a client's immediate next request.
        self.engine.finish(ticket, _engine_reason(answer))
        if include_usage:
            self._event({**head, "choices": [], "usage": _usage(ticket, answer)})
        if not behaviour.omit_done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, payload: Mapping[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _complete(self, ticket: Ticket, behaviour: Behaviour, answer: Answer) -> None:
        self._emit_tokens(ticket, max(1, answer.completion_tokens), lambda _: None)
        call = answer.tool_call
        message = {
            "role": "assistant",
            "content": None if call else "".join(answer.pieces),
            "refusal": None, "annotations": None, "audio": None, "function_call": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]
            if call else [],
            "reasoning_content": "".join(answer.reasoning_pieces) or None,
        }
        self.engine.finish(ticket, _engine_reason(answer))  # the slot frees before the answer is sent, as in _stream
        self._json(200, {
            "id": f"chatcmpl-{ticket.id:032x}", "object": "chat.completion", "created": int(time.time()),
            "model": behaviour.answer_model or behaviour.served_model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason,
                         "stop_reason": None}],
            "service_tier": None, "system_fingerprint": None, "usage": _usage(ticket, answer),
            "prompt_logprobs": None, "kv_transfer_params": None,
        })


def _engine_reason(answer: Answer) -> str:
    """The engine-level finish reason, as vLLM counts them in ``request_success``."""
    return "length" if answer.finish_reason == "length" else "stop"


def _choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _usage(ticket: Ticket, answer: Answer) -> dict[str, Any]:
    completion = answer.completion_tokens
    return {"prompt_tokens": ticket.prompt_tokens, "total_tokens": ticket.prompt_tokens + completion,
            "completion_tokens": completion, "prompt_tokens_details": None}


def _model_list(behaviour: Behaviour) -> dict[str, Any]:
    created = int(time.time())

    def card(name: str, parent: str | None) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": "/opt/ml/model",
                "parent": parent, "max_model_len": behaviour.max_model_len,
                "permission": [{"id": f"modelperm-{abs(hash(name)):x}", "object": "model_permission",
                                "created": created, "allow_create_engine": False, "allow_sampling": True,
                                "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                                "allow_fine_tuning": False, "organization": "*", "group": None,
                                "is_blocking": False}]}

    models = [card(behaviour.served_model, None)]
    models += [card(name, behaviour.served_model) for name in behaviour.extra_models]
    return {"object": "list", "data": models}


class OpenAIServer:
    """The stand-in, running in a background thread; use it as a context manager or start/stop it."""

    def __init__(self, behaviour: Behaviour | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 **changes: Any) -> None:
        self._initial = behaviour or Behaviour()
        if changes:
            self._initial = replace(self._initial, **changes)
        self.engine = Engine(self._initial)
        self._address = (host, port)
        self._users: Counter[str] = Counter()
        self._users_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the OpenAI stand-in is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OpenAIServer:
        if self._httpd is not None:
            return self
        httpd = _HTTPServer(self._address, _Handler)
        httpd.engine = self.engine
        httpd.users, httpd.users_lock = self._users, self._users_lock
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests in flight are abandoned (their clients see the connection close)."""
        if self._httpd is None:
            return
        self.engine.stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd, self._thread = None, None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- control ---------------------------------------------------------------------------------------------

    @property
    def behaviour(self) -> Behaviour:
        return self.engine.behaviour

    def configure(self, **changes: Any) -> Behaviour:
        """Change any :class:`Behaviour` field while serving (thread-safe); returns the new behaviour."""
        return self.engine.configure(**changes)

    def reset(self) -> None:
        """Back to the behaviour it started with, with a cold prefix cache and no hold."""
        self.engine.reset(self._initial)
        self.engine.release()

    def hold(self) -> None:
        """Keep admitted requests running before their first token until :meth:`release`."""
        self.engine.hold()

    def release(self) -> None:
        self.engine.release()

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def users(self) -> Counter[str]:
        """Chat completions received per OpenAI ``user`` field (requests without one are not counted)."""
        with self._users_lock:
            return Counter(self._users)

    def simulate(self, **traffic: Any) -> None:
        """Count traffic as served without serving it (:meth:`Engine.simulate`): a burn, or a healthy busy hour."""
        self.engine.simulate(**traffic)

    def wait_for(self, predicate: Callable[[EngineStats], bool], timeout: float = 10.0) -> bool:
        """Block until the server's state satisfies ``predicate`` (e.g. ``lambda s: s.running == 2``)."""
        return self.engine.wait_for(predicate, timeout)
