"""The calls of a long mixed session, one list for the memory test
(tests/server/test_session_memory.py) and its bench (bench/server_memory.py): listings,
describes and the fuzzer's kinds of clean error (unknown handles and kernels, odd `expect`
strings, bad arguments, an engine that exits at once). Cheap: none runs a kernel."""

from __future__ import annotations

CHEAP_CALLS: list[tuple[str, dict]] = [
    ("list_kernels", {}),
    ("describe_kernel", {"kernel": "rmsnorm"}),
    ("describe_kernel", {"kernel": "no_such_kernel"}),
    ("list_experiments", {"limit": 5}),
    ("list_serves", {}),
    ("device_info", {"measure_peaks": False}),
    ("describe_kernel", {"kernel": "rmsnorm", "expect": ["1/0 > 1"]}),
    ("list_experiments", {"limit": 5, "expect": ["x =="]}),
    ("serve_benchmark", {"handle": "serve-none"}),
    ("profile", {"handle": "serve-none"}),
    ("stop_serve", {"handle": "serve-none"}),
    ("compare_experiments", {"experiment_ids": ["e-none-1", "e-none-2"]}),
    (
        "launch_serve",
        {"engine": "command", "args": {"command": ["/bin/false"]}, "ready_timeout_s": 5},
    ),
    ("check_numerics", {"kernel": "vector_add", "source": "def f(:", "entry": "f"}),
    ("list_kernels", {"no_such_argument": 1}),
]
