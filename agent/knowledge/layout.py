"""How a study is written down, whatever the backend: its tags, its params and their text round trips.

MLflow keeps tags and params as strings, so a record read back from it has been through text. The
in-memory backend builds its records with the same functions, which is what makes both backends
return equal :class:`~agent.knowledge.base.StudyRecord` contents for the same calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from agent.knowledge.records import StudyRecord

# MLflow's limits (mlflow.utils.validation): longer tag values are cut, longer params rejected.
TAG_LIMIT = 8000
PARAM_LIMIT = 6000
REASON_LIMIT = 4000
STATUS_CREATED = "created"


LONG = "@@parts:"  # a tag value longer than TAG_LIMIT is stored as this marker plus numbered parts
PART = ".part-"


def split_long(tags: Mapping[str, str]) -> dict[str, str]:
    """Tags as a store can keep them: a value over :data:`TAG_LIMIT` becomes ``LONG<n>`` under its
    key and ``n`` parts under ``<key>.part-<i>`` (MLflow cuts longer values, e.g. a study's plan
    over a 240-dataset history, which then could not be read back at resume)."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        if len(value) <= TAG_LIMIT:
            out[key] = value
            continue
        parts = [value[i : i + TAG_LIMIT] for i in range(0, len(value), TAG_LIMIT)]
        out[key] = f"{LONG}{len(parts)}"
        out.update({f"{key}{PART}{i}": part for i, part in enumerate(parts)})
    return out


def join_long(tags: Mapping[str, str]) -> dict[str, str]:
    """The inverse of :func:`split_long` (parts removed, values whole again)."""
    out = {k: v for k, v in tags.items() if PART not in k}
    for key, value in list(out.items()):
        if value.startswith(LONG):
            n = int(value[len(LONG) :])
            out[key] = "".join(tags.get(f"{key}{PART}{i}", "") for i in range(n))
    return out


def to_json(value: Any) -> str:
    """Sorted keys; what JSON cannot hold becomes its ``str``."""
    return json.dumps(value, sort_keys=True, default=str)


def config_json(config: Mapping[str, Any]) -> str:
    """A trial configuration as text, keeping the search space's key order."""
    return json.dumps(dict(config), default=str)


def tag_value(value: Any) -> str:
    """What :meth:`KnowledgeBase.set_study_tags` stores: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else to_json(value)


def study_tags(name: str, settings: Mapping[str, Any], dataset_summary: Mapping[str, Any]) -> dict[str, str]:
    """The tags :meth:`KnowledgeBase.create_study` gives a new study (without the backend's prefix).

    Raises:
        KeyError: ``settings`` lacks one of ``job_name``, ``dataset_name``, ``fingerprint``,
            ``space_signature``, ``mode``, ``metric`` or ``seed``.
    """
    return {
        "kind": "study",
        "study": name,
        "job": settings["job_name"],
        "dataset": settings["dataset_name"],
        "fingerprint": settings["fingerprint"],
        "space_signature": settings["space_signature"],
        "objective": f"{settings['mode']} {settings['metric']}",
        "seed": str(settings["seed"]),
        "status": STATUS_CREATED,
        "settings": to_json(settings),
        "dataset_kind": str(dataset_summary.get("kind", "")),
    }


def study_params(settings: Mapping[str, Any], dataset_summary: Mapping[str, Any]) -> dict[str, str]:
    """``study.<key>`` for every flat setting and ``dataset.<key>`` for every dataset statistic."""
    params = {f"study.{k}": v for k, v in settings.items() if not isinstance(v, (dict, list))}
    params.update({f"dataset.{k}": v for k, v in dataset_summary.items()})
    return {k: str(v)[:PARAM_LIMIT] for k, v in params.items()}


def study_record(
    study_id: str, start_time: int, tags: Mapping[str, str], params: Mapping[str, str], fallback_name: str = ""
) -> StudyRecord:
    """The record of a study from its (unprefixed) tags and params."""
    if any(PART in k for k in tags):
        joined = join_long(tags)
        try:
            mapping_type = cast(Callable[[dict[str, str]], Mapping[str, str]], type(tags))
            tags = mapping_type(joined)  # keep the backend's (read-only) mapping type
        except TypeError:
            tags = joined
    best = tags.get("best_value")
    return StudyRecord(
        study_id=study_id,
        name=tags.get("study", fallback_name),
        job=tags.get("job", ""),
        dataset=tags.get("dataset", ""),
        fingerprint=tags.get("fingerprint", ""),
        space_signature=tags.get("space_signature", ""),
        status=tags.get("status", ""),
        settings=json.loads(tags.get("settings", "{}")),
        best_value=float(best) if best not in (None, "") else None,
        best_config=json.loads(tags["best_config"]) if "best_config" in tags else None,
        start_time=start_time or 0,
        tags=tags,
        params=params,
    )


# what the study index keeps of a study (:meth:`agent.knowledge.base.KnowledgeBase.study_index`):
# enough to group, rank and stamp the history's datasets; the rest stays in the store
LIGHT_TAGS = ("study", "job", "dataset", "fingerprint", "space_signature", "status", "best_value", "dataset_kind")
LIGHT_PARAMS = ("dataset.source", "dataset.kind")


def light_row(tags: Mapping[str, str], params: Mapping[str, str]) -> dict[str, Any]:
    """The light part of a study's (unprefixed) tags and params, as plain data: its stored
    meta-features parsed (names interned, so a file of thousands keeps each name once)."""
    import sys

    if any(PART in k for k in tags):
        tags = join_long(tags)
    settings = json.loads(tags.get("settings", "{}"))
    try:
        raw = json.loads(tags["metafeatures"]) if "metafeatures" in tags else None
        mf = None if not isinstance(raw, dict) else {sys.intern(k): _float(v) for k, v in raw.items()}
    except (ValueError, TypeError):
        mf = None
    return {
        "light": 1,
        "tags": {k: tags[k] for k in LIGHT_TAGS if k in tags},
        "params": {k: params[k] for k in LIGHT_PARAMS if k in params},
        "settings": {k: settings[k] for k in ("metric", "mode") if k in settings},
        "mf": mf,
    }


def _float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def light_study_record(row: Mapping[str, Any]) -> StudyRecord:
    """The light record of a study index row (:func:`light_row` with its run's id, start and name)."""
    tags = row["tags"]
    best = tags.get("best_value")
    return StudyRecord(
        study_id=row["run_id"],
        name=tags.get("study", row["run_name"]),
        job=tags.get("job", ""),
        dataset=tags.get("dataset", ""),
        fingerprint=tags.get("fingerprint", ""),
        space_signature=tags.get("space_signature", ""),
        status=tags.get("status", ""),
        settings=row["settings"],
        best_value=float(best) if best not in (None, "") else None,
        start_time=row["start_time"] or 0,
        tags=tags,
        params=row["params"],
        light=True,
        metafeatures=row["mf"],
    )


def short(value: Any) -> str:
    """A configuration value as a description shows it (floats to 4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)
