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
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp-arch",
        "--trials",
        "4",
        "--n-init",
        "3",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "arch",
        *store.args,
    )
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
    plain = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--kernel",
        "arc",
        "--warm-start",
        "none",
        "--study-name",
        "no-arc",
        *store.args,
    )
    assert plain.code == 2 and "--kernel arc needs a search space with conditional" in plain.err


def test_an_mlp_arch_study_warm_starts_from_mlp_history(store, cli) -> None:
    """Only `mlp` history in the store: the `mlp-arch` study matches the shared hyperparameters by
    name and type, says which in one line, seeds from a neighbour and runs RGPE on that history."""
    import json

    from agent.pipeline.bootstrap import run_bootstrap

    summary = run_bootstrap(
        "mlp",
        ["wine", "breast-cancer?fraction=0.3&seed=2"],
        configs=6,
        epochs=1,
        seed=0,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        echo=lambda _: None,
    )
    assert summary["studies"] == 2
    res = cli(
        "start",
        "--dataset",
        "wine?fraction=0.6&seed=4",
        "--job",
        "mlp-arch",
        "--trials",
        "3",
        "--n-init",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "handcrafted",
        "--k",
        "1",
        "--surrogate",
        "rgpe",
        "--study-name",
        "arch-warm",
        *store.args,
    )
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if x.startswith("warm start"))
    assert (
        "history of job mlp shares 4 hyperparameters with this space "
        "(learning_rate, momentum, batch_size, num_layers); 15 others are left"
    ) in line
    kb = store.kb()
    study = kb.find_study("arch-warm")
    trials = kb.trials(study)
    assert trials[0].origin.startswith("warm:handcrafted:")
    plan = json.loads(kb.study_tags(study)["surrogate_plan"])
    # Both translated histories reach the surrogate; with 6 evaluations each, on 4 of 19 dimensions,
    # RGPE's guard may find their surfaces unpredictable and run the target's GP, and says so.
    assert len(plan["source_keys"]) == 2, plan
    assert plan["surrogate"] == "rgpe" or "none of the 2 source tasks has a predictable" in plan["note"]
    assert trials[-1].origin.startswith("bo:")
