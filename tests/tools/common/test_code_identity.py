"""Code identity is the code the call ran: the entry's function and the files it imports, not
the whole kernel folder. A user's own kernel with three impls: `good` in good.py (importing a
helper module), `stride_bug` in stride_bug.py, and `twice`/`twice_too` sharing one file. The
witness for every hash is hashlib over the files' bytes, computed here."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from conftest import call
from rowscale_kernel import write_rowscale

pytestmark = pytest.mark.anyio

IMPLS = {"good": "good.py:rowscale", "twice": "shared.py:twice", "twice_too": "shared.py:twice_too"}
FILES = {
    "helpers.py": "def double(x):\n    return x + x\n",
    "good.py": "from helpers import double\n\n\ndef rowscale(x):\n    return double(x)\n",
    "shared.py": "def twice(x):\n    return 2 * x\n\n\ndef twice_too(x):\n    return x * 2\n",
    # not imported by any impl: an edit of it is not a change of the code the calls ran
    "notes.py": "UNUSED = 1\n",
}


@pytest.fixture
async def own_client(tmp_path: Path):
    from mcp import Client

    from infra_agent.server.app import build_server

    folder = write_rowscale(tmp_path / "ws", IMPLS, FILES, {"M": 4, "N": 8})
    srv = build_server(tmp_path / "ws")
    async with Client(srv) as client:
        yield client, folder
    await srv.aclose()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def check(client, impl: str) -> str:
    out = await call(client, "check_numerics", kernel="rowscale", impl=impl, trials=1)
    assert out["verdict"] == "pass", out["summary"]
    return out["experiment_id"]


async def test_two_impls_in_two_files_are_not_the_same_code(own_client):
    client, folder = own_client
    good, bug = await check(client, "good"), await check(client, "stride_bug")
    cmp = await call(client, "compare_experiments", a=good, b=bug)
    assert cmp["code"]["same_code"] is False, cmp["code"]
    assert "same code" not in cmp["summary"]
    candidate = next(r for r in cmp["code"]["roles"] if r["role"] == "candidate")
    assert candidate["same_code"] is False and "different files" in candidate["words"]
    assert "good.py:rowscale" in candidate["a"] and "stride_bug.py:rowscale" in candidate["b"]
    assert "-    return double(x)" in candidate["diff"], candidate["diff"]
    reference = next(r for r in cmp["code"]["roles"] if r["role"] == "reference")
    assert reference["same_code"] is True  # both compared against one reference

    # what the call ran, by hash (witness: hashlib here): good.py and the helper it imports,
    # nothing else of the folder
    conn = sqlite3.connect(folder.parents[1] / ".infra-agent" / "ledger.sqlite")
    import json

    (code,) = conn.execute("SELECT code FROM experiments WHERE id = ?", (good,)).fetchone()
    conn.close()
    ran = json.loads(code)["ran"]["candidate"]
    assert ran["files"] == {
        "kernels/rowscale/good.py": sha(folder / "good.py"),
        "kernels/rowscale/helpers.py": sha(folder / "helpers.py"),
    }
    assert ran["function"] == "rowscale" and ran["entry_file"] == "kernels/rowscale/good.py"
    text = "def rowscale(x):\n    return double(x)\n"
    assert ran["function_sha256"] == hashlib.sha256(text.encode()).hexdigest()


async def test_two_impls_in_one_file_are_told_apart_by_their_function(own_client):
    client, _ = own_client
    a, b = await check(client, "twice"), await check(client, "twice_too")
    cmp = await call(client, "compare_experiments", a=a, b=b)
    assert cmp["code"]["same_code"] is False
    candidate = next(r for r in cmp["code"]["roles"] if r["role"] == "candidate")
    assert "one file, two functions (the file is the same)" in candidate["words"]
    assert cmp["code"]["files"] == []  # no file's bytes differ: the summary must not say so
    assert "one file, two functions" in cmp["summary"]


async def test_an_edit_of_what_ran_differs_and_of_what_did_not_is_the_same(own_client):
    client, folder = own_client
    first = await check(client, "good")
    (folder / "notes.py").write_text("UNUSED = 2\n")  # beside it, never imported
    unrelated = await check(client, "good")
    (folder / "helpers.py").write_text("def double(x):\n    return 2 * x\n")  # imported by good.py
    edited = await check(client, "good")
    same = await call(client, "compare_experiments", a=first, b=unrelated)
    assert same["code"]["same_code"] is True and "same code" in same["summary"]
    assert same["code"]["files"] == []  # notes.py changed, but no call ran it
    moved = await call(client, "compare_experiments", a=unrelated, b=edited)
    assert moved["code"]["same_code"] is False
    assert [f["path"] for f in moved["code"]["files"]] == ["kernels/rowscale/helpers.py"]
    candidate = next(r for r in moved["code"]["roles"] if r["role"] == "candidate")
    assert "edited: kernels/rowscale/helpers.py" in candidate["words"]
    assert "the function's own text is the same" in candidate["words"]
