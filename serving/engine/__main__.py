"""`python -m infra_agent.serving.engine [--checkpoint DIR] [--host H] [--port P] [engine args]`

Builds the engine, serves the OpenAI-compatible API, and prints to stderr one line
`infra-agent engine: ready at http://HOST:PORT (model NAME)` once it accepts requests
(`--port 0` picks a free port; the line says which).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import logging
import os
import sys

from ..tcp import KEEP_ALIVE_S, listen_socket
from .config import EngineArgs


def _field_help() -> dict[str, str]:
    """Each EngineArgs field's trailing comment in config.py: one source for both manuals."""
    import inspect
    import re

    from . import config

    source = inspect.getsource(config.EngineArgs)
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^\s+(\w+): [^=]+=.*?#(.*)$", source, re.M)
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="infra-agent engine",
        description="the built-in serving engine (OpenAI API)",
        # `@FILE` reads arguments from FILE, one per line: a deployment's flags kept in a file
        fromfile_prefix_chars="@",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument(
        "--port", type=int, default=8000, help="port; 0 picks a free one (default: %(default)s)"
    )
    p.add_argument(
        "--profile-dir",
        default=os.environ.get("VLLM_TORCH_PROFILER_DIR"),
        help="folder for /start_profile traces (default: $VLLM_TORCH_PROFILER_DIR; unset: profiling off)",
    )
    p.add_argument("--log-level", default="warning", help="(default: %(default)s)")
    # bench-only (bench/engine_client_gap.py): --no-tcp-nodelay serves as before issue 21, so one
    # run measures the stalled and the fixed socket side by side on the same machine load
    p.add_argument(
        "--tcp-nodelay", action=argparse.BooleanOptionalAction, default=True, help=argparse.SUPPRESS
    )
    p.add_argument(
        "--disaggregated",
        action="store_true",
        help="prefill worker + KV-transfer thread + decode worker (disagg.py) instead of one engine",
    )
    p.add_argument(
        "--comm-releases-gil",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="disaggregated: the native dispatch/combine via ctypes.CDLL (releases the GIL) or PyDLL "
        "(default: %(default)s)",
    )
    # 8000: the GIL-held episode (replay 2) shows at the default. At 500 the native call is open ~5% of
    # a 2 s window and the transfer thread blocked ~12% of its time: no finding, and rightly so
    p.add_argument(
        "--comm-us",
        type=int,
        default=8000,
        help="disaggregated: microseconds per dispatch and combine (default: %(default)s)",
    )
    p.add_argument(
        "--kv-transfer-impl",
        default="bytes",
        choices=("bytes", "clone", "none"),
        help="disaggregated: bytes (one message per KV block, Python-bound), clone (one copy) or none (the "
        "decode worker reads the prefill's K/V in place: the no-transfer baseline) (default: %(default)s)",
    )
    helps = _field_help()
    for f in dataclasses.fields(EngineArgs):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        text = f"{helps.get(f.name, '')} (default: {default})"
        if f.type in ("bool", bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
        elif f.name == "kernels":
            p.add_argument(
                flag,
                type=_kernels,
                default={},
                help="op=impl pairs or JSON, e.g. "
                '"rmsnorm=triton,paged_attention_decode=torch"; ops: rmsnorm, paged_attention_decode, '
                "kv_quant, w8a8_gemm; impls: reference, triton, torch (default: reference on CPU, "
                "triton on CUDA)",
            )
        else:
            kind = int if isinstance(default, int) or "int" in str(f.type) else str
            p.add_argument(flag, type=kind, default=default, help=text)
    return p


def _kernels(text: str) -> dict[str, str]:
    if text.strip().startswith("{"):
        return json.loads(text)
    return dict(pair.split("=", 1) for pair in text.split(",") if pair)


def engine_args(ns: argparse.Namespace) -> EngineArgs:
    """The EngineArgs of parsed command-line arguments (parser())."""
    return EngineArgs(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(EngineArgs)})


async def serve(ns: argparse.Namespace) -> None:
    import uvicorn

    from .api_server import build_app
    from .async_engine import AsyncEngine
    from .llm_engine import LLMEngine

    args = engine_args(ns)
    if ns.disaggregated:
        from .disagg import DisaggArgs, DisaggregatedEngine

        core = DisaggregatedEngine(
            DisaggArgs(
                comm_releases_gil=ns.comm_releases_gil,
                comm_us=ns.comm_us,
                transfer=ns.kv_transfer_impl,
                engine=args,
            )
        )
    else:
        core = LLMEngine(args)
    engine = AsyncEngine(core, profile_dir=ns.profile_dir)
    sock = listen_socket(ns.host, ns.port, ns.tcp_nodelay)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        build_app(engine),
        log_level=ns.log_level,
        timeout_graceful_shutdown=2,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.05)
    if server.started:
        # Everything built so far (torch, the model, uvicorn) lives as long as the server: out of the
        # collector's sight, a full collection under load scans only the requests' objects (as vLLM does).
        gc.collect()
        gc.freeze()
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        print(
            f"infra-agent engine: ready at {url} (model {engine.engine.model_name}, "
            f"kernels {engine.engine.runner.ops.choices})",
            file=sys.stderr,
            flush=True,
        )
    try:
        await task
    finally:
        engine.shutdown()


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    logging.basicConfig(level=ns.log_level.upper(), stream=sys.stderr)
    try:
        asyncio.run(serve(ns))
    except (
        ValueError,
        FileNotFoundError,
        OSError,
    ) as exc:  # bad args, checkpoint, or a port in use
        print(f"infra-agent engine: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
