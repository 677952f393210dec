"""Per-trial seeds that the agent can read but not predict.

Every trial draws fresh inputs from a seed. The seed is a keyed hash of (experiment,
case, trial) under a secret that lives only in the server's state folder (mode 0600),
so a candidate cannot overfit to the inputs it will be tested on: it sees the seed
that was used (to reproduce a failure), never the key that produces the next one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

SECRET_NAME = "seed-secret"
SECRET_BYTES = 32


def trial_seed(state_dir: str | Path, experiment_id: str, case_index: int, trial: int) -> int:
    """A 63-bit seed (fits torch.Generator.manual_seed) for one trial of one case."""
    key = _secret(Path(state_dir))
    message = f"{experiment_id}\x00{case_index}\x00{trial}".encode()
    digest = hashlib.blake2b(message, key=key, digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2**63 - 1)


def _secret(state_dir: Path) -> bytes:
    path = state_dir / SECRET_NAME
    try:
        data = path.read_bytes()
        if len(data) == SECRET_BYTES:
            return data
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
    # Write to a private temporary file, then rename: two servers starting at once
    # agree on one secret (the last rename wins and both re-read it), and the key is
    # never readable by others, not even for a moment.
    tmp = state_dir / f".{SECRET_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(SECRET_BYTES))
    finally:
        os.close(fd)
    if not path.exists():
        os.replace(tmp, path)
    else:
        tmp.unlink()
    data = path.read_bytes()
    if len(data) != SECRET_BYTES:
        raise RuntimeError(
            f"{path} is corrupt ({len(data)} bytes); delete it to make a new seed secret"
        )
    return data
