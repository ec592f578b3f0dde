"""An upstream lllm-core 0.2.1 tactic, the Python peer of lllm's interop tests
and of the serve benchmark (bench/serve.sh).

`Answer` is a typed `lllm.Tactic` (pydantic input and output, so its
`TacticInfo` has an `input_schema` and an `output_schema`) that asks an
OpenAI-compatible server one question through the `openai` SDK and returns
the reply: one model call, as lllm's one-agent tactics make. The server is
`OPENAI_BASE_URL` (e.g. lllm-mock's `http://127.0.0.1:PORT/v1`) with the key
`OPENAI_API_KEY`; the model is `UPSTREAM_MODEL` (default `gpt-4o-mini`).

Served by upstream's own command, unchanged (the module must be importable:
run it from this directory or put it on PYTHONPATH):

    cd tests/python
    OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=test \
        python -m lllm.cli serve upstream_tactic:build --port 8001

which answers `GET /info`, `POST /run` with `{"input": {"question": "..."}}`
(`{"output": {"answer": "..."}, "request_id", "tactic": "answer"}`) and
`POST /stream` (a `data:` line per text delta, as upstream streams: no
`event:` lines, no closing event), and the same under `/tactics/answer/`.

`python upstream_tactic.py serve [--port N] [--host H]` does what `lllm
serve` does (upstream's `create_tactic_app` under uvicorn) but takes `--port
0` (upstream's CLI refuses it) and prints `listening on http://HOST:PORT`
once the socket is bound, as `lllm serve` and `lllm-mock` do, so a test needs
no port guessing. `python upstream_tactic.py run QUESTION` runs the tactic
once in process and prints its output as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys

from openai import AsyncOpenAI
from pydantic import BaseModel, Field

from lllm import Tactic


class Question(BaseModel):
    """What the tactic is asked."""

    question: str = Field(min_length=1, description="The question to answer.")


class Reply(BaseModel):
    """What it answers."""

    answer: str = Field(description="The model's reply, as it came.")


def _client() -> AsyncOpenAI:
    # No retries: a failed call is the test's to see, as lllm's records see it.
    return AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ.get("OPENAI_API_KEY", "test"),
        max_retries=0,
    )


def _messages(question: Question) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Answer the question in one sentence."},
        {"role": "user", "content": question.question},
    ]


class Answer(Tactic[Question, Reply]):
    """Answers a question in one sentence with one model call."""

    name = "answer"
    input_type = Question
    output_type = Reply

    def __init__(self) -> None:
        super().__init__(
            examples=[{"input": {"question": "What is a hash map?"}}],
            metadata={"peer": "lllm interop fixture"},
        )
        self._model = os.environ.get("UPSTREAM_MODEL", "gpt-4o-mini")
        self._openai: AsyncOpenAI | None = None

    def _api(self) -> AsyncOpenAI:
        # One client (one connection pool) for the server's life, as a
        # production tactic keeps one.
        if self._openai is None:
            self._openai = _client()
        return self._openai

    async def _arun(self, input_value: Question, *, context=None, **kwargs) -> Reply:
        completion = await self._api().chat.completions.create(
            model=self._model, messages=_messages(input_value)
        )
        return Reply(answer=completion.choices[0].message.content or "")

    async def astream(self, input_value, *, context=None, **kwargs):
        # Upstream's /stream hands the raw body to aevents without validating
        # it (one of its defects); validate here so a bad input is an error
        # event rather than a crash in the SDK.
        question = self.validate_input(input_value)
        stream = await self._api().chat.completions.create(
            model=self._model, messages=_messages(question), stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content


def build() -> Answer:
    """The entrypoint `lllm serve upstream_tactic:build` loads."""

    return Answer()


def _serve(host: str, port: int) -> None:
    import uvicorn

    from lllm.services import create_tactic_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    bound_host, bound_port = sock.getsockname()[:2]
    config = uvicorn.Config(
        create_tactic_app(build()), log_level="warning", backlog=2048
    )
    server = uvicorn.Server(config)
    print(f"listening on http://{bound_host}:{bound_port}", flush=True)
    server.run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="upstream_tactic.py")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the tactic (port 0: a free one)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    run = commands.add_parser("run", help="run the tactic once, print its output")
    run.add_argument("question")
    args = parser.parse_args(argv)
    if args.command == "serve":
        _serve(args.host, args.port)
        return 0
    output = asyncio.run(build().arun({"question": args.question}))
    print(json.dumps(output.model_dump()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
