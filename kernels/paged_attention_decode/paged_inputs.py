"""Inputs of a paged decode-attention call that the declarative spec args cannot express:
a block table of distinct blocks and context lengths that fit it.

`context_lengths` is pure Python: spec.py's cost model uses it too (the server never
imports torch), so FLOPs and bytes count exactly the tokens the inputs hold.
"""


def context_lengths(num_seqs: int, max_blocks: int, block_size: int) -> list[int]:
    """Tokens in each sequence's context, spread evenly from a full block table down to one
    token: the full table, a single token and partial last blocks are always covered."""
    capacity = max_blocks * block_size
    if num_seqs == 1:
        return [capacity]
    return [capacity - (capacity - 1) * b // (num_seqs - 1) for b in range(num_seqs)]


def make_inputs(shape: dict, dtype, generator) -> list:
    """[q, k_cache, v_cache, block_table, seq_lens] for one trial, drawn from `generator`.

    Every sequence gets its own blocks (a random permutation of the pool, as a block
    manager hands them out after churn); table entries past a sequence's last block hold
    other sequences' blocks, so a kernel that ignores seq_lens reads wrong tokens. The
    lengths are assigned to sequences in random order.
    """
    import torch

    B, Hq, Hkv, D = shape["B"], shape["Hq"], shape["Hkv"], shape["D"]
    NB, BS, MB = shape["NB"], shape["BS"], shape["MB"]
    if Hq % Hkv:
        raise ValueError(f"Hq={Hq} must be a multiple of Hkv={Hkv} (grouped-query attention)")
    if NB < B * MB:
        raise ValueError(f"NB={NB} blocks cannot give {B} sequences {MB} distinct blocks each: use NB >= B*MB")
    q = torch.randn((B, Hq, D), generator=generator, dtype=torch.float64).to(dtype)
    k_cache = torch.randn((NB, BS, Hkv, D), generator=generator, dtype=torch.float64).to(dtype)
    v_cache = torch.randn((NB, BS, Hkv, D), generator=generator, dtype=torch.float64).to(dtype)
    block_table = torch.randperm(NB, generator=generator)[: B * MB].reshape(B, MB).to(torch.int32)
    order = torch.randperm(B, generator=generator)
    seq_lens = torch.tensor(context_lengths(B, MB, BS), dtype=torch.int32)[order]
    return [q, k_cache, v_cache, block_table, seq_lens]


def load_sibling(kernel: str, file: str):
    """A module of another kernel folder of this workspace (e.g. kv_quant's quantiser), imported
    once under a name of its own: every folder has a reference.py, so plain imports would collide."""
    import importlib.util
    import sys
    from pathlib import Path

    name = f"zoo_{kernel}_{Path(file).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / kernel / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
