"""Watch a sandboxed job's threads from the host: thread states from /proc, the GIL holder from py-spy.

This runs on the judge's side of the trust boundary: the job cannot change what /proc
says about it, and py-spy reads the interpreter's GIL state out of the process's memory.

- ``ProcSampler``: a thread that reads ``/proc/<pid>/task/<tid>/{stat,wchan}`` about 1000
  times a second (pre-opened files, ``pread``), timestamped with ``time.monotonic_ns``
  (CLOCK_MONOTONIC: the clock the job's ranges use; the sandbox has no time namespace).
  Each thread's samples become runs of a state class: ``running`` (R: on a CPU or
  runnable), ``futex`` (asleep on a futex: waiting for the GIL or a lock), ``sleep``
  (nanosleep), ``io`` (any other named wait), ``other`` (between states), plus its on-CPU
  ticks at the first and last sample.
  A runnable thread's time in the run queue (``schedstat``'s run_delay, which the kernel
  adds when the wait ends) becomes ``cpu_wait``: on a loaded host a woken thread can wait
  milliseconds for a CPU, and that is no progress either.
- ``PySpy``: ``py-spy record --gil --threads --nonblocking -f raw`` for the job's
  lifetime: per thread, how often it was sampled holding the GIL, and where.
  py-spy attaches across the sandbox's PID namespace when this server runs as root
  (or holds CAP_SYS_PTRACE); it names threads by their id inside the namespace.

The job's host pid is found among the sandbox's own process tree (``zygote_pids``): the
process whose innermost pid (``NSpid``) is the one the job announced.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .intervals import intersect, merge, subtract

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STATE_CLASSES = ("running", "cpu_wait", "futex", "sleep", "io", "other")


def host_pid_of(job_pid: int, candidates: list[int]) -> int | None:
    """The host pid, among `candidates`, of the process that is `job_pid` in its own namespace."""
    for pid in candidates:
        ns = _nspid(Path(f"/proc/{pid}/status"))
        if ns and ns[-1] == job_pid:  # without a PID namespace the two are the same number
            return pid
    return None


def _nspid(status_file: Path) -> list[int]:
    try:
        match = re.search(r"^NSpid:\s+(.*)$", status_file.read_text(), re.M)
    except OSError:
        return []
    return [int(p) for p in match.group(1).split()] if match else []


@dataclass
class ThreadTrack:
    host_tid: int
    tid: int  # as the job sees it (the id its ranges carry)
    name: str
    runs: dict[str, list[tuple[int, int]]] = field(
        default_factory=lambda: {c: [] for c in STATE_CLASSES}
    )
    ticks_first: int | None = None
    ticks_last: int = 0
    ticks_seen: list[tuple[int, int]] = field(
        default_factory=list
    )  # (t, ticks) when the count changed
    sched: tuple[int, int] | None = (
        None  # schedstat: ns on a CPU, ns waiting in the run queue (last round)
    )
    queued: list[tuple[int, int]] = field(default_factory=list)  # spans it waited in the run queue
    samples: int = 0
    _state: str | None = None
    _since: int = 0
    _last_seen: int = (
        0  # time of the previous sample: a change happened between it and the next one
    )


class ProcSampler:
    def __init__(self, host_pid: int, period_s: float = 0.001, process: str = ""):
        self.host_pid, self.period_s = host_pid, period_s
        self.process = process  # names the process in the thread table: "worker", "api_server"
        self.tracks: dict[int, ThreadTrack] = {}
        self._files: dict[int, tuple[int, ...]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="profile-proc-sampler", daemon=True)
        self.started_ns = self.stopped_ns = 0
        self.num_samples = 0

        self.realtime = False  # whether the sampler thread got a real-time priority

    def start(self) -> None:
        self.started_ns = time.monotonic_ns()
        self._thread.start()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self.stopped_ns = time.monotonic_ns()
        for track in self.tracks.values():
            self._close_run(track, track._last_seen)
            _absorb_futex_wakeups(track)
        for fds in self._files.values():
            for fd in fds:
                os.close(fd)
        self._files.clear()

    def _loop(self) -> None:
        try:  # on a loaded host a normal thread gets descheduled for ms: transitions would be seen late
            os.sched_setscheduler(
                0, os.SCHED_FIFO, os.sched_param(1)
            )  # this thread only (Linux: tid 0)
            self.realtime = True
        except (OSError, AttributeError):
            pass
        next_scan = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_scan:
                if not self._scan_tasks():
                    return  # the process is gone
                next_scan = now + 0.02
            self._sample()
            time.sleep(self.period_s)

    def _scan_tasks(self) -> bool:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.host_pid}/task")]
        except OSError:
            return False
        for host_tid in tids:
            if host_tid in self._files:
                continue
            base = f"/proc/{self.host_pid}/task/{host_tid}"
            try:
                fds = tuple(
                    os.open(f"{base}/{name}", os.O_RDONLY)
                    for name in ("stat", "wchan", "schedstat")
                )
                name = Path(f"{base}/comm").read_text().strip()
            except OSError:
                continue
            ns = _nspid(Path(f"{base}/status"))
            self._files[host_tid] = fds
            self.tracks.setdefault(
                host_tid, ThreadTrack(host_tid, ns[-1] if ns else host_tid, name)
            )
        return True

    def _sample(self) -> None:
        self.num_samples += 1
        for host_tid, (stat_fd, wchan_fd, sched_fd) in list(self._files.items()):
            try:
                stat = os.pread(stat_fd, 1024, 0).decode(errors="replace")
                wchan = os.pread(wchan_fd, 128, 0).decode(errors="replace")
                sched = tuple(int(v) for v in os.pread(sched_fd, 128, 0).split()[:2])
            except (OSError, ValueError):
                stat = ""
            t = time.monotonic_ns()
            track = self.tracks[host_tid]
            if not stat:  # the thread ended
                self._close_run(track, track._last_seen)
                for fd in self._files.pop(host_tid):
                    os.close(fd)
                continue
            fields = stat.rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])
            track.ticks_first = ticks if track.ticks_first is None else track.ticks_first
            if not track.ticks_seen or track.ticks_seen[-1][1] != ticks:
                track.ticks_seen.append((t, ticks))
            track.ticks_last, track.samples = ticks, track.samples + 1
            if track.sched is not None and sched[1] > track.sched[1]:
                # the kernel adds a run-queue wait to run_delay when the wait ends: it ended just before now
                track.queued.append((t - (sched[1] - track.sched[1]), t))
            track.sched = sched
            self._observe(track, _classify(fields[0], wchan), t)

    @staticmethod
    def _observe(track: ThreadTrack, state: str, t: int) -> None:
        if state != track._state:
            change = (
                (track._last_seen + t) // 2 if track._state is not None else t
            )  # halfway: half the error
            ProcSampler._close_run(track, change)
            track._state, track._since = state, change
        track._last_seen = t

    @staticmethod
    def _close_run(track: ThreadTrack, t: int) -> None:
        if track._state is not None and t > track._since:
            track.runs[track._state].append((track._since, t))
        track._state = None


def cpu_ns_within(track: ThreadTrack, start_ns: int, end_ns: int) -> int:
    """On-CPU time of the thread between two instants, ns: its tick count as last seen at or before
    each (the samplers outlive the window: the job's export, the engine's /stop_profile run on)"""

    def ticks_at(t: int) -> int | None:
        seen = [ticks for when, ticks in track.ticks_seen if when <= t]
        return seen[-1] if seen else None

    first = ticks_at(start_ns)
    last = ticks_at(end_ns)
    if last is None:  # the sampler first saw the thread after the window
        return 0
    base = (
        first if first is not None else track.ticks_seen[0][1]
    )  # born (or first seen) in the window
    return (last - base) * 1_000_000_000 // CLOCK_TICKS


WAKEUP_RUN_NS = 2_500_000  # two sampling periods: a one-sample blip reads as ~1.1 ms


def _absorb_futex_wakeups(track: ThreadTrack) -> None:
    """Split runnable time into running and cpu_wait (the run-queue waits schedstat reported), then
    count a GIL waiter's periodic re-checks as the wait: a thread waiting for the GIL wakes every switch
    interval (5 ms), asks for it and sleeps again; between two futex waits, a stretch with under 2.5 ms on
    a CPU is that re-check (however long it queued for a CPU on a busy host), not work."""
    runs = {c: merge(r) for c, r in track.runs.items()}
    queued = merge(track.queued)
    runs["cpu_wait"] = merge(runs["cpu_wait"] + intersect(runs["running"], queued))
    runs["running"] = subtract(runs["running"], queued)
    timeline = sorted((s, e, c) for c, r in runs.items() for s, e in r)
    futex_at = [i for i, (_, _, c) in enumerate(timeline) if c == "futex"]
    for i, j in zip(futex_at, futex_at[1:], strict=False):
        between = timeline[i + 1 : j]
        on_cpu = sum(e - s for s, e, c in between if c == "running")
        if (
            between
            and on_cpu < WAKEUP_RUN_NS
            and all(c in ("running", "cpu_wait", "other") for _, _, c in between)
        ):
            timeline[i + 1 : j] = [(s, e, "futex") for s, e, _ in between]
    track.runs = {c: merge([(s, e) for s, e, k in timeline if k == c]) for c in STATE_CLASSES}


def _classify(state: str, wchan: str) -> str:
    if state == "R":
        return "running"
    if "futex" in wchan:
        return "futex"
    if "nanosleep" in wchan:
        return "sleep"
    return "io" if wchan.strip() not in ("", "0") else "other"  # "0": caught between states


def py_spy_path() -> str | None:
    exe = Path(sys.executable).with_name("py-spy")  # the wheel installs it beside this interpreter
    return str(exe) if exe.is_file() else shutil.which("py-spy")


class PySpy:
    """py-spy recording which thread holds the GIL, for the job's lifetime (until it ends or `stop`).

    ``--format raw`` gives, per thread and Python stack, how many samples found it holding the GIL
    (``--gil`` drops samples where it was free); its other formats keep no per-sample times either.
    """

    def __init__(self, host_pid: int, out_file: Path, rate_hz: int, max_s: float):
        self.out_file, self.rate_hz, self.error = out_file, rate_hz, ""
        self.sampling_from_ns: int | None = (
            None  # when py-spy said it was sampling (attached), monotonic
        )
        self.sampling_to_ns: int | None = None  # when it was told to stop
        self._err_file = out_file.with_suffix(".stderr")
        exe = py_spy_path()
        self.proc = None
        if exe is None:
            self.error = "py-spy is not installed (pip install py-spy)"
            return
        with self._err_file.open("wb") as err_out:  # a file, not a pipe nobody reads while it runs
            self.proc = subprocess.Popen(
                [
                    exe,
                    "record",
                    "--gil",
                    "--threads",
                    "--nonblocking",
                    "-r",
                    str(rate_hz),
                    "-d",
                    str(int(max_s) + 1),
                    "-f",
                    "raw",
                    "-o",
                    str(out_file),
                    "-p",
                    str(host_pid),
                ],
                stdout=subprocess.PIPE,
                stderr=err_out,
                start_new_session=True,
            )
        threading.Thread(
            target=self._read_stdout, name="profile-py-spy-stdout", daemon=True
        ).start()

    def _read_stdout(self) -> None:
        """py-spy prints 'Sampling process ...' once it has attached: its samples cover from then."""
        for line in self.proc.stdout:
            if self.sampling_from_ns is None and b"Sampling process" in line:
                self.sampling_from_ns = time.monotonic_ns()

    def stop(self, wait_s: float = 5.0) -> None:
        if self.proc is None or self.sampling_to_ns is not None:
            return
        self.sampling_to_ns = time.monotonic_ns()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes what it has on Ctrl-C
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        err = self._err_file.read_bytes() if self._err_file.is_file() else b""
        if not self.out_file.is_file():
            self.error = (err or b"").decode(errors="replace").strip()[
                -500:
            ] or "py-spy wrote no samples"

    def stacks(self) -> list[tuple[int, str, int]]:
        """(thread id as the job sees it, its Python stack 'outer;...;inner', samples holding the GIL)."""
        if self.proc is None or not self.out_file.is_file():
            return []
        out = []
        for line in self.out_file.read_text(errors="replace").splitlines():
            match = re.match(r"^thread \((\d+)\)[^;]*(?:;(.*))? (\d+)$", line)
            if match:
                out.append((int(match.group(1)), match.group(2) or "", int(match.group(3))))
        return out

    def holders(self) -> dict[int, dict]:
        """Per thread id (as the job sees it): {"samples": n, "site": the frame it held the GIL at most}."""
        out: dict[int, dict] = {}
        sites: dict[int, dict[str, int]] = {}
        for tid, stack, count in self.stacks():
            out.setdefault(tid, {"samples": 0})["samples"] += count
            leaf = stack.rsplit(";", 1)[-1] if stack else "?"
            sites.setdefault(tid, {})[leaf] = sites.get(tid, {}).get(leaf, 0) + count
        for tid, by_site in sites.items():
            out[tid]["site"] = max(by_site, key=by_site.get)
        return out
