"""Knowing when history does not apply: the new dataset's distance against the history's own."""

from __future__ import annotations

import numpy as np

from agent.tuning.warmstart import NeighbourInfo, WarmStart, nearness


def test_a_dataset_farther_than_any_historical_one_is_far() -> None:
    rng = np.random.default_rng(0)
    # Two sources, five related datasets each, the sources a few units apart.
    vectors = np.vstack([rng.normal(0.0, 0.3, (5, 4)), rng.normal(0.0, 0.3, (5, 4)) + [3.0, 0, 0, 0]])
    sources = ["a"] * 5 + ["b"] * 5
    near = nearness(vectors[0] + 0.05, vectors, sources, standardise=False)
    assert near is not None and not near.far and near.ratio < 1.0
    # Its own source's datasets do not count as its nearest other-source neighbours: the history's
    # distances are the gaps between the two sources (about 3), not within them (about 0.4).
    assert 2.0 < near.median <= near.largest < 4.5
    far = nearness(np.array([0.0, 40.0, 0.0, 0.0]), vectors, sources, standardise=False)
    assert far is not None and far.far and far.ratio > 5
    assert nearness(vectors[0], vectors[:1], sources[:1], standardise=False) is None  # nothing to compare


def test_the_history_own_distances_are_exact_in_blocks_and_sampled_beyond_a_size(monkeypatch) -> None:
    """Each dataset's nearest other-source distance, a few rows at a time, equals the all-pairs
    answer; beyond OWN_SAMPLE datasets a fixed sample of them gives nearly the same median."""
    import agent.meta.neighbours as neighbours
    from agent.meta.neighbours import own_nearest, pairwise_distances

    rng = np.random.default_rng(3)
    M = rng.normal(size=(300, 6))
    sources = [f"s{i // 4}" for i in range(300)] + ["alone"]
    M = np.vstack([M, rng.normal(size=(1, 6))])
    D = pairwise_distances(M, standardise=False)
    src = np.array(sources)
    brute = np.array([D[i][src != src[i]].min() for i in range(len(M))])
    assert np.allclose(own_nearest(M, sources, block=7), brute)
    monkeypatch.setattr(neighbours, "OWN_SAMPLE", 120)
    sampled = own_nearest(M, sources, block=7)
    assert len(sampled) == 120 and abs(np.median(sampled) / np.median(brute) - 1) < 0.1
    assert np.allclose(sampled, own_nearest(M, sources))  # the same sample every time


def test_a_far_dataset_takes_no_seeds_from_its_neighbours() -> None:
    n = NeighbourInfo("iris", "k", 9.0, {"x": 1}, 0.5)
    assert WarmStart("handcrafted", (n,), far=False).seeds == [({"x": 1}, "warm:handcrafted:iris")]
    far = WarmStart("handcrafted", (n,), far=True, distance_ratio=12.0)
    assert far.seeds == []
    assert WarmStart.from_record(far.to_record()) == far  # resume sees the same decision


def test_meta_features_of_an_older_version_are_recomputed_once_and_stored(tmp_path) -> None:
    """A store written before meta-features version 2: the first warm start recomputes them from
    the samples (saying so) and stores them; the next reads them."""
    import json
    from pathlib import Path

    from agent.data import describe_dataset, load_dataset, sample_dataset
    from agent.jobs import load_job
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.starter import import_starter, read_starter, write_starter
    from agent.meta.handcrafted import HANDCRAFTED_NAMES, is_current
    from agent.tuning.warmstart import plan_warm_start

    repo = Path(__file__).resolve().parents[2]
    header, entries = read_starter(repo / "agent" / "knowledge" / "starters" / "mlp.npz")
    old = [{**e, "metafeatures": {n: 0.5 for n in HANDCRAFTED_NAMES[:10]}} for e in entries[:6]]  # version 1's shape
    write_starter(tmp_path / "old.npz", header["job"], header["space"], old)
    kb = open_knowledge_base("memory:")
    import_starter(kb, tmp_path / "old.npz")
    data = load_dataset("wine")
    sample, summary = sample_dataset(data, 256, seed=0), describe_dataset(data)
    said: list[str] = []
    warm = plan_warm_start(kb, load_job("mlp"), data, sample, summary, "handcrafted", 3, tmp_path, progress=said.append)
    assert warm.neighbours and any("older version" in line and "6 historical datasets" in line for line in said)
    assert all(is_current(json.loads(kb.study_tags(s)["metafeatures"])) for s in kb.list_studies())
    again: list[str] = []
    plan_warm_start(kb, load_job("mlp"), data, sample, summary, "handcrafted", 3, tmp_path, progress=again.append)
    assert not any("older version" in line for line in again)


def test_neighbours_whose_best_is_taken_seed_their_next_best(tmp_path) -> None:
    """Every historical dataset's best is the same configuration: the k neighbours still seed k
    distinct configurations, the nearer its best, the others their best not yet seeded."""
    from pathlib import Path

    from agent.data import describe_dataset, load_dataset, sample_dataset
    from agent.jobs import load_job
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.history import config_key
    from agent.knowledge.starter import import_starter, read_starter, write_starter
    from agent.tuning.warmstart import plan_warm_start

    repo = Path(__file__).resolve().parents[2]
    header, entries = read_starter(repo / "agent" / "knowledge" / "starters" / "mlp.npz")
    shared = []
    for e in entries:
        values = np.array(e["values"], dtype=float)
        values[0] = np.nanmin(values) - 0.1  # val_loss (min): configuration 0 is everyone's best
        shared.append({**e, "values": values.tolist()})
    write_starter(tmp_path / "shared.npz", header["job"], header["space"], shared)
    kb = open_knowledge_base("memory:")
    import_starter(kb, tmp_path / "shared.npz")
    data = load_dataset("wine")
    warm = plan_warm_start(
        kb, load_job("mlp"), data, sample_dataset(data, 256, seed=0), describe_dataset(data), "handcrafted", 3, tmp_path
    )
    assert len(warm.neighbours) == 3
    keys = [config_key(n.best_config) for n in warm.neighbours]
    assert not warm.far and len(set(keys)) == 3 and len(warm.seeds) == 3
    assert keys[0] == config_key(entries[0]["configs"][0])  # the nearest seeds the shared best


def test_a_much_faster_configuration_of_nearly_the_best_value_is_seeded_instead() -> None:
    from agent.knowledge.history import Evaluation, HistoricalDataset, config_key

    def ev(x: int, value: float, seconds: float | None) -> Evaluation:
        return Evaluation({"x": x}, value, None, {} if seconds is None else {"fit_seconds": seconds})

    def dataset(*evaluations: Evaluation) -> HistoricalDataset:
        return HistoricalDataset(
            "k", "d", "d", "tabular", "mlp", "s", "f", "val_loss", "min", (), (), {}, tuple(evaluations)
        )

    slow_best = dataset(ev(1, 0.100, 40.0), ev(2, 0.101, 5.0), ev(3, 0.5, 1.0), ev(4, 1.1, 1.0))
    assert slow_best.warm_pick(set()).config == {"x": 2}  # 0.1% of the range worse, 8x faster
    assert slow_best.warm_pick({config_key({"x": 2})}).config == {"x": 1}
    clearly_better = dataset(ev(1, 0.100, 40.0), ev(2, 0.200, 5.0), ev(3, 1.1, 1.0))
    assert clearly_better.warm_pick(set()).config == {"x": 1}  # 10% of the range: the best stays
    untimed = dataset(ev(1, 0.100, None), ev(2, 0.101, None))
    assert untimed.warm_pick(set()).config == {"x": 1}
    assert untimed.warm_pick({config_key({"x": 1}), config_key({"x": 2})}) is None


def test_a_large_history_keeps_its_own_distances_and_measures_only_new_datasets(tmp_path, monkeypatch) -> None:
    """From CACHED_FROM datasets on, the history's own distances are kept in the cache folder: the
    next start with the same history measures nothing again, one with a few more datasets measures
    only those, and the figures equal an all-pairs measurement in the kept standardisation."""
    import agent.meta.neighbours as neighbours
    from agent.meta.handcrafted import standardise_columns
    from agent.meta.own_distances import CACHED_FROM, history_distances

    monkeypatch.setenv("TUNE_AGENT_CACHE", str(tmp_path))
    rng = np.random.default_rng(5)
    n = CACHED_FROM + 40
    V = rng.normal(size=(n + 6, 5)) * [1, 10, 100, 1, 1]
    V[rng.random(V.shape) < 0.03] = np.nan
    keys, sources = [f"k{i}" for i in range(n + 6)], [f"s{i // 3}" for i in range(n + 6)]
    query = rng.normal(size=5)

    def brute(rows: int, stats_from: int) -> tuple[float, np.ndarray]:
        _, mean, std = standardise_columns(V[:stats_from])
        Z = np.nan_to_num((V[:rows] - mean) / std, nan=0.0)
        zq = np.nan_to_num((query - mean) / std, nan=0.0)
        src = np.array(sources[:rows])
        D = np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(2))
        own = np.array([D[i][src != src[i]].min() for i in range(rows)])
        return float(np.sqrt(((Z - zq) ** 2).sum(1)).min()), own

    first = history_distances(query, V[:n], keys[:n], sources[:n], True, "scope")
    expected = brute(n, n)
    assert np.isclose(first[0], expected[0]) and np.allclose(np.sort(first[1]), np.sort(expected[1]))

    measured: list[int] = []
    whole = neighbours.own_nearest_rows
    monkeypatch.setattr(
        neighbours, "own_nearest_rows", lambda M, s, rows, *a: measured.append(len(rows)) or whole(M, s, rows, *a)
    )
    again = history_distances(query, V[:n], keys[:n], sources[:n], True, "scope")
    assert measured == [] and np.allclose(again[1], first[1])  # nothing measured again
    grown = history_distances(query, V, keys, sources, True, "scope")
    assert measured == [6]  # only the six new datasets
    expected = brute(n + 6, n)  # in the kept standardisation
    assert np.isclose(grown[0], expected[0]) and np.allclose(np.sort(grown[1]), np.sort(expected[1]))
    V[3] += 1.0  # a dataset's vector changed: measured whole again
    history_distances(query, V, keys, sources, True, "scope")
    assert measured[-1] == n + 6
