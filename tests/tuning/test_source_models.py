"""Source models built once: a study whose stored source models are current fits no source GP,
loads the same models it would have fitted (the same suggestions), and a new study adds one.

History: the first studies of the committed starter history (real mlp runs on real tables),
written into a real sqlite MLflow store as `bootstrap starter` writes them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
STARTER = REPO / "agent" / "knowledge" / "starters" / "mlp.npz"
N_SOURCES = 7


def _starter_entries(first: int, count: int) -> tuple[list[dict], list[dict]]:
    archive = np.load(STARTER, allow_pickle=False)
    data = json.loads(archive["header"].tobytes().decode())
    entries = []
    for i in range(first, first + count):
        entry = dict(data["studies"][i])
        entry["sample"] = (archive[f"X{i}"], archive[f"y{i}"]) if f"X{i}" in archive.files else None
        entries.append(entry)
    return entries, data["space"]


@pytest.fixture
def history(store):
    from agent.knowledge.starter import write_entries

    entries, space = _starter_entries(0, N_SOURCES)
    kb = store.kb()
    write_entries(kb, entries, space, "test")
    return kb


def _plan(kb, models: Path, fits=None, surrogate: str = "rgpe"):
    from agent.config import StudySettings
    from agent.jobs import load_job
    from agent.tuning.plan import plan_sampler

    job = load_job("mlp")
    settings = StudySettings(
        job="mlp",
        job_name=job.name,
        dataset="wine",
        dataset_name="wine",
        fingerprint="new",
        space_signature=job.space.signature(),
        metric="val_loss",
        mode="min",
        trials=5,
        models_dir=str(models),
        surrogate=surrogate,
    )
    lines: list[str] = []
    planned = plan_sampler(kb, job.space, settings, None, surrogate, "new", fits, progress=lines.append)
    return planned, lines


def test_current_source_models_mean_zero_fits_and_the_same_plan(history, tmp_path: Path) -> None:
    from agent.surrogates.source_fits import SourceFits
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning.source_models import update_for_job

    models = tmp_path / "models"
    built = update_for_job(history, models, "mlp")
    assert built["sources"] == N_SOURCES and built["fitted"] == N_SOURCES
    assert update_for_job(history, models, "mlp")["fitted"] == 0  # nothing new: nothing fitted

    fits = SourceFits(SourceModelStore(models))
    planned, lines = _plan(history, models, fits)
    assert fits.fitted == 0, lines
    assert not any("fitting" in line for line in lines)
    fresh, _ = _plan(history, tmp_path / "elsewhere", SourceFits())  # no store: everything fitted here
    assert planned.plan.source_keys == fresh.plan.source_keys
    assert planned.plan.initial == fresh.plan.initial  # the same portfolio start
    import torch

    X = torch.rand(
        64, planned.surrogate.inputs.space.dim, dtype=torch.double, generator=torch.Generator().manual_seed(0)
    )
    for a, b in zip(planned.surrogate.models, fresh.surrogate.models):
        with torch.no_grad():
            assert torch.equal(a.posterior(X).mean, b.posterior(X).mean)  # loaded = fitted, bit for bit


def test_a_new_study_adds_one_fit_and_a_missing_store_fits_with_a_progress_line(history, store, tmp_path: Path) -> None:
    from agent.knowledge.starter import write_entries
    from agent.surrogates.source_fits import SourceFits
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning.source_models import update_for_job

    models = tmp_path / "models"
    fits = SourceFits(SourceModelStore(models))
    _, lines = _plan(history, models, fits)  # no source models yet: fitted once, with a line saying so
    assert fits.fitted == N_SOURCES
    assert any(f"fitting {N_SOURCES} source GPs ({N_SOURCES} sources)" in line for line in lines), lines

    entries, space = _starter_entries(N_SOURCES, 1)
    write_entries(history, entries, space, "test")  # a study ends: one more dataset in the history
    assert update_for_job(history, models, "mlp")["fitted"] == 1
    fits = SourceFits(SourceModelStore(models))
    planned, _ = _plan(history, models, fits)
    assert fits.fitted == 0 and len(planned.plan.source_keys) == N_SOURCES + 1


def test_a_damaged_line_is_skipped_and_an_unwritable_store_still_plans(history, tmp_path: Path) -> None:
    from agent.surrogates.source_fits import SourceFits
    from agent.surrogates.source_store import FILE, SourceModelStore
    from agent.tuning.source_models import update_for_job

    models = tmp_path / "models"
    update_for_job(history, models, "mlp")
    path = models / FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2], "not json"]) + "\n")  # a crash mid-line
    fits = SourceFits(SourceModelStore(models))
    _plan(history, models, fits)
    assert fits.fitted <= 1  # at most the record cut short is fitted again

    blocked = tmp_path / "a-file"
    blocked.write_text("")  # models dir under a file: no one, root included, can write there
    store = SourceModelStore(blocked / "models")
    fits = SourceFits(store)
    planned, _ = _plan(history, blocked / "models", fits)
    assert store.write_error is not None and "a-file" in store.write_error
    assert fits.fitted == N_SOURCES and planned.surrogate is not None  # the study is planned all the same


def test_a_study_that_ends_stores_its_dataset_as_a_source(history, store, cli, tmp_path: Path) -> None:
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning.source_models import update_for_job

    models = tmp_path / "models"
    update_for_job(history, models, "mlp")
    res = cli(
        "start",
        "--dataset",
        "iris?fraction=0.3",
        "--job",
        "mlp",
        "--trials",
        "5",
        "--epochs",
        "1",
        "--surrogate",
        "rgpe",
        "--models-dir",
        str(models),
        *store.args,
    )
    assert res.code == 0, res.err
    assert "source models: 1 GP(s) fitted" in res.out
    assert "fitting" not in res.out  # the history's sources were all stored
    assert update_for_job(history, models, "mlp")["fitted"] == 0
    assert len(SourceModelStore(models)) == N_SOURCES + 1


def test_a_history_larger_than_the_surrogate_attends_to_keeps_the_most_relevant(
    history, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.jobs import load_job
    from agent.surrogates.source_fits import SourceFits
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning import source_models
    from agent.tuning.source_models import history_sources, most_relevant, update_for_job

    models = tmp_path / "models"
    update_for_job(history, models, "mlp")
    monkeypatch.setattr(source_models, "MAX_SOURCES", 3)
    space = load_job("mlp").space
    fits = SourceFits(SourceModelStore(models))
    sources = history_sources(history, "mlp", space, None, fits.store)
    ranked = [s.key for s in reversed(sources)]  # a warm start's order: nearest first
    lines: list[str] = []
    kept = most_relevant(sources, ranked, fits, space, "plain", lines.append)
    assert {s.key for s in kept} == set(ranked[:3]) and "nearest by meta-features" in lines[0]
    kept = most_relevant(sources, (), fits, space, "plain", lines.append)  # no ranking: the most predictable surfaces
    r2 = sorted((fits.verdict(s)[1] for s in sources), reverse=True)
    assert sorted((fits.verdict(s)[1] for s in kept), reverse=True) == r2[:3] and fits.fitted == 0
    fresh = SourceFits()  # the stored verdicts are the ones a fit gives
    assert [fits.verdict(s)[0] for s in sources] == [fresh.verdict(s)[0] for s in sources]


def test_source_means_on_two_threads_leave_every_later_posterior_its_variance() -> None:
    """Source means taken on two threads at once (two studies ending in one process) change no
    process-wide GPyTorch setting: a GP's posterior afterwards still has its variance."""
    import sys
    import threading

    import torch

    from agent.surrogates.source_fits import SourceFits, SourceTask
    from agent.surrogates.source_gp import fit_source_gps

    rng = np.random.default_rng(0)
    sources = []
    for k in range(2):
        U = rng.random((12, 2))
        sources.append(SourceTask(f"s{k}", f"s{k}", U, np.sin(3 * U[:, 0] + k)))
    fits = SourceFits()
    for s in sources:
        fits.gp(s)

    def means(source: SourceTask) -> None:
        own = np.random.default_rng(int(source.key[1:]))  # each thread its own points
        for i in range(300):
            fits.mean_on(source, own.random((4, 2)) + i)  # new points each time: never from the cache

    threads = [threading.Thread(target=means, args=(s,)) for s in sources]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads change hands often, as on a busy machine
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    import gpytorch

    assert not gpytorch.settings.skip_posterior_variances.on()
    model = fit_source_gps([(sources[0].U, sources[0].y)])[0]
    with torch.no_grad():
        variance = model.posterior(torch.as_tensor(rng.random((3, 2)))).variance
    assert bool((variance > 0).all()), variance


def test_source_gps_fitted_in_worker_processes_are_the_ones_fitted_here(tmp_path) -> None:
    """`meta publish` on a large history fits source GPs on every core: each worker's fit gives the
    hyperparameters and signal check this process would (one thread, the same data), and they are
    stored for the next study."""
    from agent.jobs import load_job
    from agent.surrogates.contract import SurrogateInputs
    from agent.surrogates.gp import gp_state, normal_scores
    from agent.surrogates.source_fits import SourceFits, SourceTask
    from agent.surrogates.source_store import SourceModelStore

    space = load_job("mlp").space
    entries, _ = _starter_entries(0, 4)
    tasks = []
    for e in entries:
        U = np.array([space.encode(c) for c in e["configs"]])
        y = -np.array(e["values"], dtype=float)
        tasks.append(SourceTask(e["name"], e["name"], U[np.isfinite(y)], normal_scores(y[np.isfinite(y)])))
    inputs = SurrogateInputs(space, tuple(tasks))
    here = SourceFits()
    states = [gp_state(here.gp(t, inputs)[0]) for t in tasks]
    store = SourceModelStore(tmp_path)
    apart = SourceFits(store)
    ticks: list[int] = []
    apart.fit_many(tasks, inputs, 2, ticks.append)
    assert ticks == [1, 2, 3, 4] and apart.fitted == 4
    for task, state in zip(tasks, states):
        stored = store.fit(task.digest, "plain")
        assert stored is not None and here.verdict(task, inputs) == pytest.approx(apart.verdict(task, inputs))
        for name, value in state.items():
            assert np.allclose(stored["state"][name]["values"], value["values"]), name
    assert SourceFits(store).missing(tasks, inputs) == []


def test_a_study_on_a_large_history_reads_only_the_records_of_the_sources_it_attends_to(
    store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history ten times a small one (3 starter datasets, 10 copies each, 8 evaluations per copy):
    with the surrogate attending to 5 sources, the study parses the records of those 5 (their data
    and GP fit) and no other, and plans on the 5 nearest by meta-features."""
    import hashlib

    from agent.config import StudySettings
    from agent.data import describe_dataset, load_dataset, sample_dataset
    from agent.jobs import load_job
    from agent.knowledge.starter import write_entries
    from agent.surrogates.source_fits import SourceFits
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning import source_models
    from agent.tuning.plan import plan_sampler
    from agent.tuning.warmstart import plan_warm_start

    entries, space = _starter_entries(0, 3)
    rng = np.random.default_rng(0)
    copies = []
    for c in range(10):
        for e in entries:
            name = f"{e['settings']['dataset_name']}~{c}"
            fingerprint = hashlib.sha256(name.encode()).hexdigest()[:16]
            values = [v + float(rng.normal(0, 0.01)) for v in e["values"][:8]]
            settings = {**e["settings"], "dataset_name": name, "dataset": name, "fingerprint": fingerprint}
            summary = {**e["summary"], "name": name, "source": name, "fingerprint": fingerprint}
            features = {k: v if k == "version" else v * (1 + float(rng.normal(0, 0.05)))
                        for k, v in e["metafeatures"].items()}  # fmt: skip
            copies.append({**e, "name": f"{e['name']}~{c}", "settings": settings, "summary": summary,
                           "configs": e["configs"][:8], "values": values, "metafeatures": features})  # fmt: skip
    kb = store.kb()
    write_entries(kb, copies, space, "test")
    models = tmp_path / "models"
    assert source_models.update_for_job(kb, models, "mlp")["sources"] == 30
    monkeypatch.setattr(source_models, "MAX_SOURCES", 5)
    read: dict[str, list[str]] = {"trials": [], "whole records": [], "whole listings": []}
    trials, full_study, list_studies = kb.trials, kb.full_study, kb.list_studies
    monkeypatch.setattr(kb, "trials", lambda s: read["trials"].append(s.study_id) or trials(s))
    monkeypatch.setattr(kb, "full_study", lambda s: read["whole records"].append(s.study_id) or full_study(s))
    monkeypatch.setattr(kb, "list_studies", lambda: read["whole listings"].append("") or list_studies())

    job, data = load_job("mlp"), load_dataset("wine")
    warm = plan_warm_start(
        kb, job, data, sample_dataset(data, 256, seed=0), describe_dataset(data), "handcrafted", 3, models
    )
    assert len(warm.ranked) == 30
    settings = StudySettings(
        job="mlp",
        job_name=job.name,
        dataset="wine",
        dataset_name="wine",
        fingerprint=data.fingerprint,
        space_signature=job.space.signature(),
        metric="val_loss",
        mode="min",
        trials=5,
        models_dir=str(models),
        surrogate="rgpe",
    )
    store_file = SourceModelStore(models)
    fits = SourceFits(store_file)
    said: list[str] = []
    planned = plan_sampler(kb, job.space, settings, warm, "rgpe", data.fingerprint, fits, progress=said.append)
    assert set(planned.plan.source_keys) == set(warm.ranked[:5])
    assert fits.fitted == 0 and store_file.parsed <= 5 + 5 + 1  # 5 sources' data and fits, and a portfolio
    assert fits.rebuilt == 0  # the portfolio is scored on a stack made from the stored states, no BoTorch model
    assert any("30 source datasets; the surrogate attends to the 5 nearest" in line for line in said), said
    # from the tracking store: the light study index, and the trials of the 3 neighbours it seeds from alone
    neighbours = {i for h in warm.history if h.key in {n.key for n in warm.neighbours} for i in h.study_ids}
    assert len(warm.neighbours) == 3 and not read["whole listings"], read
    assert set(read["trials"]) == neighbours and set(read["whole records"]) <= neighbours, read
