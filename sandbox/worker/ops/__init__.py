"""One module per job op. Each defines ``run(payload: dict, ctx: JobContext) -> dict``.

The returned dict must be JSON-serialisable raw data (measurements, shapes, hashes,
file names under ``ctx.out_dir``); never a verdict.
"""
