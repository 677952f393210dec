"""The zoo's rmsnorm: rows wider than one block loop over chunks; eps has one definition."""

from __future__ import annotations

import json
import subprocess
import sys

from infra_agent.kernels.workspace import EMBEDDED_ROOT, load_workspace

# Under the Triton interpreter, in a fresh process (the interpreter is chosen at import).
# fp32 blocks hold 16384 elements and fp16 blocks 32768: these rows take 2 chunks, the
# others fit one block (including N exactly one block wide).
SCRIPT = """
import json, torch, rmsnorm_triton as impl, reference as ref
rows = []
for M, N, dtype in [(3, 100, torch.float32), (2, 16384, torch.float32), (2, 20000, torch.float32),
                    (2, 40000, torch.float16)]:
    g = torch.Generator().manual_seed(N)
    x = torch.randn(M, N, generator=g).to(dtype)
    w = (torch.rand(N, generator=g) + 0.5).to(dtype)
    y = impl.rmsnorm(x, w).double()
    r = ref.rmsnorm(x.double(), w.double())
    rows.append([N, str(dtype), float((y - r).norm() / r.norm()), bool(torch.isfinite(y).all())])
print(json.dumps({"rows": rows, "same_eps": impl.EPS is ref.EPS}))
"""


def test_wide_rows_loop_over_blocks_and_match_the_reference():
    folder = EMBEDDED_ROOT / "rmsnorm"
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["same_eps"]
    for n, dtype, rel_l2, finite in out["rows"]:
        assert finite, (n, dtype)
        assert rel_l2 < (1e-6 if dtype == "torch.float32" else 2e-3), (n, dtype, rel_l2)


def test_eps_is_defined_once_in_the_kernel_folder():
    folder = EMBEDDED_ROOT / "rmsnorm"
    defining = [p.name for p in folder.glob("*.py") if "EPS = " in p.read_text()]
    assert defining == ["reference.py"]
    assert load_workspace().kernel("rmsnorm").spec.extra == {}  # no unused third copy in the spec
