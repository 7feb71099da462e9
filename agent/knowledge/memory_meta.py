"""Published meta-models in the in-memory store: versions of a scope as MLflow keeps them, in memory."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge.records import MetaModelsRecord


class InMemoryMetaModels:
    """Versions of meta-models per scope (``_meta_models``), under the store's lock."""

    # the store's own (:class:`agent.knowledge.memory.InMemoryKnowledgeBase`)
    _lock: Any
    _meta_models: dict[str, list[tuple[MetaModelsRecord, dict[str, bytes]]]]
    tracking_uri: Any
    _new_id: Any

    # -- published meta-models -----------------------------------------------------------------
    def current_meta_models(self, scope: str) -> MetaModelsRecord | None:
        with self._lock:
            versions = self._meta_models.get(scope, [])
            if not versions:
                return None
            record, files = versions[-1]
            return replace(record, files=tuple(sorted(files)))

    def publish_meta_models(
        self, scope: str, engine: str, revision: str, files: Mapping[str, Path]
    ) -> MetaModelsRecord:
        blobs = {name: Path(path).read_bytes() for name, path in files.items()}
        with self._lock:
            versions = self._meta_models.setdefault(scope, [])
            record = MetaModelsRecord(
                self._new_id(),
                scope,
                len(versions) + 1,
                engine,
                revision,
                int(time.time() * 1000),
                tuple(sorted(blobs)),
            )
            versions.append((record, blobs))
            return record

    def _meta_files(self, record: MetaModelsRecord) -> dict[str, bytes]:
        for stored, files in self._meta_models.get(record.scope, []):
            if stored.record_id == record.record_id:
                return files
        raise StoreError(f"no meta-models version {record.record_id} in {self.tracking_uri}")

    def add_meta_model_file(self, record: MetaModelsRecord, name: str, path: Path) -> None:
        blob = Path(path).read_bytes()
        with self._lock:
            self._meta_files(record).setdefault(name, blob)

    def fetch_meta_model_file(self, record: MetaModelsRecord, name: str, target: Path) -> None:
        with self._lock:
            files = self._meta_files(record)
            if name not in files:
                raise StoreError(f"meta-models version {record.version} of {record.scope} has no file {name}")
            blob = files[name]
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(blob)
