"""A starter history: a bootstrapped knowledge base in one small file, so a fresh clone warm-starts.

:func:`export_starter` writes every finished study of one job (by default the ``bootstrap-``
studies) to a compressed ``.npz``: a JSON header per study (name, settings, search space, dataset
summary, stored meta-features, configurations and values) and its dataset sample. :func:`import_starter`
writes them into any knowledge base as finished studies through
:func:`agent.knowledge.imports.import_many` (inline rows on MLflow, a few calls per study); studies
already present are skipped, so an interrupted import simply runs again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import TuneAgentError
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.imports import ImportCount, Imported, import_many
from agent.knowledge.records import TRIAL_OK

FORMAT = 1


def read_studies(
    kb: KnowledgeBase, job: str, prefix: str = "bootstrap-", progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """The finished studies of ``job`` named ``prefix*`` as plain entries (name, settings, summary,
    meta-features, configs, values, sample or None): what a starter file holds, in memory."""
    studies = [
        s
        for s in kb.list_studies()
        if s.status == "finished" and s.name.startswith(prefix) and s.settings.get("job") == job
    ]
    entries = []
    for i, study in enumerate(studies):
        trials = [t for t in kb.trials(study) if t.state == TRIAL_OK]
        tags = kb.study_tags(study)
        entries.append(
            {
                "name": study.name,
                "settings": dict(study.settings),
                "summary": kb.dataset_summary(study),
                "metafeatures": json.loads(tags["metafeatures"]) if "metafeatures" in tags else None,
                "configs": [dict(t.config) for t in trials],
                "values": [t.value for t in trials],
                "sample": kb.load_dataset_sample(study.study_id),
            }
        )
        if progress and (i + 1) % 25 == 0:
            progress(f"{i + 1}/{len(studies)} studies read")
    return entries


def write_entries(
    kb: KnowledgeBase,
    entries: list[dict[str, Any]],
    space: list[dict[str, Any]],
    origin: str,
    progress: Callable[[str], None] | None = None,
) -> ImportCount:
    """Writes entries (as :func:`read_studies` makes them) into ``kb`` as finished studies."""
    return import_many(kb, (_imported(e, space, origin) for e in entries), len(entries), progress)


def _imported(entry: dict[str, Any], space: list[dict[str, Any]], origin: str) -> Imported:
    return Imported(
        entry["name"],
        entry["settings"],
        space,
        entry["configs"],
        entry["values"],
        f"Starter history: `{entry['name']}`, imported from {origin}.",
        entry["summary"],
        entry["sample"],
        None if entry.get("metafeatures") is None else {"metafeatures": entry["metafeatures"]},
    )


def export_starter(
    kb: KnowledgeBase,
    path: Path,
    job: str,
    space: list[dict[str, Any]],
    prefix: str = "bootstrap-",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Writes the finished studies of ``job`` (search space ``space``, as ``SearchSpace.to_dict``)
    whose names start with ``prefix``; returns counts and the file's size."""
    entries = read_studies(kb, job, prefix, progress)
    if not entries:
        raise TuneAgentError(
            f"no finished {prefix}* studies of job {job} in {kb.tracking_uri}: run `tune-agent bootstrap` first"
        )
    return write_starter(path, job, space, entries)


def write_starter(path: Path, job: str, space: list[dict[str, Any]], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Writes ``entries`` (as :func:`read_studies` makes them) to the starter file ``path``, whole
    or not at all; returns counts and the file's size."""
    header: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for i, entry in enumerate(entries):
        entry = dict(entry)
        sample = entry.pop("sample")
        if sample is not None:
            arrays[f"X{i}"], arrays[f"y{i}"] = np.asarray(sample[0], np.float32), np.asarray(sample[1], np.int64)
        header.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = json.dumps({"format": FORMAT, "job": job, "space": space, "studies": header}).encode()
    partial = path.with_name(path.name + ".partial.npz")
    # numeric arrays only, as read_starter loads them (allow_pickle=False)
    np.savez_compressed(partial, header=np.frombuffer(blob, dtype=np.uint8), allow_pickle=False, **arrays)
    partial.replace(path)
    return {"studies": len(header), "evaluations": sum(len(h["values"]) for h in header), "bytes": path.stat().st_size}


# Starter histories shipped inside the package (found from any folder, and from a wheel)
PACKAGED = {"mlp": "starters/mlp.npz"}


def starter_path(value: str | Path) -> Path:
    """The starter file ``value`` names: a file, or the name of a packaged one (``mlp``)."""
    path = Path(value)
    if path.is_file():
        return path
    if str(value) in PACKAGED:
        from importlib.resources import as_file, files

        resource = files("agent.knowledge").joinpath(PACKAGED[str(value)])
        with as_file(resource) as found:  # a real file for an installed package; extracted from a zip
            return Path(found)
    raise TuneAgentError(
        f"starter history not found: {value} (a starter file, or a packaged one: {', '.join(PACKAGED)})"
    )


def read_starter(path: Path | str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A starter file's header (format, job, space) and its entries, samples included; ``path`` as
    :func:`starter_path` takes it."""
    path = starter_path(path)
    import zipfile

    if not zipfile.is_zipfile(path):
        raise TuneAgentError(
            f"cannot read starter history {path}: not a starter file (not an .npz archive); make one "
            "with `tune-agent bootstrap export FILE`"
        )
    try:
        archive = np.load(path, allow_pickle=False)
        data = json.loads(archive["header"].tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError) as exc:
        why = {"KeyError": "no header: not a starter file"}.get(
            type(exc).__name__, str(exc).strip().splitlines()[0][:160] if str(exc) else ""
        )
        raise TuneAgentError(
            f"cannot read starter history {path}: not a starter file ({type(exc).__name__}"
            f"{': ' + why if why else ''}); make one with `tune-agent bootstrap export FILE`"
        ) from None
    if data.get("format") != FORMAT:
        raise TuneAgentError(
            f"starter history {path} has format {data.get('format')!r}; this tune-agent reads {FORMAT}"
        )
    entries = [
        {**entry, "sample": (archive[f"X{i}"], archive[f"y{i}"]) if f"X{i}" in archive.files else None}
        for i, entry in enumerate(data.pop("studies"))
    ]
    return data, entries


def import_starter(
    kb: KnowledgeBase, path: Path | str, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Imports a starter file (or a packaged one, by name), skipping the studies the store holds
    finished (an interrupted import resumes); returns counts, seconds and studies per second."""
    start = time.perf_counter()
    path = starter_path(path)
    data, entries = read_starter(path)
    with kb.many_imports():  # the listing below is fresh: a study an interrupted import wrote is skipped
        present = {s.name for s in kb.list_studies() if s.status == "finished"}
        todo = [e for e in entries if e["name"] not in present]
        read_s = time.perf_counter() - start
        count = write_entries(kb, todo, data["space"], path.name, progress)
    return {
        "imported": count.studies,
        "skipped": len(entries) - len(todo),
        "seconds": round(time.perf_counter() - start, 1),
        "read_seconds": round(read_s, 2),
        "per_second": round(count.rate, 1) if count.studies else None,
    }
