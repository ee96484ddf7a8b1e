"""A simulated Anthropic provider, so vcloud can be shown without an API key.

Contract
--------
``Simulator`` is a small aiohttp server on a free loopback port, run in a
background thread with its own event loop (``start()`` / ``stop()``; ``url`` is
its base URL). ``python manage.py vc demo`` points an account's
``upstream_anthropic`` at it; the official ``anthropic`` SDK can call it
directly too. It speaks just enough of the Messages API:

- ``POST /v1/messages``: a JSON message, or with ``"stream": true`` the SSE
  sequence message_start, content_block_start, content_block_delta (one text
  delta per word), content_block_stop, message_delta (stop reason and usage),
  message_stop.
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``.
- ``GET /v1/models``: the one model it pretends to be.
- Anything else: Anthropic's 404 error shape.

Any credential is accepted and none is checked or kept.

Replies are deterministic, short and derived from the latest user text (the
last text block of the last user message, so a recall block vcloud put in front
of it is context, not the question). A statement is acknowledged by repeating
its most informative sentence; a question is answered with the sentence of the
rest of the prompt that shares the most words with it (the latest one on a
tie, so a changed fact wins), or with "I don't see that here" when nothing in
the prompt matches. So the replies show what the payload held. Their own
wording sticks to filler words, so it never becomes a topic of the memory.

Usage: tokens are characters / 4 of the prompt (tools, system, messages as
JSON); output tokens are words of the reply. Prompt caching follows
Anthropic's explicit breakpoints: each ``cache_control`` mark caches the
prompt up to the end of its block; a later request reads the longest cached
prefix it repeats exactly, ending at one of its marks or up to 20 blocks
before one, and writes its own marked prefixes beyond that; prefixes under
the model's minimum (1,024 tokens; 4,096 for Opus 4.5, the model the demo
uses, and Haiku 4.5) are not cached, and nothing expires. ``served`` counts answered
generation requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from aiohttp import web

MODEL = "claude-opus-4-5"
# Anthropic's smallest cacheable prefix: 4,096 tokens for these, 1,024 for the others.
MIN_CACHE_TOKENS = {"claude-opus-4-5": 4096, "claude-haiku-4-5": 4096}
LOOKBACK_BLOCKS = 20  # how far before a mark Anthropic looks for a cached prefix
_CACHE_ENTRIES = 256
_WORD = re.compile(r"[a-z0-9][a-z0-9'$,.:-]*[a-z0-9]|[a-z0-9]", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
# Markers, tags, dates and labels of recalled lines, and openings the replies
# should not repeat.
_NOISE = re.compile(
    r"<!--.*?-->|</?[a-z-]+>|\[\d{4}[-/]\d\d[-/]\d\d[^\]]*\]\s*"
    r"|\b(?:user|assistant|summary of [\w -]+|Okay, got it|You said|By the way):\s*",
    re.IGNORECASE,
)
_NUMERIC = re.compile(r"\W*(when|how (much|many|long)|what time)\b", re.IGNORECASE)
# fmt: off
_STOP = frozenset({
    "about", "after", "again", "also", "because", "been", "before", "being", "could", "did",
    "does", "doing", "from", "have", "just", "know", "like", "more", "most", "much", "need",
    "only", "other", "over", "should", "some", "still", "than", "that", "their", "them", "then",
    "there", "these", "they", "this", "those", "very", "want", "were", "what", "when", "where",
    "which", "while", "will", "with", "would", "your", "yours", "you", "the", "and", "for",
    "are", "was", "our", "out", "how", "can", "who", "whom", "whose", "why", "now", "many",
    "tell", "remind",
})
# fmt: on


@dataclass(frozen=True)
class Usage:
    total: int
    cache_read: int
    cache_write: int
    output: int

    def wire(self) -> dict[str, int]:
        return {
            "input_tokens": self.total - self.cache_read - self.cache_write,
            "cache_creation_input_tokens": self.cache_write,
            "cache_read_input_tokens": self.cache_read,
            "output_tokens": self.output,
        }


class Simulator:
    """The simulated provider; see the module docstring."""

    def __init__(self, *, latency: float = 0.0) -> None:
        self.latency = latency  # seconds before a reply starts, to look like a model
        self.served = 0
        self._cache: OrderedDict[str, None] = OrderedDict()  # hashes of cached prefixes
        self._port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Simulator:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(sock, ready), name="vc-simulator", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the simulated provider did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)
        self._thread = self._loop = None

    def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._run(sock, ready))
        finally:
            self._loop.close()

    async def _run(self, sock: socket.socket, ready: threading.Event) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self._stopped = asyncio.Event()
        ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    # ------------------------------------------------------------ routes

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        if body is None:
            return _error(400, "invalid_request_error", "the body is not a JSON object")
        if self.latency:
            await asyncio.sleep(self.latency)
        text = reply_text(body.get("messages"), body.get("system"))
        usage = self._usage(body, text)
        self.served += 1
        message = {
            "id": f"msg_sim{self.served:08d}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or MODEL),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage.wire(),
        }
        if body.get("stream") is True:
            return await _stream(request, message)
        return web.json_response(message)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        if body is None:
            return _error(400, "invalid_request_error", "the body is not a JSON object")
        prompt, _, _ = _prompt_pieces(body)
        return web.json_response({"input_tokens": _tokens(prompt)})

    async def _models(self, request: web.Request) -> web.Response:
        model = {
            "type": "model",
            "id": MODEL,
            "display_name": "Simulated Claude",
            "created_at": "2025-09-29T00:00:00Z",
        }
        return web.json_response(
            {"data": [model], "has_more": False, "first_id": MODEL, "last_id": MODEL}
        )

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error(404, "not_found_error", f"{request.method} {request.path} is not simulated")

    # ------------------------------------------------------------ caching

    def _usage(self, body: dict[str, Any], reply: str) -> Usage:
        prompt, ends, marked = _prompt_pieces(body)
        least = _min_cache_tokens(str(body.get("model") or MODEL))
        read = 0
        for mark in marked:  # the longest cached prefix, looked up from each mark back
            for end in ends[max(0, mark - LOOKBACK_BLOCKS) : mark + 1]:
                if end > read and self._cached(prompt[:end], least):
                    read = end
        written = 0
        for mark in marked:
            end = ends[mark]
            if end > read and _tokens(prompt[:end]) >= least:
                self._remember(_digest(prompt[:end]))
                written = end
        read_tokens = _tokens(prompt[:read]) if read else 0
        write_tokens = _tokens(prompt[:written]) - read_tokens if written else 0
        return Usage(_tokens(prompt), read_tokens, write_tokens, len(reply.split()))

    def _cached(self, prefix: str, least: int) -> bool:
        return _tokens(prefix) >= least and _digest(prefix) in self._cache

    def _remember(self, digest: str) -> None:
        self._cache[digest] = None
        self._cache.move_to_end(digest)
        while len(self._cache) > _CACHE_ENTRIES:
            self._cache.popitem(last=False)


# ---------------------------------------------------------------- the wire


async def _json_body(request: web.Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _error(status: int, kind: str, message: str) -> web.Response:
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(payload, status=status)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def _stream(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await response.prepare(request)
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    await response.write(_sse("message_start", {"type": "message_start", "message": start}))
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    await response.write(_sse("content_block_start", block))
    for piece in re.findall(r"\S+\s*|\s+", message["content"][0]["text"]):
        delta = {"type": "text_delta", "text": piece}
        data = {"type": "content_block_delta", "index": 0, "delta": delta}
        await response.write(_sse("content_block_delta", data))
    await response.write(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    await response.write(
        _sse("message_delta", {"type": "message_delta", "delta": stop, "usage": usage})
    )
    await response.write(_sse("message_stop", {"type": "message_stop"}))
    await response.write_eof()
    return response


def _prompt_pieces(body: dict[str, Any]) -> tuple[str, list[int], list[int]]:
    """The prompt as one string (tools, system, messages; each block as JSON
    without its ``cache_control``), the offset where each block ends, and the
    indexes of the blocks that carry a ``cache_control`` mark."""
    system = body.get("system")
    blocks: list[Any] = list(body.get("tools") or [])
    blocks += [system] if isinstance(system, str) else list(system or [])
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        role = message.get("role") if isinstance(message, dict) else None
        blocks.append({"role": role})
        blocks += [content] if isinstance(content, str) else list(content or [])
    parts: list[str] = []
    ends: list[int] = []
    marked: list[int] = []
    for index, block in enumerate(blocks):
        if isinstance(block, dict) and block.get("cache_control"):
            marked.append(index)
            block = {k: v for k, v in block.items() if k != "cache_control"}
        parts.append(json.dumps(block, sort_keys=True, ensure_ascii=False))
        ends.append((ends[-1] if ends else 0) + len(parts[-1]))
    return "".join(parts), ends, marked


def _min_cache_tokens(model: str) -> int:
    return next((n for name, n in MIN_CACHE_TOKENS.items() if model.startswith(name)), 1024)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- replies


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return [t for t in texts if isinstance(t, str) and t]


def reply_text(messages: Any, system: Any = None) -> str:
    """The simulated model's answer to ``messages`` (see the module docstring)."""
    context = _texts(system)
    question = ""
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        texts = _texts(message.get("content"))
        if message.get("role") == "user" and texts:
            context += texts[:-1] + ([question] if question else [])
            question = texts[-1]
        else:
            context += texts
    question = _clean(question)
    if not question:
        return "Hello! What would you like to talk about?"
    if "?" in question:
        return _answer(question, context)
    if len(question.split()) < 6:
        return "Sure. What's next?"
    return f"Okay, got it: {_key_sentence(question)} {_follow_up(question)}"


def _clean(text: str) -> str:
    return " ".join(_NOISE.sub(" ", text).split())


def _words(text: str) -> set[str]:
    """Content words, crudely stemmed so "negotiated" meets "negotiate"."""
    words = set()
    for word in _WORD.findall(text.lower()):
        word = word.strip(".,:'").removesuffix("'s")
        if len(word) > 2 and word not in _STOP:
            for suffix in ("ing", "ed", "es", "s", "e"):
                if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                    word = word[: -len(suffix)]
                    break
            words.add(word)
    return words


def _sentences(text: str) -> list[str]:
    pieces = _SENTENCE.split(_NOISE.sub(" ", text))
    return [s for s in (" ".join(p.split()) for p in pieces) if len(s) > 12]


def _weight(sentence: str) -> int:
    """How informative a sentence looks: numbers and names count most."""
    numbers = len(re.findall(r"\d", sentence))
    names = len(re.findall(r"\b[A-Z][a-z]+", sentence[1:]))
    return min(numbers, 6) + 2 * names + len(_words(sentence)) // 4


def _key_sentence(text: str) -> str:
    sentences = _sentences(text) or [text]
    best = max(sentences, key=_weight)
    return best if best[-1] in ".!" else best + "."


def _follow_up(text: str) -> str:
    # Filler words only: the memory's tagger should find the user's topics in
    # these replies, not the simulator's habits.
    endings = ("Good to know.", "Sounds good.", "Great, thank you.", "Thanks, good to know.")
    return endings[int(hashlib.sha256(text.encode()).hexdigest(), 16) % len(endings)]


def _answer(question: str, context: list[str]) -> str:
    """The sentence of ``context`` that best answers ``question``: most shared
    words, digits when the question asks for a number or a date, latest on a tie."""
    wanted = _words(question)
    need = min(2, len(wanted)) or 1
    numeric = _NUMERIC.match(question) is not None
    asked = {s.lower() for s in _sentences(question)}
    best, best_score = "", 0
    for text in context:
        for sentence in _sentences(text):
            if "?" in sentence or sentence.lower() in asked:
                continue
            shared = len(wanted & _words(sentence))
            digits = len(re.findall(r"\d", sentence))
            if shared < need and not (numeric and digits and shared):
                continue
            bonus = (6 if digits else -4) if numeric else min(digits, 1)
            score = shared * 4 + bonus
            if score >= best_score:
                best, best_score = sentence, score
    if not best:
        return "I don't see that here. What was it again?"
    return f"You said: {best}"
