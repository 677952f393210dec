"""Read the compilers' own reports: ptxas -v, cuobjdump resource usage, SASS, AMDGCN.

Pure text parsing (no torch, no triton): the worker hands back the tools' raw output and
this module turns it into numbers per kernel function. Instruction classes follow the
opcode families in NVIDIA's "CUDA Binary Utilities" instruction set reference and the
AMD CDNA3 ISA guide.
"""

from __future__ import annotations

import re
from collections import Counter

# ---- NVIDIA: ptxas -v and cuobjdump --dump-resource-usage --------------------------

_PTXAS_FN = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")


def parse_ptxas_log(text: str) -> dict[str, dict[str, int]]:
    """{function: {registers, barriers, stack_frame_bytes, spill_stores_bytes, spill_loads_bytes}}."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        if m := _PTXAS_FN.search(line):
            current = m.group(1)
            out.setdefault(current, {})
        elif current and (m := _PTXAS_FRAME.search(line)):
            out[current].update(
                stack_frame_bytes=int(m[1]),
                spill_stores_bytes=int(m[2]),
                spill_loads_bytes=int(m[3]),
            )
        elif current and (m := _PTXAS_USED.search(line)):
            out[current].update(registers=int(m[1]), barriers=int(m[2] or 0))
    return out


_USAGE_FN = re.compile(r"^\s*Function ([\w$.]+):\s*$")
_USAGE_FIELD = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """cuobjdump --dump-resource-usage: {function: {"REG": 96, "STACK": 0, "SHARED": 1024, "LOCAL": 0, ...}}."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        if m := _USAGE_FN.match(line):
            current = m.group(1)
        elif current:
            fields = dict((k, int(v)) for k, v in _USAGE_FIELD.findall(line))
            if "REG" in fields:
                out[current] = fields
                current = None
    return out


# ---- NVIDIA: SASS instruction mix ----------------------------------------------------

SASS_SECTION = re.compile(r"^\s*\.section\s+\.text\.([\w$.]+),")
# "/*0170*/   @!P1 LDG.E.128 R4, desc[UR8][R14.64] ;" -> "LDG.E.128"
_SASS_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*)")
# "HFMA2.MMA R5, -RZ, RZ, 0, 0": -0 * 0 + constant, the compiler's way to put a constant (often
# zero) in a register on the otherwise idle MMA pipe: a move, not half-precision math.
_HFMA2_CONSTANT = re.compile(r"^\s*R\w+,\s*-RZ,\s*RZ,")

MIX_CLASSES = (
    "tensor_core_mma",
    "ffma",
    "fmul",
    "fadd",
    "half_fma",
    "move",
    "mufu",
    "global_load",
    "global_store",
    "async_copy",
    "bulk_copy",
    "shared_load",
    "shared_store",
    "local_load",
    "local_store",
    "barrier",
)
_SASS_CLASS = {
    "FFMA": "ffma",
    "FFMA2": "ffma",
    "FMUL": "fmul",
    "FMUL2": "fmul",
    "FADD": "fadd",
    "FADD2": "fadd",
    "HFMA2": "half_fma",
    "MOV": "move",
    "UMOV": "move",
    "MUFU": "mufu",
    "LDG": "global_load",
    "STG": "global_store",
    "LDGSTS": "async_copy",  # cp.async: global -> shared without registers (sm_80+)
    "UBLKCP": "bulk_copy",
    "UTMALDG": "bulk_copy",
    "UTMASTG": "bulk_copy",
    "UTMAPF": "bulk_copy",
    "UBLKRED": "bulk_copy",
    "UTMAREDG": "bulk_copy",  # TMA / bulk copies (sm_90+)
    "LDS": "shared_load",
    "LDSM": "shared_load",
    "STS": "shared_store",
    "STSM": "shared_store",
    "LDL": "local_load",
    "STL": "local_store",
    "BAR": "barrier",
}
_WIDTH_BITS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128, "256": 256}


def _sass_class(opcode: str, operands: str = "") -> str | None:
    base = opcode.split(".", 1)[0]
    if opcode.startswith("IMAD.MOV") or (base == "HFMA2" and _HFMA2_CONSTANT.match(operands)):
        return "move"  # RZ * RZ + x and -RZ * RZ + constant: moves in arithmetic clothing
    if base.endswith("MMA"):  # HMMA, IMMA, DMMA, HGMMA, QGMMA, IGMMA, BGMMA, UTC*MMA, OMMA
        return "tensor_core_mma"
    return _SASS_CLASS.get(base)


def _width_bits(opcode: str) -> int:
    widths = [_WIDTH_BITS[m] for m in opcode.split(".")[1:] if m in _WIDTH_BITS]
    return widths[-1] if widths else 32


def classify_sass(text: str) -> dict[str, dict]:
    """Per function: counts by class, global access widths, and every tensor-core opcode."""
    out: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        if m := SASS_SECTION.match(line):
            current = out.setdefault(m.group(1), _empty_mix())
            continue
        m = _SASS_INSN.search(line)
        if current is None or m is None:
            continue
        opcode = m.group(1)
        if opcode.startswith("NOP"):
            continue
        _count(current, _sass_class(opcode, m.group(2)), opcode)
    return out


def sass_mix(instructions) -> dict:
    """The mix of some (opcode, operands) pairs, e.g. one loop's body."""
    mix = _empty_mix()
    for opcode, operands in instructions:
        if not opcode.startswith("NOP"):
            _count(mix, _sass_class(opcode, operands), opcode)
    return mix


# ---- AMD: AMDGCN metadata and instruction mix ----------------------------------------

_AMD_META = {
    "vgpr_count": r"\.vgpr_count:\s+(\d+)",
    "sgpr_count": r"\.sgpr_count:\s+(\d+)",
    "agpr_count": r"\.agpr_count:\s+(\d+)",
    "vgpr_spill_count": r"\.vgpr_spill_count:\s+(\d+)",
    "sgpr_spill_count": r"\.sgpr_spill_count:\s+(\d+)",
    "lds_static_bytes": r"\.group_segment_fixed_size:\s+(\d+)",
    "scratch_bytes_per_lane": r"\.private_segment_fixed_size:\s+(\d+)",
    "compiler_waves_per_simd": r";\s*Occupancy:\s+(\d+)",
}


def parse_amdgcn_metadata(text: str) -> dict[str, int]:
    """Register, spill, LDS and scratch counts from the AMDGCN assembly's kernel metadata."""
    out = {}
    for key, pattern in _AMD_META.items():
        if m := re.search(pattern, text):
            out[key] = int(m.group(1))
    return out


_AMD_INSN = re.compile(r"^\s+([a-z][a-z0-9_]+)(?:\s|$)")
_AMD_WIDTH = {
    "ubyte": 8,
    "sbyte": 8,
    "byte": 8,
    "ushort": 16,
    "sshort": 16,
    "short": 16,
    "dword": 32,
    "dwordx2": 64,
    "dwordx3": 96,
    "dwordx4": 128,
    "b8": 8,
    "b16": 16,
    "b32": 32,
    "b64": 64,
    "b96": 96,
    "b128": 128,
}


# (opcode prefixes, class), first match wins; direct-to-LDS loads before plain loads.
_AMD_CLASSES = (
    (("v_mfma", "v_smfmac", "v_wmma"), "tensor_core_mma"),
    (("v_fma_f32", "v_fmac_f32", "v_pk_fma_f32"), "ffma"),
    (("v_mul_f32", "v_pk_mul_f32"), "fmul"),
    (("v_add_f32", "v_sub_f32", "v_pk_add_f32"), "fadd"),
    (("v_pk_fma_f16", "v_fma_f16", "v_pk_fma_bf16"), "half_fma"),
    (("v_mov_", "s_mov_"), "move"),
    (
        ("v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_"),
        "mufu",
    ),  # the MUFU counterpart
    (("global_load_lds", "buffer_load_lds"), "async_copy"),
    (("global_load", "buffer_load"), "global_load"),
    (("global_store", "buffer_store"), "global_store"),
    (("ds_read", "ds_load"), "shared_load"),
    (("ds_write", "ds_store"), "shared_store"),
    (("scratch_load",), "local_load"),
    (("scratch_store",), "local_store"),
)


def _amd_class(op: str) -> str | None:
    if op == "s_barrier":
        return "barrier"
    if op.startswith("buffer_load") and "lds" in op:
        return "async_copy"  # direct-to-LDS loads
    return next((cls for prefixes, cls in _AMD_CLASSES if op.startswith(prefixes)), None)


def classify_amdgcn(text: str) -> dict:
    """Instruction mix of the kernel body (between its label and .Lfunc_end)."""
    mix = _empty_mix()
    in_body = False
    for line in text.splitlines():
        if re.match(r"^[A-Za-z_][\w$.]*:", line) and not line.startswith("amdhsa"):
            in_body = True
            continue
        if line.startswith(".Lfunc_end"):
            in_body = False
        if not in_body or line.lstrip().startswith((";", ".", "//")):
            continue
        m = _AMD_INSN.match(line)
        if m:
            op = m.group(1)
            cls = _amd_class(op)
            width = next((w for part, w in _AMD_WIDTH.items() if op.endswith("_" + part)), 32)
            _count(mix, cls, op, width)
    return mix


# ---- shared ---------------------------------------------------------------------------


def _empty_mix() -> dict:
    return {
        **{c: 0 for c in MIX_CLASSES},
        "total": 0,
        "global_load_bits": Counter(),
        "global_store_bits": Counter(),
        "tensor_core_ops": Counter(),
    }


def _count(mix: dict, cls: str | None, opcode: str, width: int | None = None) -> None:
    mix["total"] += 1
    if cls is None:
        return
    mix[cls] += 1
    if cls in ("global_load", "global_store"):
        mix[f"{cls}_bits"][str(width if width is not None else _width_bits(opcode))] += 1
    elif cls == "tensor_core_mma":
        mix["tensor_core_ops"][opcode] += 1
