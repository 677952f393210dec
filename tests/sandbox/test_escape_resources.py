"""The escape suite, part 2 (resources and processes: fork bombs, memory, time, output,
disk, daemons, namespaces, syscalls, the zygote, the Triton cache): each probe is a job
that tries to get out, and fails. Part 1 is test_escape.py.

After every probe the sandbox must keep serving: `assert_healthy` runs a normal job.
Probes that need a containment layer first check it with a small version (50
processes before a fork bomb, 1.5 GB before 100 GB, 10 MB before 10 GB) so a probe
that escaped could not take the machine down. A probe the host cannot test is
skipped with the exact reason.
"""

from __future__ import annotations

import time
from pathlib import Path

from sandbox_helpers import sandbox  # noqa: F401  (the fixture)


def test_fork_bomb_is_contained(sandbox):
    sandbox.require_layer("cgroup")
    limit = sandbox.sb.limits.num_processes
    # small version first: 100 sleepers against a limit of 64 must hit the limit
    res = sandbox.probe(
        """
        import os, time
        def main(n):
            started = 0
            try:
                for _ in range(n):
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    started += 1
            except OSError as e:
                return {"started": started, "error": e.errno}
            return {"started": started, "error": None}
        """,
        100,
    )
    assert res.ok, res.error
    assert res.result["value"]["error"] == 11 and res.result["value"]["started"] < limit, res.result
    sandbox.assert_healthy()
    # the real thing: every process forks forever
    res = sandbox.probe(
        """
        import os
        def main():
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        """,
        timeout_s=3,
    )
    assert res.status == "timeout", (res.status, res.error)
    sandbox.assert_healthy()


def test_memory_hog_is_contained(sandbox):
    sandbox.require_layer("cgroup")
    hog = """
        def main(num_gib):
            chunks = []
            for _ in range(int(num_gib * 4)):
                chunks.append(bytearray(b"\\x01") * (256 << 20))  # touched, not just reserved
            return len(chunks)
        """
    res = sandbox.probe(hog, 1.5)  # small version: just over the 1 GiB limit
    assert res.status == "limit" and "memory limit" in res.error, (res.status, res.error)
    sandbox.assert_healthy()
    res = sandbox.probe(hog, 100)
    assert res.status == "limit" and "memory limit of 1 GiB" in res.error, (res.status, res.error)
    res = sandbox.probe("def main():\n    return len(bytearray(100 << 30))\n")  # one 100 GB request
    assert res.status in ("error", "limit"), (res.status, res.error)
    sandbox.assert_healthy()


def test_spin_forever_times_out(sandbox):
    res = sandbox.probe("def main():\n    while True:\n        pass\n", timeout_s=1.5)
    assert res.status == "timeout" and "1.5 s wall-clock" in res.error, (res.status, res.error)
    sandbox.assert_healthy()


def test_flooding_stdout_is_cut(sandbox):
    flood = """
        import sys
        def main(num_mib):
            chunk = "x" * (1 << 20)
            for _ in range(int(num_mib)):
                sys.stdout.write(chunk)
            return "finished"
        """
    res = sandbox.probe(flood.replace("1 << 20", "1 << 10"), 100)  # 100 KiB: under the cap
    assert res.ok and len(res.stdout_tail) > 0, (res.status, res.error)
    res = sandbox.probe(flood, 10 * 1024)  # 10 GiB
    assert res.status == "limit" and "stdout exceeded 1 MiB" in res.error, (res.status, res.error)
    assert len(res.stdout_tail) <= sandbox.sb.limits.tail_bytes
    sandbox.assert_healthy()


def test_huge_file_is_cut(sandbox):
    write = """
        import os
        def main(num_mib):
            with open("big.bin", "wb") as f:
                for _ in range(int(num_mib)):
                    f.write(b"\\0" * (1 << 20))
            return os.path.getsize("big.bin")
        """
    res = sandbox.probe(write, 10)  # small version: under the 32 MiB limit
    assert res.ok and res.result["value"] == 10 << 20, (res.status, res.error)
    res = sandbox.probe(write, 10 * 1024)
    assert res.status == "limit" and "size limit" in res.error, (res.status, res.error)
    assert (res.out_dir.parent / "big.bin").stat().st_size <= sandbox.sb.limits.file_bytes
    sandbox.assert_healthy()


def test_many_files_cannot_fill_the_disk(sandbox):
    res = sandbox.probe(
        """
        import itertools
        def main():
            for i in itertools.count():  # each file under the per-file limit, 10 GB in all
                with open(f"part{i}.bin", "wb") as f:
                    for _ in range(16):
                        f.write(b"\\1" * (1 << 20))
                if i > 640:
                    return "wrote 10 GB"
        """,
        timeout_s=60,
    )
    assert res.status == "limit" and "to its folder" in res.error, (res.status, res.error)
    sandbox.assert_healthy()


def _processes_named(name: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
        except OSError:
            pass
    return pids


def test_double_forked_daemon_does_not_survive(sandbox):
    res = sandbox.probe("""
        import ctypes, os, time
        def main():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    ctypes.CDLL(None).prctl(15, b"ia-probe-daemon", 0, 0, 0)
                    while True:
                        with open("heartbeat", "a") as f:
                            f.write("x")
                        time.sleep(0.02)
                os._exit(0)
            time.sleep(0.5)
            return os.path.getsize("heartbeat")
        """)
    assert res.ok and res.result["value"] > 0, (res.status, res.error)
    heartbeat = res.out_dir.parent / "heartbeat"
    size = heartbeat.stat().st_size
    time.sleep(0.3)
    assert heartbeat.stat().st_size == size, "the daemon is still writing"
    assert _processes_named("ia-probe-daemon") == []
    sandbox.assert_healthy()


def test_cannot_remount_or_unshare(sandbox):
    res = sandbox.probe("""
        import ctypes, os
        def main():
            libc = ctypes.CDLL(None, use_errno=True)
            out = {}
            out["remount_rw"] = libc.mount(None, b"/", None, 32, None), ctypes.get_errno()  # MS_REMOUNT
            out["unshare_user"] = libc.unshare(0x10000000), ctypes.get_errno()
            out["unshare_mount"] = libc.unshare(0x00020000), ctypes.get_errno()
            try:
                open("/usr/planted", "w")
                out["write_usr"] = "WROTE"
            except OSError as e:
                out["write_usr"] = e.strerror
            return out
        """)
    assert res.ok, res.error
    out = res.result["value"]
    for key in ("remount_rw", "unshare_user", "unshare_mount"):
        assert out[key][0] == -1 and out[key][1] == 1, out  # EPERM
    assert out["write_usr"] != "WROTE"
    sandbox.assert_healthy()


def test_seccomp_denies_dangerous_syscalls(sandbox):
    sandbox.require_layer("seccomp")
    res = sandbox.probe("""
        import ctypes, os
        def main():
            libc = ctypes.CDLL(None, use_errno=True)
            resolve = ctypes.CDLL("libseccomp.so.2").seccomp_syscall_resolve_name
            resolve.argtypes = [ctypes.c_char_p]
            out = {}
            # arguments that would succeed (or fail differently) without the filter
            for name, args in {"unshare": (0,), "ptrace": (0, 0, 0, 0), "keyctl": (0, -3, 0),
                               "process_vm_readv": (os.getpid(), 0, 0, 0, 0, 0), "bpf": (0, 0, 0),
                               "perf_event_open": (0, 0, -1, -1, 0), "userfaultfd": (0,),
                               "io_uring_setup": (1, 0), "setns": (0, 0)}.items():
                nr = resolve(name.encode())
                rc = libc.syscall(nr, *args)
                out[name] = [rc, ctypes.get_errno()]
            return out
        """)
    assert res.ok, res.error
    assert all(v == [-1, 1] for v in res.result["value"].values()), res.result["value"]  # EPERM
    sandbox.assert_healthy()


def test_cannot_ptrace_or_signal_the_zygote(sandbox):
    sandbox.require_layer("landlock")
    zygote_pids = sandbox.sb.zygote_pids()
    res = sandbox.probe("""
        import ctypes, os, signal
        def main():
            libc = ctypes.CDLL(None, use_errno=True)
            parent = os.getppid()
            out = {"attach": (libc.ptrace(16, parent, 0, 0), ctypes.get_errno())}  # PTRACE_ATTACH
            for name in ("mem", "environ", "cwd/job.json"):
                try:
                    with open(f"/proc/{parent}/{name}", "rb") as f:
                        f.read(16)
                    out[name] = "READ"
                except OSError as e:
                    out[name] = e.strerror
            try:
                os.kill(parent, signal.SIGKILL)
                out["kill"] = "KILLED"
            except OSError as e:
                out["kill"] = e.strerror
            return out
        """)
    assert res.ok, res.error
    out = res.result["value"]
    assert out["attach"] == [-1, 1], out
    assert all(out[k] != "READ" for k in ("mem", "environ", "cwd/job.json")), out
    assert out["kill"] != "KILLED", out
    sandbox.assert_healthy()
    assert sandbox.sb.zygote_pids()[:3] == zygote_pids[:3]  # the same zygote still serves


def test_cannot_poison_the_triton_cache_of_the_next_job(sandbox):
    poison = sandbox.probe("""
        import os
        def main():
            planted = []
            for folder in (os.environ["TRITON_CACHE_DIR"], os.path.expanduser("~/.triton/cache"),
                           "/tmp/triton", "/nonexistent/.triton/cache"):
                try:
                    os.makedirs(folder, exist_ok=True)
                    with open(os.path.join(folder, "poisoned.json"), "w") as f:
                        f.write("{}")
                    planted.append(folder)
                except OSError:
                    pass
            return {"cache": os.environ["TRITON_CACHE_DIR"], "planted": planted}
        """)
    assert poison.ok, poison.error
    res = sandbox.probe("""
        import os
        import triton
        def main():
            cache = os.environ["TRITON_CACHE_DIR"]
            knob = getattr(getattr(getattr(triton, "knobs", None), "cache", None), "dir", cache)
            seen = []
            for folder in (cache, knob, os.path.expanduser("~/.triton/cache"), "/tmp/triton"):
                if os.path.isdir(folder):
                    seen += [os.path.join(folder, n) for n in os.listdir(folder)]
            return {"cache": cache, "knob": knob, "cwd": os.getcwd(), "seen": seen}
        """)
    assert res.ok, res.error
    out = res.result["value"]
    assert out["cache"] != poison.result["value"]["cache"]
    assert out["cache"].startswith(out["cwd"] + "/") and out["knob"] == out["cache"]
    assert out["seen"] == [], out
    sandbox.assert_healthy()
