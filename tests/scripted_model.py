"""A scripted stand-in for a model: a real HTTP server on loopback that speaks the
chat-completions API and answers each request with the next scripted reply (the last one
repeats). A reply is a callable of the request body, so it can read the conversation (the
tool results so far) and decide: the agent tests script fixed sessions with it, the eval's
tests scripted policies.
"""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Reply = tuple[int, dict, dict | str]  # status, headers, JSON body (or raw text)


def tool_turn(*calls: tuple[str, dict | str]) -> Callable[[dict], Reply]:
    """An assistant turn that calls tools; arguments given as a str are sent verbatim."""

    def reply(body: dict) -> Reply:
        tool_calls = [
            {
                "id": f"call_{secrets.token_hex(4)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for name, args in calls
        ]
        return (
            200,
            {},
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": tool_calls},
                    }
                ],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
            },
        )

    return reply


def answer(text: str) -> Callable[[dict], Reply]:
    return lambda body: (
        200,
        {},
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 30},
        },
    )


def failure(status: int, text: str, headers: dict | None = None) -> Callable[[dict], Reply]:
    return lambda body: (status, headers or {}, text)


class ScriptedModel:
    """POST /v1/chat/completions -> the next scripted reply (the last one repeats)."""

    def __init__(self, replies: list[Callable[[dict], Reply]]):
        self.replies = replies
        self.requests: list[dict] = []  # {"headers": {...}, "body": {...}} in arrival order
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                index = min(len(model.requests), len(model.replies)) - 1
                status, headers, payload = model.replies[index](body)
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep pytest's output clean
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def tool_messages(self, request_index: int) -> dict[str, str]:
        """tool_call_id -> content of the tool messages a request brings (those after the
        last assistant turn)."""
        messages = self.requests[request_index]["body"]["messages"]
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        return {
            m["tool_call_id"]: m["content"] for m in messages[last + 1 :] if m["role"] == "tool"
        }
