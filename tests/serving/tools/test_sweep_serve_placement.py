"""sweep_serve's `resources` (a Ray cluster's node for every config's engine): each config's
launch_serve call carries it, and a config measured on one kind of node is never reused for
another (resume keys differ), while a sweep without it keys its configs as before."""

from __future__ import annotations

import json

from infra_agent.tools.sweep_serve import plan
from infra_agent.tools.sweep_serve.schema import Input

GIVEN = {
    "engine": "builtin",
    "space": {"max_num_seqs": [1, 4]},
    "ladder": {"concurrencies": [1, 2]},
    "slo": {"ttft_p99_ms": 500.0},
}


def test_each_launch_carries_the_resources_and_they_key_the_config():
    on_h200 = plan.configs(Input(**GIVEN, resources={"accelerator_type:H200": 0.001}))
    on_a100 = plan.configs(Input(**GIVEN, resources={"accelerator_type:A100": 0.001}))
    anywhere = plan.configs(Input(**GIVEN))
    assert [c.launch["resources"] for c in on_h200] == [{"accelerator_type:H200": 0.001}] * 2
    assert all("resources" not in c.launch for c in anywhere)
    for h200, a100, here in zip(on_h200, on_a100, anywhere):
        assert len({plan.config_key(h200.launch), plan.config_key(a100.launch)}) == 2
        # a sweep without resources keys its configs as an earlier version of the sweep did
        assert plan.config_key(here.launch) == json.dumps(
            {"engine": "builtin", "args": here.launch["args"]}, sort_keys=True
        )
