"""The cache of ended studies behind ``list_studies`` (agent.knowledge.study_cache), on a real
sqlite MLflow store: what two agents and an outside writer see stays what the store holds."""

from __future__ import annotations

import json

import pytest

from agent.knowledge.mlflow.backend import MlflowKnowledgeBase


def _settings(name: str) -> dict[str, object]:
    return {
        "job_name": "cachejob",
        "dataset_name": name,
        "fingerprint": name * 4,
        "space_signature": "s",
        "mode": "min",
        "metric": "loss",
        "seed": 0,
    }


def _view(kb: MlflowKnowledgeBase) -> list[tuple[str, str, float | None, str | None]]:
    return [(s.name, s.status, s.best_value, s.tags.get("note")) for s in kb.list_studies()]


def _searches(kb: MlflowKnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    search = kb._search

    def counting(flt: str, ids: list[str] | None = None):
        seen.append(flt)
        return search(flt, ids)

    monkeypatch.setattr(kb, "_search", counting)
    return seen


def test_ended_studies_are_cached_and_every_change_is_seen(store, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = store.kb(), store.kb()  # two agents on one store
    done = a.create_study("done", _settings("d"), [], {"kind": "tabular"}, None, "")
    a.update_study(done, "finished", 0.5, {"x": 1})
    live = a.create_study("live", _settings("l"), [], {"kind": "tabular"}, None, "")
    expected = [("done", "finished", 0.5, None), ("live", "created", None, None)]
    assert _view(a) == expected
    assert list((tmp_path / "cache" / "tune-agent" / "studies").glob("*.marshal"))

    seen = _searches(b, monkeypatch)
    assert _view(b) == expected
    assert not any("!= 'RUNNING'" in f for f in seen), seen  # the ended study came from the cache

    a.set_study_tags(done, {"note": "retagged"})  # an ended study changed: b sees it
    a.update_study(live, "running", 0.25, {"x": 2})  # a running study's best: read fresh every time
    assert _view(b) == [("done", "finished", 0.5, "retagged"), ("live", "running", 0.25, None)]

    # A writer that knows nothing of the cache ends the running study: the cache had seen it
    # running, so it is stale and the study is listed as ended.
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    client.set_tag(live.study_id, "tune_agent.status", "finished")
    client.set_terminated(live.study_id, "FINISHED")
    assert _view(b) == [("done", "finished", 0.5, "retagged"), ("live", "finished", 0.25, None)]

    a.update_study(done, "running")  # resumed: the fresh record wins over the cached one
    assert _view(b)[0] == ("done", "running", 0.5, "retagged")
    a.update_study(done, "finished", 0.125, {"x": 3})
    assert _view(b)[0] == ("done", "finished", 0.125, "retagged")


def test_a_stale_listing_reads_again_only_the_studies_that_changed(store, tmp_path, monkeypatch) -> None:
    import marshal

    from agent.knowledge import study_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = store.kb(), store.kb()
    for name in ("one", "two", "three"):
        a.update_study(a.create_study(name, _settings(name[0]), [], {}, None, ""), "finished", 1.0, {})
    live = a.create_study("live", _settings("l"), [], {}, None, "")
    a.update_study(live, "running")
    assert [s.name for s in b.list_studies()] == ["one", "two", "three", "live"]

    seen = _searches(b, monkeypatch)
    a.update_study(live, "finished", 0.5, {"x": 1})  # ends: the version changes
    a.set_study_tags(a.find_study("one"), {"note": "retagged"})
    assert _view(b) == [
        ("one", "finished", 1.0, "retagged"),
        ("two", "finished", 1.0, None),
        ("three", "finished", 1.0, None),
        ("live", "finished", 0.5, None),
    ]
    ended = [f for f in seen if "!= 'RUNNING'" in f]
    assert ended and all(study_cache.CHANGED_METRIC in f for f in ended), seen  # only what changed was read
    with monkeypatch.context() as m:  # listed again by the same object, unchanged: not read from the file again
        m.setattr(study_cache, "load", lambda *a: pytest.fail("the cache file was read again"))
        assert [s.name for s in b.list_studies()] == ["one", "two", "three", "live"]

    # a running study's lease tags leave the listing's version as it is
    again = a.create_study("again", _settings("g"), [], {}, None, "")
    again = a.update_study(again, "running")
    _view(b)
    seen.clear()
    a.set_study_tags(again, {"lease": "mine"})
    _view(b)
    assert not any("!= 'RUNNING'" in f for f in seen), seen

    # once a day (or with no change time held) the ended studies are read whole
    for path in (tmp_path / "cache" / "tune-agent" / "studies").glob("*.marshal"):
        data = marshal.loads(path.read_bytes())
        path.write_bytes(
            marshal.dumps({**data, "version": "old", "full_at": data["full_at"] - study_cache.FULL_EVERY_S})
        )
    c = store.kb()  # another process
    seen = _searches(c, monkeypatch)
    assert [s.name for s in c.list_studies()] == ["one", "two", "three", "live", "again"]
    assert any("!= 'RUNNING'" in f and study_cache.CHANGED_METRIC not in f for f in seen), seen


def test_on_an_embedded_store_studies_changed_minutes_ago_are_not_read_again_unless_they_changed(
    store, tmp_path, monkeypatch
) -> None:
    """A history imported minutes ago is all within the clocks' slack: the reader compares change
    times first and reads again only the runs whose time differs from the one it holds."""
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.mlflow.sqlite_reads import SqliteReads

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a = store.kb()
    made = [a.create_study(f"s{i}", _settings(f"s{i}"), [], {}, None, "") for i in range(5)]
    for s in made:
        a.update_study(s, "finished", 1.0, {})
    reader = MlflowKnowledgeBase(store.uri, store.artifacts, fast_reads=True)
    assert len(reader.list_studies()) == 5 and isinstance(reader._client, SqliteReads)
    read: list[str] = []
    runs = reader._client.runs
    monkeypatch.setattr(reader._client, "runs", lambda ids: read.extend(ids) or runs(ids))
    a.set_study_tags(made[2], {"note": "changed"})  # the version changes; one study changed
    assert [s.tags.get("note") for s in reader.list_studies()] == [None, None, "changed", None, None]
    assert read == [made[2].study_id]


def test_the_cache_can_be_turned_off_and_a_foreign_file_is_ignored(store, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNE_AGENT_STUDY_CACHE", "0")
    kb = store.kb()
    s = kb.create_study("one", _settings("o"), [], {}, None, "")
    kb.update_study(s, "finished", 1.0, {})
    assert _view(kb) == [("one", "finished", 1.0, None)]
    assert not (tmp_path / "cache" / "tune-agent" / "studies").exists()
    monkeypatch.setenv("TUNE_AGENT_STUDY_CACHE", "1")
    assert _view(kb) == [("one", "finished", 1.0, None)]
    written = list((tmp_path / "cache" / "tune-agent" / "studies").glob("*.marshal"))
    assert written
    for path in written:
        path.write_bytes(b"not marshal")
    assert _view(kb) == [("one", "finished", 1.0, None)]  # unreadable: searched again


def test_a_store_written_before_the_cache_gets_a_version_on_first_listing(store, tmp_path, monkeypatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kb = store.kb()
    s = kb.create_study("old", _settings("o"), [], {}, None, "")
    kb.update_study(s, "finished", 2.0, {})
    client = MlflowClient(store.uri)
    exp = client.get_experiment_by_name("tune-agent/cachejob")
    client.delete_experiment_tag(exp.experiment_id, "tune_agent.studies_version")  # as an older agent left it
    assert _view(kb) == [("old", "finished", 2.0, None)]
    assert client.get_experiment(exp.experiment_id).tags.get("tune_agent.studies_version")
    seen = _searches(kb, monkeypatch)
    assert _view(kb) == [("old", "finished", 2.0, None)]
    assert not any("!= 'RUNNING'" in f for f in seen), seen


def test_a_version_tag_write_that_loses_a_race_is_retried(store, tmp_path, monkeypatch) -> None:
    """Two agents ending studies at once both insert the experiment's version tag; postgres refuses
    the second insert (a race seen in CI). The loser retries, which then updates the tag;
    any other refusal is raised at once."""
    from mlflow.exceptions import MlflowException

    from agent.errors import StoreError
    from agent.knowledge import study_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kb = store.kb()
    study = kb.create_study("race", _settings("r"), [], {"kind": "tabular"}, None, "")
    real = kb._client.set_experiment_tag
    calls: list[str] = []

    def clashing_once(experiment_id: str, key: str, value: str) -> None:
        calls.append(value)
        if len(calls) == 1:
            real(experiment_id, key, "the-other-agents-version")  # the other agent's insert lands first
            raise MlflowException(
                '(psycopg.errors.UniqueViolation) duplicate key value violates unique constraint "experiment_tag_pk"',
                error_code="BAD_REQUEST",
            )
        real(experiment_id, key, value)

    monkeypatch.setattr(kb._client, "set_experiment_tag", clashing_once)
    kb.update_study(study, "finished", 0.5, {"x": 1})
    assert len(calls) == 2 and calls[0] == calls[1]  # the same new version, written on the second try
    tags = kb._client.get_experiment(kb._experiment_of(study)).tags
    assert tags[study_cache.VERSION_TAG] == calls[1]
    assert _view(kb) == [("race", "finished", 0.5, None)]

    def refused(experiment_id: str, key: str, value: str) -> None:
        calls.append(value)
        raise MlflowException("PERMISSION_DENIED: not allowed", error_code="PERMISSION_DENIED")

    monkeypatch.setattr(kb._client, "set_experiment_tag", refused)
    before = len(calls)
    with pytest.raises(StoreError):
        kb.update_study(study, "finished", 0.25, {"x": 2})
    assert len(calls) == before + 1  # no retry of a refusal


def _light_view(kb: MlflowKnowledgeBase, light: bool) -> list[tuple[object, ...]]:
    studies = kb.study_index() if light else kb.list_studies()
    assert all(s.light is light for s in studies)

    def features(s) -> object:
        return s.metafeatures if light else "metafeatures" in s.tags and json.loads(s.tags["metafeatures"])

    return [
        (s.study_id, s.name, s.job, s.fingerprint, s.space_signature, s.status, s.best_value,
         s.settings.get("metric"), s.settings.get("mode"), s.params.get("dataset.kind"), features(s) or None)
        for s in studies
    ]  # fmt: skip


def test_the_study_index_holds_the_light_part_of_every_listed_study_and_follows_its_changes(
    store, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = store.kb(), store.kb()
    tags = {"metafeatures": {"log_n_instances": 5.0, "num_classes": 3.0, "version": 2.0}}
    done = a.create_study("done", _settings("d"), [], {"kind": "tabular"}, None, "")
    a.set_study_tags(done, tags)
    a.update_study(done, "finished", 0.5, {"x": 1})
    a.create_study("live", _settings("l"), [], {"kind": "image"}, None, "")
    assert _light_view(b, True) == _light_view(b, False)
    assert _light_view(b, True)[0][-1] == {"log_n_instances": 5.0, "num_classes": 3.0, "version": 2.0}
    assert list((tmp_path / "cache" / "tune-agent" / "studies").glob("*.light.marshal"))

    a.set_study_tags(done, {"metafeatures": {"log_n_instances": 6.0, "version": 2.0}})  # an ended study changed
    a.update_study(done, "finished", 0.25, {"x": 2})
    index = b.study_index()
    assert _light_view(b, True) == _light_view(b, False)
    assert index[0].best_value == 0.25 and index[0].metafeatures == {"log_n_instances": 6.0, "version": 2.0}
    whole = b.full_study(index[0])  # a light record's whole one, from the store
    assert not whole.light and whole.best_config == {"x": 2} and whole.params == b.list_studies()[0].params
