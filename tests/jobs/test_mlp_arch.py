"""`mlp-arch`: a conditional job; its studies use the arc kernel and log only active hyperparameters."""

from __future__ import annotations

import numpy as np

from agent.jobs import load_job


def test_the_space_is_conditional_on_depth() -> None:
    job = load_job("mlp-arch")
    space = job.space
    assert space.dim == 19 and space.has_conditions
    shallow = space.decode(np.full(space.dim, 0.05))
    assert shallow["num_layers"] == 1 and "units_1" in shallow and "units_2" not in shallow
    deep = space.decode(np.full(space.dim, 0.95))
    assert deep["num_layers"] == 5 and {f"l2_{i}" for i in range(1, 6)} <= set(deep)


def test_a_study_runs_bo_with_the_arc_kernel_and_logs_active_params_only(store, cli) -> None:
    res = cli("start", "--dataset", "iris", "--job", "mlp-arch", "--trials", "4", "--n-init", "3", "--epochs", "1",
              "--warm-start", "none", "--study-name", "arch", *store.args)
    assert res.code == 0, res.err
    kb = store.kb()
    study = kb.find_study("arch")
    assert study.settings["kernel"] == "arc"  # auto: the space has conditions
    trials = kb.trials(study)
    assert [t.origin for t in trials][-1] == "bo:logei"
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    for t in trials:
        params = client.get_run(t.trial_id).data.params
        depth = int(t.config["num_layers"])
        assert {k for k in params if k.startswith("units_")} == {f"units_{i}" for i in range(1, depth + 1)}
    plain = cli("start", "--dataset", "iris", "--job", "mlp", "--trials", "1", "--epochs", "1", "--kernel", "arc",
                "--warm-start", "none", "--study-name", "no-arc", *store.args)
    assert plain.code == 2 and "--kernel arc needs a search space with conditional" in plain.err
