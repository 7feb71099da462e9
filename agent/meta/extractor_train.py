"""Siamese training of the meta-feature extractor (003 Algorithm 2, mini-batch version).

Owns :func:`train_extractor`: a Lightning loop over dataset pairs. Each step draws
``pairs_per_step`` training pairs `(i, j)`, `i != j`, uniformly, subsamples ``tau``
instances of each dataset (without replacement when the dataset is large enough), and
minimises the mean over pairs of ``(||m_i - m_j||_2 - d_ij / scale)^2`` (eq. 1) with Adam.
``scale`` is the mean off-diagonal target distance; losses in the history are in those
scaled units. A ``val_fraction`` of all pairs never enters training; their loss on fixed
subsamples is logged as ``val_loss`` every ``log_every`` steps, beside the window mean
``train_loss``, to any Lightning logger (e.g. MLflow) and in the returned history.

Use :func:`agent.meta.siamese.train_extractor` (same function) from other modules.
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from agent.meta.siamese import (
    DatasetSample,
    ExtractorConfig,
    ExtractorError,
    MetaFeatureExtractor,
    MetaFeatureNet,
    sample_tensors,
)

__all__ = ["SiameseModule", "distance_scale", "split_pairs", "train_extractor"]

_MAX_VAL_PAIRS = 64


def check_distances(distances: np.ndarray, n: int) -> np.ndarray:
    """The target matrix as float64 `n x n`; raises unless square, finite, >= 0, symmetric."""
    d = np.asarray(distances, dtype=np.float64)
    if d.shape != (n, n):
        raise ExtractorError(f"distances must be {n} x {n} for {n} samples, got {d.shape}")
    if not np.isfinite(d).all() or (d < 0).any():
        raise ExtractorError("distances must be finite and non-negative")
    if not np.allclose(d, d.T, atol=1e-8 * max(1.0, float(np.abs(d).max()))):
        raise ExtractorError("distances must be symmetric")
    return d


def distance_scale(d: np.ndarray) -> float:
    """Mean off-diagonal target distance (1.0 when every distance is 0)."""
    off = d[~np.eye(d.shape[0], dtype=bool)]
    scale = float(off.mean()) if off.size else 0.0
    return scale if scale > 0 else 1.0


def split_pairs(n: int, val_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """All unordered pairs `i < j`, shuffled: (train `k x 2`, val `m x 2`); train is never empty."""
    i, j = np.triu_indices(n, k=1)
    pairs = np.stack([i, j], axis=1)[rng.permutation(len(i))]
    n_val = min(int(val_fraction * len(pairs)), len(pairs) - 1)
    return pairs[n_val:], pairs[:n_val]


def subsample_index(n: int, tau: int, rng: np.random.Generator) -> np.ndarray:
    """`tau` instance indices: without replacement if `n >= tau`, else all `n` plus repeats."""
    if n >= tau:
        return rng.choice(n, tau, replace=False)
    return np.concatenate([rng.permutation(n), rng.integers(0, n, tau - n)])


class PairBatches(IterableDataset):
    """``steps`` batches of ``per_step`` training pairs (`per_step x 2` int64), drawn uniformly."""

    def __init__(self, pairs: np.ndarray, per_step: int, steps: int, seed: int) -> None:
        self.pairs, self.per_step, self.steps, self.seed = pairs, per_step, steps, seed

    def __iter__(self) -> Iterator[Tensor]:
        rng = np.random.default_rng(self.seed)
        for _ in range(self.steps):
            rows = rng.integers(0, len(self.pairs), self.per_step)
            flip = rng.random(self.per_step) < 0.5
            chosen = self.pairs[rows]
            chosen[flip] = chosen[flip][:, ::-1]
            yield torch.as_tensor(chosen.copy(), dtype=torch.long)


class SiameseModule(pl.LightningModule):
    """Both Siamese wings (one shared :class:`MetaFeatureNet`) and the eq. 1 loss."""

    def __init__(
        self,
        samples: list[DatasetSample],
        targets: np.ndarray,
        config: ExtractorConfig,
        val_pairs: np.ndarray,
        seed: int,
    ) -> None:
        super().__init__()
        self.config = config
        self.net = MetaFeatureNet(config)
        self.kinds = [s.kind for s in samples]
        self.data = [sample_tensors(s.X, s.y, s.kind, s.num_classes) for s in samples]
        self.targets = torch.as_tensor(targets, dtype=torch.float32)
        self.val_pairs = torch.as_tensor(val_pairs[:_MAX_VAL_PAIRS], dtype=torch.long)
        self.seed = seed
        self.rng = np.random.default_rng([seed, 1])
        self.window: list[float] = []
        self.history: list[dict[str, Any]] = []

    def embed_entries(self, entries: list[int], rng: np.random.Generator) -> Tensor:
        """Meta-features `len(entries) x meta_dim`, same-shaped datasets batched together."""
        groups: dict[tuple, list[int]] = defaultdict(list)
        for pos, k in enumerate(entries):
            groups[(self.kinds[k], tuple(self.data[k][0].shape[1:]))].append(pos)
        out: list[Tensor | None] = [None] * len(entries)
        for (kind, _), positions in groups.items():
            xs, ys = [], []
            for pos in positions:
                x, y = self.data[entries[pos]]
                idx = torch.as_tensor(subsample_index(len(y), self.config.tau, rng))
                xs.append(x[idx])
                ys.append(y[idx])
            m = self.net.forward_batch(torch.stack(xs), torch.stack(ys), kind)
            for row, pos in enumerate(positions):
                out[pos] = m[row]
        return torch.stack(out)  # type: ignore[arg-type]

    def pair_loss(self, pairs: Tensor, rng: np.random.Generator) -> Tensor:
        """Mean over pairs `P x 2` of ``(||m_i - m_j|| - d_ij)^2`` in scaled units."""
        m = self.embed_entries(pairs.reshape(-1).tolist(), rng).view(len(pairs), 2, -1)
        diff = m[:, 0] - m[:, 1]
        dist = torch.sqrt((diff * diff).sum(dim=-1) + 1e-12)
        return ((dist - self.targets[pairs[:, 0], pairs[:, 1]]) ** 2).mean()

    @torch.no_grad()
    def val_loss(self) -> float | None:
        """Loss on the held-out pairs with fixed subsamples, or ``None`` when none are held out."""
        if len(self.val_pairs) == 0:
            return None
        return float(self.pair_loss(self.val_pairs, np.random.default_rng([self.seed, 2])))

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        loss = self.pair_loss(batch, self.rng)
        self.window.append(float(loss.detach()))
        step = self.global_step + 1
        if step % self.config.log_every == 0 or step == self.config.steps:
            self.record(step)
        return loss

    def record(self, step: int) -> None:
        """Log the window mean ``train_loss`` and ``val_loss``; append them to the history."""
        train = float(np.mean(self.window))
        self.window = []
        val = self.val_loss()
        metrics = {"train_loss": train} if val is None else {"train_loss": train, "val_loss": val}
        for logger in self.loggers:  # direct: ``self.log`` would repeat stale values each step
            logger.log_metrics(metrics, step=step)
        self.history.append({"step": step, "train_loss": train, "val_loss": val})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.net.parameters(), lr=self.config.lr, weight_decay=self.config.weight_decay)


@contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Hide Lightning's start-up chatter and loader warnings while one fit runs."""
    log = logging.getLogger("lightning.pytorch")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*LeafSpec.*")
            yield
    finally:
        log.setLevel(level)


def _fit(module: SiameseModule, loader: DataLoader, steps: int, logger: Any) -> None:
    with _quiet_lightning():
        trainer = pl.Trainer(
            max_steps=steps,
            accelerator="cpu",
            devices=1,
            logger=logger or False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            log_every_n_steps=1,
            num_sanity_val_steps=0,
        )
        trainer.fit(module, train_dataloaders=loader)


def _check_samples(samples: list[DatasetSample]) -> None:
    if len(samples) < 2:
        raise ExtractorError(f"need at least 2 dataset samples, got {len(samples)}")


def train_extractor(
    samples: list[DatasetSample],
    distances: np.ndarray,
    config: ExtractorConfig,
    logger: Any = None,
    seed: int | None = None,
    threads: int = 1,
) -> tuple[MetaFeatureExtractor, list[dict]]:
    """Fit a wing so meta-feature distances match ``distances`` (`n x n`, original units).

    ``seed`` (default ``config.seed``) fixes initial weights, pairs and subsamples;
    ``threads`` bounds torch's CPU threads while training. Returns the extractor and the
    history ``[{"step", "train_loss", "val_loss"}]`` (losses in scaled units).
    """
    _check_samples(samples)
    d = check_distances(distances, len(samples))
    seed = config.seed if seed is None else seed
    scale = distance_scale(d)
    train_pairs, val_pairs = split_pairs(len(samples), config.val_fraction, np.random.default_rng([seed, 0]))
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = SiameseModule(samples, d / scale, config, val_pairs, seed)
        loader = DataLoader(PairBatches(train_pairs, config.pairs_per_step, config.steps, seed), batch_size=None)
        _fit(module, loader, config.steps, logger)
    finally:
        torch.set_num_threads(previous_threads)
    return MetaFeatureExtractor(module.net, config, scale), module.history
