"""Jobs that crash come back as clear errors naming what happened, never as success."""

from __future__ import annotations

from sandbox_helpers import sandbox  # noqa: F401  (the fixture)

from infra_agent.sandbox import Job


def test_segfault(sandbox):
    res = sandbox.probe(
        "import ctypes\ndef main():\n    return len(ctypes.string_at(0xDEAD00000000, 8))  # unmapped\n"
    )
    assert res.status == "crashed" and "killed by SIGSEGV" in res.error, (res.status, res.error)
    sandbox.assert_healthy()


def test_exit_before_result(sandbox):
    res = sandbox.probe("import os\ndef main():\n    os._exit(0)\n")
    assert res.status == "crashed" and "exited with code 0 without writing a result" in res.error
    res = sandbox.probe("import os\ndef main():\n    os._exit(3)\n")
    assert res.status == "crashed" and "exited with code 3" in res.error
    res = sandbox.probe(
        "import os, signal\ndef main():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert res.status == "crashed" and "killed by SIGKILL" in res.error
    sandbox.assert_healthy()


def test_exception_names_the_agents_line_not_torch_internals(sandbox):
    res = sandbox.probe("""
        import torch
        def main():
            x = torch.ones(3)
            return split_badly(x)

        def split_badly(x):
            return torch.split(x, [1, 1])
        """)
    assert res.status == "error", (res.status, res.error)
    assert res.error.startswith("RuntimeError: ") and "split_with_sizes" in res.error
    assert (
        'candidate.py", line 5, in main' in res.error
        and 'candidate.py", line 8, in split_badly' in res.error
    )
    assert res.error.count("site-packages") <= 1  # at most the frame that finally raised


def test_sys_exit_and_bad_results_are_errors(sandbox):
    res = sandbox.probe("import sys\ndef main():\n    sys.exit(0)\n")
    assert res.status == "error" and "called sys.exit(0)" in res.error
    res = sandbox.probe("import torch\ndef main():\n    return torch.ones(2)\n")
    assert res.status == "error" and "not JSON serializable" in res.error
    res = sandbox.run(
        Job(op="probe", payload={"source": "def main():\n    return 1\n", "entry": "mian"})
    )
    assert res.status == "error" and "has no function 'mian'" in res.error and "main" in res.error
    res = sandbox.run(Job(op="no_such_op"))
    assert res.status == "error" and "no_such_op" in res.error
    sandbox.assert_healthy()


def test_forged_result_links_are_removed(sandbox):
    """A symlink in out/ could point the parent at /etc/shadow or the reference outputs."""
    res = sandbox.probe("""
        import os
        def main():
            os.symlink("/etc/shadow", "out/outputs.pt")
            os.mkfifo("out/pipe")
            with open("out/real.pt", "w") as f:
                f.write("data")
            return "planted"
        """)
    assert res.ok, res.error
    assert sorted(p.name for p in res.out_dir.iterdir()) == ["real.pt"]
    assert "outputs.pt" in res.error and "pipe" in res.error


def test_stdout_and_stderr_tails_come_back(sandbox):
    res = sandbox.probe(
        "import sys\ndef main():\n    print('to stdout')\n    print('to stderr', file=sys.stderr)\n   "
        " return 0\n"
    )
    assert res.ok and res.stdout_tail == "to stdout\n" and res.stderr_tail == "to stderr\n"


def test_json_bombs_are_not_results(sandbox):
    """Deeply nested JSON in result.json or progress lines must not crash the parent."""
    source = """
import os, time
def main():
    with open("progress.jsonl", "a") as f:
        f.write("[" * 100000 + "\\n")
    time.sleep(0.6)  # the parent reads progress every 0.25 s
    with open("result.json", "w") as f:
        f.write("[" * 100000)
    os._exit(0)
"""
    messages = []

    async def progress(done, total, message):
        messages.append(message)

    res = sandbox.run(Job(op="probe", payload={"source": source}), progress)
    assert res.status == "crashed" and "not valid JSON" in res.error, (res.status, res.error)
    assert messages == []
    sandbox.assert_healthy()
