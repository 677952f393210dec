"""sweep_kernel's CSV (tools/sweep_kernel/report.py) from hand-made rows, no server: the `wins`
column against the winners it was given."""

import csv
import io

from infra_agent.tools.sweep_kernel.report import csv_rows
from infra_agent.tools.sweep_kernel.schema import ConfigResult, ShapeWinner


def _winner(shape: dict, config: dict) -> ShapeWinner:
    return ShapeWinner(
        shape=shape,
        winner=config,
        winner_median_ms=1.0,
        decided=True,
        tied_with=[],
        rounds=1,
        timing_ms=100.0,
    )


def test_wins_lists_every_shape_a_config_won():
    a, b = {"BLOCK_N": 64}, {"BLOCK_N": 128}
    shapes = [{"M": 4, "N": 64}, {"M": 8, "N": 128}, {"M": 16, "N": 256}]
    winners = [_winner(shapes[0], a), _winner(shapes[1], b), _winner(shapes[2], a)]
    rows = [ConfigResult(config=c, stage="race") for c in (a, b)]
    table = list(csv.DictReader(io.StringIO(csv_rows(rows, winners))))
    assert table[0]["wins"].split() == ["M=4,N=64", "M=16,N=256"]
    assert table[1]["wins"].split() == ["M=8,N=128"]
