"""The report kept on the study run: :mod:`agent.tuning.report`'s page and figures logged under
``report/`` and written to a folder, built again only when something it shows has changed.

Written at the end of every study run by ``tune-agent start``/``resume`` (a report that cannot be
made is a note, never a failed study). With it the study run keeps a digest of everything the
report read (:func:`report_inputs`: the study, its trials and the tags shown, the cold-start
studies it is drawn against, every meta-feature vector of the map, the report's code); ``tune-agent
report`` of a study whose digest still matches copies the stored files instead of building them
again (:func:`report_files`): no importance, no figures, no write to the store.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import StudyRecord, TrialRecord
from agent.space import SearchSpace
from agent.tuning import report as page_module
from agent.tuning.report import SHOWN_TAGS, build_report, cold_references

REPORT_TAG = "report_inputs"  # on the study run: {"key": report_inputs(...), "files": [...]}


def _trial_digest(trials: list[TrialRecord]) -> list[Any]:
    return [[t.trial_id, t.number, t.state, dict(t.config), t.value, t.origin, t.reason] for t in trials]


def _versions() -> list[str | None]:
    """The libraries that compute and draw the page (importance, PCA, figures)."""
    from importlib import metadata

    out: list[str | None] = []
    for name in ("optuna", "scikit-learn", "matplotlib"):
        try:
            out.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            out.append(None)
    return out


def report_inputs(kb: KnowledgeBase, record: StudyRecord, tags: dict[str, str] | None = None) -> str:
    """A digest of what :func:`~agent.tuning.report.build_report` reads: the study's record and
    trials, the tags it shows, the cold-start studies it compares with (and their trials), every
    study of the job with meta-features (the map), the source of the page's module and of this one,
    and the versions of the libraries that compute and draw it. Equal digests make equal pages."""
    import hashlib

    tags = kb.study_tags(record) if tags is None else tags
    studies = kb.list_studies()
    refs = [(name, _trial_digest(trials)) for name, trials in cold_references(kb, record, studies)]
    mapped = [
        (s.fingerprint, s.dataset, s.tags.get("metafeatures", ""))
        for s in studies  # in list order, as the map
        if s.job == record.job and s.tags.get("metafeatures")
    ]
    parts = [
        record.study_id,
        record.name,
        record.dataset,
        record.job,
        record.status,
        record.best_value,
        record.fingerprint,
        record.space_signature,
        dict(record.settings),
        _trial_digest(kb.trials(record)),
        {k: tags.get(k) for k in SHOWN_TAGS},
        refs,
        mapped,
        [hashlib.sha256(Path(m).read_bytes()).hexdigest() for m in (page_module.__file__, __file__)],
        _versions(),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def report_files(
    kb: KnowledgeBase, record: StudyRecord, space: SearchSpace, out_dir: Path, rebuild: bool = False
) -> tuple[Path, bool]:
    """``report.html`` and its figures in ``out_dir``: copied from the study run when the digest
    stored there with them (:data:`REPORT_TAG`) still matches :func:`report_inputs` (and not
    ``rebuild``), else built and logged again. Returns (the page, whether it was the stored one)."""
    tags = kb.study_tags(record)
    try:
        stored = json.loads(tags.get(REPORT_TAG) or "{}")
        key, files = stored.get("key"), [str(f) for f in stored.get("files", [])]
    except (ValueError, AttributeError, TypeError):
        key, files = None, []
    current = report_inputs(kb, record, tags)  # once: the comparison and, if built again, the new tag
    if key and "report.html" in files and key == current and not rebuild:
        out_dir.mkdir(parents=True, exist_ok=True)
        if all(kb.fetch_study_file(record, f"report/{name}", out_dir / name) for name in files):
            return out_dir / "report.html", True
    page = write_report(kb, record, space, out_dir, key=current)
    assert page is not None
    return page, False


def write_report(
    kb: KnowledgeBase, record: StudyRecord, space: SearchSpace, out_dir: Path | None = None, key: str | None = None
) -> Path | None:
    """Builds the report, logs ``report/report.html`` and its PNGs on the study run, and writes them
    to ``out_dir`` when given; returns the HTML's path there. The digest of its inputs goes on the
    study run with them (:data:`REPORT_TAG`); ``key``: that digest when the caller has it."""
    import matplotlib.pyplot as plt

    key = key or report_inputs(kb, record)
    report = build_report(kb, record, space)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(out_dir) if out_dir is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name, fig in report.figures.items():
            fig.savefig(folder / name, dpi=100)
            plt.close(fig)
        page = folder / "report.html"
        page.write_text(report.html)
        kb.log_study_artifacts(record, [str(page), *(str(folder / n) for n in report.figures)], "report")
    kb.set_study_tags(record, {REPORT_TAG: {"key": key, "files": ["report.html", *report.figures]}})
    return page if out_dir is not None else None
