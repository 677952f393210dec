import stat

from infra_agent.tools.common.seeds import SECRET_NAME, trial_seed


def test_seeds_are_stable_per_workspace_and_differ_per_trial(tmp_path):
    a = trial_seed(tmp_path, "exp1", 0, 0)
    assert a == trial_seed(tmp_path, "exp1", 0, 0)
    others = {
        trial_seed(tmp_path, "exp1", 0, 1),
        trial_seed(tmp_path, "exp1", 1, 0),
        trial_seed(tmp_path, "exp2", 0, 0),
    }
    assert a not in others and len(others) == 3
    assert 0 <= a < 2**63


def test_secret_is_private_and_makes_seeds_unpredictable(tmp_path):
    ws1, ws2 = tmp_path / "one", tmp_path / "two"
    assert trial_seed(ws1, "exp", 0, 0) != trial_seed(ws2, "exp", 0, 0)
    mode = stat.S_IMODE((ws1 / SECRET_NAME).stat().st_mode)
    assert mode == 0o600
