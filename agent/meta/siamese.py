"""Learned dataset meta-features: one wing of a Siamese network and its trained wrapper.

This module owns the *model* side of the learned meta-feature extractor of papers 000
(Siamese conv-BiLSTM) and 003 (deep feature + meta-feature extractors, Algorithm 2):

* :class:`DatasetSample` - one labelled dataset sample ``(X, y, kind, num_classes)``;
* :class:`ExtractorConfig` - architecture and training settings;
* :class:`MetaFeatureNet` - one wing: deep feature extractor per instance, labels appended,
  a set aggregator over the ``tau`` instances, and fully connected layers to ``m``;
* :class:`MetaFeatureExtractor` - a trained wing plus its distance scale: ``embed``,
  ``embed_many``, ``save`` and ``load``.

Training (Lightning, mini-batches of dataset pairs) lives in
:mod:`agent.meta.extractor_train` (``train_extractor``). Use this
module when a new dataset must be placed near the datasets it resembles, e.g. to pick the
historical studies that warm-start a search.

Distance scale: targets are divided by their mean off-diagonal value during training, so
the net works on distances near 1. The extractor stores that scale and ``embed`` multiplies
the net's output back, so Euclidean distances between embeddings are in the units of the
original target distances.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from agent.errors import DatasetError, ExtractorError

__all__ = [
    "AGGREGATORS",
    "KINDS",
    "DatasetSample",
    "ExtractorConfig",
    "ExtractorError",
    "MetaFeatureExtractor",
    "MetaFeatureNet",
    "sample_tensors",
]

KINDS = ("image", "sequence", "tabular")
AGGREGATORS = ("mean", "bilstm", "attention")
_X_DIMS = {"image": 4, "sequence": 3, "tabular": 2}


@dataclass(frozen=True)
class DatasetSample:
    """One dataset sample: ``X`` is `n x C x H x W` (image), `n x C x L` (sequence) or
    `n x F` (tabular); ``y`` holds `n` labels in ``0..num_classes-1``."""

    name: str
    X: np.ndarray
    y: np.ndarray
    kind: str
    num_classes: int
    group: str = ""


@dataclass(frozen=True)
class ExtractorConfig:
    """Architecture and training settings of the meta-feature extractor.

    ``hidden`` is the width of deep features, aggregator and head; ``tau`` instances per
    dataset and ``pairs_per_step`` dataset pairs form one optimiser step; ``val_fraction`` of
    all pairs is held out for ``val_loss``, evaluated every ``log_every`` steps. ``n_embed``
    caps the instances ``embed`` uses; ``bilstm_perms`` seeded orders are averaged there.
    """

    aggregator: str = "mean"
    meta_dim: int = 16
    hidden: int = 64
    tau: int = 64
    pairs_per_step: int = 16
    steps: int = 300
    lr: float = 1e-3
    weight_decay: float = 1e-5
    seed: int = 0
    val_fraction: float = 0.2
    max_classes: int = 16
    image_channels: int = 3
    heads: int = 4
    log_every: int = 10
    n_embed: int = 256
    bilstm_perms: int = 4

    def __post_init__(self) -> None:
        if self.aggregator not in AGGREGATORS:
            raise ExtractorError(f"aggregator must be one of {AGGREGATORS}, got {self.aggregator!r}")
        positive = (
            "meta_dim",
            "hidden",
            "tau",
            "pairs_per_step",
            "steps",
            "max_classes",
            "image_channels",
            "heads",
            "log_every",
            "n_embed",
            "bilstm_perms",
        )
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ExtractorError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ExtractorError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ExtractorError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ExtractorError("lr must be > 0 and weight_decay >= 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtractorConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def check_sample(X: np.ndarray, y: np.ndarray, kind: str, num_classes: int) -> None:
    """Raise :class:`DatasetError` unless ``(X, y, kind, num_classes)`` is a usable sample."""
    if kind not in KINDS:
        raise DatasetError(f"kind must be one of {KINDS}, got {kind!r}")
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim != _X_DIMS[kind]:
        raise DatasetError(f"{kind} X must have {_X_DIMS[kind]} dims, got shape {X.shape}")
    if X.shape[0] < 1 or y.shape != (X.shape[0],):
        raise DatasetError(f"need n >= 1 instances and y of shape (n,), got {X.shape} / {y.shape}")
    if not np.isfinite(X).all():
        raise DatasetError("X holds NaN or infinite values")
    if num_classes < 1 or y.min() < 0 or y.max() >= num_classes:
        raise DatasetError(f"labels must lie in 0..{num_classes - 1}")


def sample_tensors(X: np.ndarray, y: np.ndarray, kind: str, num_classes: int) -> tuple[Tensor, Tensor]:
    """Checked float32 ``X`` (sequences as `n x C x 1 x L`) and int64 ``y`` tensors."""
    check_sample(X, y, kind, num_classes)
    x = torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32)
    if kind == "sequence":
        x = x.unsqueeze(2)
    return x, torch.as_tensor(np.asarray(y), dtype=torch.long)


def one_hot(y: Tensor, max_classes: int) -> Tensor:
    """`... x max_classes` one-hot labels; labels >= ``max_classes`` become zero rows."""
    keep = y < max_classes
    out = F.one_hot(torch.where(keep, y, torch.zeros_like(y)), max_classes).float()
    return out * keep.unsqueeze(-1).float()


def _halving(x: Tensor) -> tuple[int, int]:
    """Pool kernel halving each spatial axis of `N x C x H x W` that is at least 4 long."""
    return (2 if x.shape[2] >= 4 else 1, 2 if x.shape[3] >= 4 else 1)


class ConvFeatures(nn.Module):
    """Per-instance CNN (003 Table 2): three 3x3 convs with 32/64/32 channels and ReLU.

    Inputs are first average pooled 2x2 while they exceed ``max_area`` pixels (28x28 ->
    14x14; keeps embedding fast), each conv then halves a spatial axis by max pooling only
    while that axis is >= 4, then an adaptive average pool to `4 x 4` and FC 256 -> ReLU ->
    FC ``out_dim``. Inputs with fewer than ``channels`` channels are zero padded, extra
    channels are dropped.
    """

    max_area = 256

    def __init__(self, channels: int, out_dim: int) -> None:
        super().__init__()
        self.channels = channels
        self.convs = nn.ModuleList(
            [nn.Conv2d(channels, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1), nn.Conv2d(64, 32, 3, padding=1)]
        )
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(32 * 16, 256), nn.ReLU(), nn.Linear(256, out_dim))

    def forward(self, x: Tensor) -> Tensor:
        """`N x C x H x W` -> `N x out_dim`."""
        c = x.shape[1]
        if c < self.channels:
            x = F.pad(x, (0, 0, 0, 0, 0, self.channels - c))
        x = x[:, : self.channels]
        while x.shape[2] * x.shape[3] > self.max_area:
            x = F.avg_pool2d(x, _halving(x), ceil_mode=True)
        for conv in self.convs:
            x = F.relu(conv(x))
            if _halving(x) != (1, 1):
                x = F.max_pool2d(x, _halving(x))
        return self.fc(F.adaptive_avg_pool2d(x, (4, 4)))


class TabularFeatures(nn.Module):
    """Permutation-invariant tabular instance encoder (Dataset2Vec style, any width `F`).

    Features are standardised with the sample's own mean and std over its instances. For
    instance `p` and feature `f`, ``phi([z_pf, onehot(y_p)])`` is a small MLP; its mean over
    the features is mapped by ``rho`` to the instance's deep feature. The result does not
    depend on feature order or count, so datasets of different widths share one wing.
    """

    def __init__(self, max_classes: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.max_classes = max_classes
        self.phi = nn.Sequential(nn.Linear(1 + max_classes, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.rho = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """`B x tau x F` values, `B x tau` labels -> `B x tau x out_dim`."""
        mean = x.mean(dim=1, keepdim=True)
        std = x.std(dim=1, unbiased=False, keepdim=True).clamp_min(1e-6)
        z = ((x - mean) / std).clamp(-10.0, 10.0).unsqueeze(-1)
        labels = one_hot(y, self.max_classes).unsqueeze(2).expand(-1, -1, x.shape[2], -1)
        return self.rho(self.phi(torch.cat([z, labels], dim=-1)).mean(dim=2))


class AttentionPool(nn.Module):
    """Set-Transformer PMA with one learned seed query: multi-head attention of the query over
    the instances, residual, then a residual feed-forward block. Permutation invariant."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Parameter(torch.randn(dim) / math.sqrt(dim))
        self.q_proj, self.k_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_proj, self.o_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, h: Tensor) -> Tensor:
        """`B x tau x dim` -> `B x dim`."""
        b, t, d = h.shape
        hd = d // self.heads
        q = self.q_proj(self.query).view(self.heads, hd)
        k = self.k_proj(h).view(b, t, self.heads, hd)
        v = self.v_proj(h).view(b, t, self.heads, hd)
        weights = torch.softmax(torch.einsum("bthd,hd->bht", k, q) / math.sqrt(hd), dim=-1)
        pooled = torch.einsum("bht,bthd->bhd", weights, v).reshape(b, d)
        z = self.query + self.o_proj(pooled)
        return z + self.ff(z)


class MetaFeatureNet(nn.Module):
    """One Siamese wing: instances -> deep features `tau x hidden` -> set -> ``meta_dim``.

    Deep features come from :class:`ConvFeatures` (images; sequences as `C x 1 x L`
    images) or :class:`TabularFeatures`; each is joined with ``onehot(y)`` by an MLP (003
    appends labels before aggregation). Aggregators: ``"mean"`` (ADF), ``"bilstm"`` (the
    final forward state after the last instance concatenated with the final backward state
    after the first one, as paper 000 reads out the last LSTM output) and ``"attention"``
    (:class:`AttentionPool`). Two ReLU FC layers and a plain linear layer give ``m``.
    """

    def __init__(self, config: ExtractorConfig) -> None:
        super().__init__()
        h, k = config.hidden, config.max_classes
        self.config = config
        self.conv = ConvFeatures(config.image_channels, h)
        self.tabular = TabularFeatures(k, h, h)
        self.join = nn.Sequential(nn.Linear(h + k, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        agg_dim = h
        if config.aggregator == "bilstm":
            self.lstm = nn.LSTM(h, h, batch_first=True, bidirectional=True)
            agg_dim = 2 * h
        elif config.aggregator == "attention":
            self.pool = AttentionPool(h, config.heads)
        self.head = nn.Sequential(
            nn.Linear(agg_dim, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, config.meta_dim)
        )

    def instance_features(self, x: Tensor, y: Tensor, kind: str) -> Tensor:
        """`B x tau x ...` instances, `B x tau` labels -> label-aware features `B x tau x hidden`."""
        b, t = y.shape
        if kind == "tabular":
            feats = self.tabular(x, y)
        else:
            feats = self.conv(x.reshape(b * t, *x.shape[2:])).view(b, t, -1)
        return self.join(torch.cat([feats, one_hot(y, self.config.max_classes)], dim=-1))

    def aggregate(self, h: Tensor) -> Tensor:
        """`B x tau x hidden` -> `B x meta_dim`."""
        if self.config.aggregator == "bilstm":
            _, (h_n, _) = self.lstm(h)
            pooled = torch.cat([h_n[0], h_n[1]], dim=-1)
        elif self.config.aggregator == "attention":
            pooled = self.pool(h)
        else:
            pooled = h.mean(dim=1)
        return self.head(pooled)

    def forward_batch(self, x: Tensor, y: Tensor, kind: str) -> Tensor:
        """Several same-shaped datasets: `B x tau x ...`, `B x tau` -> `B x meta_dim`."""
        return self.aggregate(self.instance_features(x, y, kind))

    def forward(self, x: Tensor, y: Tensor, kind: str) -> Tensor:
        """One dataset: `tau x ...` instances, `tau` labels -> `meta_dim`."""
        return self.forward_batch(x.unsqueeze(0), y.unsqueeze(0), kind)[0]


class MetaFeatureExtractor:
    """A trained wing, its config and the distance ``scale`` its targets were divided by.

    ``embed`` returns ``scale * m``, so Euclidean distances between embeddings estimate the
    original target distances.
    """

    def __init__(self, net: MetaFeatureNet, config: ExtractorConfig, scale: float) -> None:
        self.net = net.eval()
        self.config = config
        self.scale = float(scale)

    @torch.no_grad()
    def embed(self, X: np.ndarray, y: np.ndarray, kind: str, num_classes: int, seed: int = 0) -> np.ndarray:
        """Meta-feature `(meta_dim,)` from a seeded subsample of up to ``n_embed`` instances."""
        x, labels = sample_tensors(X, y, kind, num_classes)
        rng = np.random.default_rng(seed)
        n = labels.shape[0]
        if n > self.config.n_embed:
            idx = torch.as_tensor(np.sort(rng.choice(n, self.config.n_embed, replace=False)))
            x, labels = x[idx], labels[idx]
        self.net.eval()
        h = self.net.instance_features(x.unsqueeze(0), labels.unsqueeze(0), kind)
        if self.config.aggregator == "bilstm":
            orders = [torch.as_tensor(rng.permutation(h.shape[1])) for _ in range(self.config.bilstm_perms)]
            m = self.net.aggregate(torch.cat([h[:, o] for o in orders])).mean(dim=0)
        else:
            m = self.net.aggregate(h)[0]
        return (m * self.scale).double().numpy()

    def embed_many(self, samples: list[DatasetSample], seed: int = 0) -> np.ndarray:
        """`n x meta_dim` meta-features, one row per sample."""
        if not samples:
            return np.zeros((0, self.config.meta_dim))
        return np.stack([self.embed(s.X, s.y, s.kind, s.num_classes, seed=seed) for s in samples])

    def save(self, path: str | Path) -> None:
        """Write weights, config and scale with ``torch.save``; no training data is kept."""
        payload = {"state_dict": self.net.state_dict(), "config": self.config.to_dict(), "scale": self.scale}
        torch.save(payload, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> MetaFeatureExtractor:
        """Rebuild an extractor written by :meth:`save`."""
        try:
            payload = torch.load(Path(path), map_location="cpu", weights_only=True)
            config = ExtractorConfig.from_dict(payload["config"])
            net = MetaFeatureNet(config)
            net.load_state_dict(payload["state_dict"])
            scale = payload["scale"]
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ExtractorError(
                f"cannot load the meta-feature extractor {path} ({type(exc).__name__}: {first}); "
                "rebuild it with `dvc repro` (or `tune-agent meta train`), or move it aside"
            ) from None
        return cls(net, config, scale)
