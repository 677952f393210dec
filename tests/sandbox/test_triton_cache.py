"""Sharing Triton's cache among one call's jobs: what goes back into a group, and what never does."""

import os
from pathlib import Path

from sandbox_helpers import sandbox  # noqa: F401  (the fixture)

from infra_agent.sandbox import Job, triton_cache
from infra_agent.sandbox.triton_cache import TRUSTED_ZOO, group_dir, keep, prune, seed


def _entry(cache: Path, name: str, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (cache / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / name / rel).write_bytes(data)
    return cache / name


def test_a_jobs_new_kernels_seed_the_next_job_of_its_group_only(tmp_path):
    root, first, second, other = (
        tmp_path / "groups",
        tmp_path / "j1",
        tmp_path / "j2",
        tmp_path / "j3",
    )
    root.mkdir()
    assert seed(root, "e1:candidate", first) == set()
    _entry(first, "HASHA", {"k.cubin": b"\x7fELF", "k.json": b"{}"})
    assert keep(root, "e1:candidate", first, set()) == 1  # one compile
    seeded = seed(root, "e1:candidate", second)
    assert seeded == {"HASHA"} and (second / "HASHA" / "k.cubin").read_bytes() == b"\x7fELF"
    assert keep(root, "e1:candidate", second, seeded) == 0  # a hit: nothing compiled
    assert seed(root, "e1:reference", other) == set() and seed(root, "e2:candidate", other) == set()


def test_links_and_oversized_entries_are_not_kept(tmp_path, monkeypatch):
    root, job = tmp_path / "groups", tmp_path / "job"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("host file")
    _entry(job, "SYMLINKED", {"a.json": b"{}"})
    (job / "SYMLINKED" / "k.cubin").symlink_to(secret)
    _entry(job, "HARDLINKED", {})
    (job / "HARDLINKED").mkdir(exist_ok=True)
    os.link(secret, job / "HARDLINKED" / "k.cubin")
    (job / "LINKED_DIR").symlink_to(tmp_path)
    monkeypatch.setattr(triton_cache, "MAX_ENTRY_BYTES", 10)
    _entry(job, "HUGE", {"k.cubin": b"x" * 11})
    _entry(job, "GOOD", {"k.cubin": b"ok"})
    assert keep(root, "g", job, set()) == 5  # all five were compiled (counted) ...
    assert sorted(p.name for p in group_dir(root, "g").iterdir()) == [
        "GOOD"
    ]  # ... one is plain enough to keep


def test_pruning_keeps_the_newest_groups_and_always_the_trusted_one(tmp_path):
    root = tmp_path / "groups"
    root.mkdir()
    for name in (TRUSTED_ZOO, "a", "b", "c"):
        group_dir(root, name).mkdir()
    os.utime(group_dir(root, TRUSTED_ZOO), (0, 0))  # the oldest of all
    os.utime(group_dir(root, "a"), (1, 1))
    prune(root, keep_groups=2)
    assert {p.name for p in root.iterdir()} == {
        group_dir(root, n).name for n in (TRUSTED_ZOO, "b", "c")
    }


# A job that "compiles" one kernel into Triton's cache and says what it found there first.
COMPILE = """
import os, pathlib
def main(name):
    cache = pathlib.Path(os.environ["TRITON_CACHE_DIR"])
    found = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
    (cache / name).mkdir(parents=True, exist_ok=True)
    (cache / name / "kernel.cubin").write_bytes(b"compiled")
    return found
"""


def test_jobs_of_one_group_share_what_they_compiled(sandbox):  # noqa: F811
    def run(name: str, group: str | None):
        res = sandbox.run(
            Job(
                op="probe",
                payload={"source": COMPILE, "entry": "main", "args": [name]},
                timeout_s=30,
                triton_cache=group,
            )
        )
        assert res.ok, res.error
        return res.result["value"], res.num_compiles

    assert run("A", "e1:candidate") == ([], 1)
    assert run("B", "e1:candidate") == (["A"], 1)  # A was not compiled again
    assert run("C", "e1:reference") == ([], 1)  # another group: nothing from the candidate
    assert run("D", None) == ([], 1)  # no group: an empty cache, counted, not kept
    assert run("E", "e1:candidate") == (["A", "B"], 1)
