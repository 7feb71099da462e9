"""Meta-models through the tracking store: built in one folder, published, and used from another
folder with no source GP fitted; chunks from studies ending at once both kept; a corrupt cache,
a corrupt published file and a cache that is not the user's each said in one line.

History: the first studies of the packaged starter history (real mlp runs on real tables), in a
real sqlite MLflow store."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.tuning.test_source_models import N_SOURCES, _plan, _starter_entries, history  # noqa: F401 - fixture


def _store(kb, models: Path):
    from agent.jobs import load_job
    from agent.tuning.published import open_source_models

    lines: list[str] = []
    return open_source_models(kb, models, "mlp", load_job("mlp").space, lines.append), lines


def test_a_second_folder_plans_from_the_published_version_without_fitting(history, tmp_path: Path) -> None:
    from agent.jobs import load_job
    from agent.surrogates.source_fits import SourceFits
    from agent.tuning.published import scope_of
    from agent.tuning.source_models import update_for_job

    built = update_for_job(history, tmp_path / "A" / "models", "mlp")
    assert built["fitted"] == N_SOURCES and built["published"] == 1
    record = history.current_meta_models(scope_of("mlp", load_job("mlp").space))
    assert record is not None and record.version == 1 and any(f.startswith("source_models/") for f in record.files)

    store, lines = _store(history, tmp_path / "B" / "models")  # a teammate's folder: no models/ at all
    fits = SourceFits(store)
    planned, plan_lines = _plan(history, tmp_path / "B" / "models", fits)
    assert fits.fitted == 0, plan_lines
    assert not any("fitting" in line for line in plan_lines)
    assert any("fetching version 1" in line for line in lines)
    assert len(planned.plan.source_keys) == N_SOURCES

    again, lines = _store(history, tmp_path / "C" / "models")  # the cache serves: nothing fetched again
    fits = SourceFits(again)
    _plan(history, tmp_path / "C" / "models", fits)
    assert fits.fitted == 0 and not any("fetching" in line for line in lines)
    # nothing new in the history: no new version
    assert update_for_job(history, tmp_path / "C" / "models", "mlp")["published"] == 1


def test_studies_ending_at_once_both_publish_their_additions(history, tmp_path: Path) -> None:
    from agent.jobs import load_job
    from agent.knowledge.starter import write_entries
    from agent.tuning.published import publish_added
    from agent.tuning.source_models import update_for_job, update_source_models

    update_for_job(history, tmp_path / "A", "mlp")
    entries, space = _starter_entries(N_SOURCES, 2)
    write_entries(history, entries, space, "test")  # two studies end: two more datasets
    job = load_job("mlp")
    results: list[str | None] = []

    def end_of_study(folder: str) -> None:
        store, _ = _store(history, tmp_path / folder)
        update_source_models(history, tmp_path / folder, "mlp", job.space, store=store)
        results.append(publish_added(history, store, "mlp", job.space, lambda: "test"))

    threads = [threading.Thread(target=end_of_study, args=(f,)) for f in ("S1", "S2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r and "published to version 1" in r for r in results), results

    store, _ = _store(history, tmp_path / "fresh")
    from agent.surrogates.source_fits import SourceFits

    fits = SourceFits(store)
    planned, lines = _plan(history, tmp_path / "fresh", fits)
    assert fits.fitted == 0, lines  # both additions are in the store
    assert len(planned.plan.source_keys) == N_SOURCES + 2


def test_a_corrupt_cache_is_fetched_again_and_a_corrupt_chunk_is_left_out(
    history, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.jobs import load_job
    from agent.knowledge.meta_cache import default_root, fetch
    from agent.tuning.published import scope_of
    from agent.tuning.source_models import update_for_job

    update_for_job(history, tmp_path / "A", "mlp")
    scope = scope_of("mlp", load_job("mlp").space)
    first = fetch(history, scope)
    chunk = first.paths("source_models/")[0]
    added = tmp_path / "added.jsonl"
    added.write_text('{"type": "none"}\n')
    from agent.knowledge.meta_cache import chunk_name

    history.add_meta_model_file(first.record, chunk_name(added.read_bytes()), added)
    grown: list[str] = []
    fetch(history, scope, grown.append)  # a study's end added a chunk: only it is fetched, and said so
    assert [line for line in grown if line.startswith("meta-models: fetching")] == [
        f"meta-models: fetching 1 new file(s) of version 1 of {scope} into {first.folder}"
    ], grown
    chunk.write_text("damaged\n")
    lines: list[str] = []
    again = fetch(history, scope, lines.append)
    assert any("is corrupt; fetching it again" in line for line in lines), lines
    assert again.paths("source_models/")[0].read_text() != "damaged\n"

    record = history.current_meta_models(scope)  # the store's own copy damaged: left out, in one line
    original = history.fetch_meta_model_file

    def damaged(rec, name, target):
        original(rec, name, target)
        Path(target).write_text("not what its name says\n")

    monkeypatch.setattr(history, "fetch_meta_model_file", damaged)
    monkeypatch.setenv("TUNE_AGENT_CACHE", str(tmp_path / "other-cache"))
    lines = []
    got = fetch(history, scope, lines.append)
    assert got.record is not None and got.record.record_id == record.record_id
    assert got.paths("source_models/") == [] and any("is corrupt" in line for line in lines), lines
    assert default_root() == tmp_path / "other-cache"


def test_a_cache_others_can_write_is_not_trusted(history, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.knowledge.meta_cache import cache_root

    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("TUNE_AGENT_CACHE", str(shared))
    lines: list[str] = []
    root = cache_root(lines.append)
    assert root != shared and len(lines) == 1 and "writable by other users" in lines[0]


def test_the_in_memory_store_keeps_versions_as_mlflow_does() -> None:
    from agent.knowledge.memory import InMemoryKnowledgeBase

    kb = InMemoryKnowledgeBase()
    assert kb.current_meta_models("mlp/x") is None
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.jsonl"
        path.write_text("{}\n")
        first = kb.publish_meta_models("mlp/x", "1.1", "r1", {"source_models/a.jsonl": path})
        kb.add_meta_model_file(first, "source_models/b.jsonl", path)
        second = kb.publish_meta_models("mlp/x", "1.1", "r2", {"files/tnp.json": path})
        current = kb.current_meta_models("mlp/x")
        assert current is not None and current.version == second.version == 2 and current.files == ("files/tnp.json",)
        kb.fetch_meta_model_file(current, "files/tnp.json", Path(tmp) / "out" / "tnp.json")
        assert (Path(tmp) / "out" / "tnp.json").read_text() == "{}\n"


def test_neighbors_prints_what_start_seeds_from_and_origins_are_explained_once(
    history, store, cli, tmp_path: Path
) -> None:
    import json

    res = cli(
        "neighbors",
        "--dataset",
        "digits?fraction=0.4&seed=5",
        "--job",
        "mlp",
        "--json",
        "--models-dir",
        str(tmp_path / "m"),
        "--tracking-uri",
        store.uri,
    )
    assert res.code == 0, res.err
    listed = json.loads(res.out)["neighbours"]
    assert listed
    res = cli(
        "start",
        "--dataset",
        "digits?fraction=0.4&seed=5",
        "--job",
        "mlp",
        "--trials",
        "3",
        "--epochs",
        "1",
        "--study-name",
        "nb",
        "--models-dir",
        str(tmp_path / "m"),
        *store.args,
    )
    assert res.code == 0, res.err
    recorded = json.loads(store.kb().study_tags(store.kb().find_study("nb"))["warm_start"])["neighbours"]
    assert [(n["dataset"], n["distance"]) for n in listed] == [(n["name"], n["distance"]) for n in recorded]
    assert "record(s) published to version 1" in res.out  # the plan's source fits and its own source, for everyone
    # each kind of origin tag is explained on its first trial, once
    assert res.out.count("]: the best configuration of a neighbouring historical dataset") == 1, res.out
    assert (
        "]: a Bayesian-optimisation step (acquisition logei)" in res.out
        or "]: a point of the initial design" in res.out
    )


def test_every_origin_a_sampler_gives_has_an_explanation() -> None:
    from agent.samplers.origins import explain_origin

    for origin in (
        "warm:handcrafted:wine",
        "init:sobol",
        "init:lhs",
        "init:rgpe",
        "init:cold-fallback",
        "bo:logei",
        "bo:target-gp",
        "random",
        "random:interleaved",
        "random:hts-exhausted",
        "tpe",
        "hts:iris",
        "import",
        "init:table",
    ):
        line = explain_origin(origin)
        assert line and "a step of the study's sampler" not in line, origin
    assert "cold one" in explain_origin("init:cold-fallback") and "Sobol" in explain_origin("init:sobol")


def test_bootstrap_from_an_empty_folder_into_a_new_store_folder_then_start_from_another(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's path, at test scale: a starter file (the packaged one's first studies) imported
    from an empty folder into a store whose folder does not exist yet, published; then a study from
    a second empty folder fits no source GP."""
    from agent.knowledge.starter import read_starter, starter_path, write_starter

    monkeypatch.chdir(tmp_path)
    assert starter_path("mlp").is_file()  # the packaged starter, found from any folder
    header, entries = read_starter("mlp")
    small = write_starter(tmp_path / "small.npz", header["job"], header["space"], entries[:N_SOURCES])
    assert small["studies"] == N_SOURCES
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    uri = f"sqlite:///{tmp_path / 'new' / 'dir' / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path / "A")
    res = cli(
        "bootstrap",
        "starter",
        str(tmp_path / "small.npz"),
        "--tracking-uri",
        uri,
        "--artifact-root",
        str(tmp_path / "art"),
    )
    assert res.code == 0, res.err
    assert f"tracking store folder {tmp_path / 'new' / 'dir'} did not exist: made it" in res.out
    assert "published as version 1" in res.out
    monkeypatch.chdir(tmp_path / "B")
    res = cli(
        "start",
        "--dataset",
        "digits?fraction=0.4&seed=5",
        "--job",
        "mlp",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--surrogate",
        "rgpe",
        "--tracking-uri",
        uri,
        "--artifact-root",
        str(tmp_path / "art"),
    )
    assert res.code == 0, res.err
    assert "fetching version 1" in res.out and "source models: fitting" not in res.out, res.out
    assert "no trained meta-feature extractor" not in res.out


def test_a_version_of_another_engine_and_a_store_that_cannot_say_are_one_line_each(tmp_path: Path) -> None:
    from agent.errors import StoreError
    from agent.jobs import load_job
    from agent.knowledge.memory import InMemoryKnowledgeBase
    from agent.tuning.published import fetch_current, scope_of

    space = load_job("mlp").space
    kb = InMemoryKnowledgeBase()
    chunk = tmp_path / "c.jsonl"
    chunk.write_text("")
    kb.publish_meta_models(scope_of("mlp", space), "0.0", "r", {"source_models/e3b0c44298fc1c14.jsonl": chunk})
    lines: list[str] = []
    got = fetch_current(kb, "mlp", space, lines.append)
    assert got.record is not None and len([x for x in lines if "built by engine 0.0" in x]) == 1, lines

    class Refusing(InMemoryKnowledgeBase):
        def current_meta_models(self, scope: str):
            raise StoreError("tracking server http://x unreachable")

    lines = []
    got = fetch_current(Refusing(), "mlp", space, lines.append)
    assert got.record is None and lines == [
        "meta-models: the store's could not be read (tracking server http://x unreachable); what is missing is "
        "built here"
    ]
