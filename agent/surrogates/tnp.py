"""Transferable Neural Processes (TNP; Wei, Yao, Zhao & Huang, paper 004): model and BoTorch wrapper.

This module owns the TNP network, its configuration, the bank of source tasks it attends to, and
:class:`TNPModel`, the BoTorch ``Model`` used to suggest points for one target study. Meta-training
(the paper's Algorithm 1) lives in :mod:`agent.surrogates.tnp_train`. Use a TNP when many past
studies on the same space are at hand and a suggestion must stay cheap however many observations
they hold: a GP on the pooled history would be cubic in it, the TNP is linear.

The network (paper §4.1–4.2):

* encoder ``E(x, y) → r`` embeds each observation; key function ``g(x)`` embeds configurations;
* dataset-aware multi-head attention: a query ``g(x*)`` attends over the target's own observations
  (in-dataset) and over observations of source tasks (across-dataset). Each source ``m`` carries a
  similarity ``s_m``: the cosine between its mean observation embedding and the target's. As in the
  paper, the point weights are ``softmax([1, s_1, …, s_M])`` (the target's own points count as
  similarity 1) with a learned temperature ``τ``; we apply them as ``τ·s`` added to the attention
  logits, i.e. *multiplying* each point's attention weight by ``exp(τ s_m)``, where the paper's
  ``s ∘ logits`` would only change the softmax temperature of dissimilar sources;
* a decoder ``D(r*, x*) → (μ, σ²)`` with a softplus variance.

Conventions: inputs in the unit cube `[0,1]^d`; targets maximised. y is standardised *here*, per
task: each source by its own mean and std; the target by the mean and std of its observations (also
the context during meta-training, so training matches use); the posterior is in the caller's units.
The network trains in float32; :func:`build_tnp_model` fine-tunes a float32 copy and hands BoTorch
its posterior in the caller's precision.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import numpy as np
import torch
from botorch.posteriors.gpytorch import GPyTorchPosterior
from gpytorch.distributions import MultivariateNormal
from linear_operator.operators import DiagLinearOperator
from torch import Tensor, nn

from agent.surrogates.base import SingleOutputModel
from agent.surrogates.gp import impute_failures, standardise, torch_threads


@dataclass(frozen=True)
class TNPConfig:
    """Architecture, meta-training and fine-tuning settings (paper §5.1 uses hidden 128, k 10)."""

    hidden: int = 64  # r: embedding width of encoder, key function and decoder
    heads: int = 4
    meta_steps: int = 300  # outer (Reptile) updates
    meta_batch: int = 2  # source tasks adapted per outer update
    inner_steps: int = 3  # k: Adam steps per task in the inner loop
    inner_lr: float = 1e-3  # α
    outer_lr: float = 3e-3  # ε, applied through Adam to the Reptile direction
    context_max: int = 20  # most in-dataset context points per episode
    target_extra: int = 20  # non-context points added to an episode's targets
    memory_tasks: int = 8  # across-dataset tasks attended to (top-m similar at use)
    memory_points: int = 50  # points kept per attended source task
    fine_tune_steps: int = 20
    fine_tune_lr: float = 1e-3
    n_initial: int = 5  # learned initial configurations
    init_temperature: float = 5.0  # α in the initial-configuration loss L_I
    init_lr: float = 0.02  # outer Adam rate for initial configurations (logit space)
    min_var: float = 1e-4
    grad_clip: float = 10.0
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TNPConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class SourceBank:
    """Source tasks as standardised tensors (`n_i x d`, `n_i`); build once, reuse across calls."""

    def __init__(self, sources: Sequence[tuple[np.ndarray, np.ndarray]], dtype: torch.dtype = torch.double) -> None:
        self.tasks: list[tuple[Tensor, Tensor]] = []
        for X, y in sources:
            y = impute_failures(np.asarray(y, dtype=float).reshape(-1))
            z, _, _ = standardise(torch.as_tensor(np.where(np.isfinite(y), y, 0.0), dtype=dtype))
            self.tasks.append((torch.as_tensor(np.asarray(X), dtype=dtype), z))

    def __len__(self) -> int:
        return len(self.tasks)

    def to(self, dtype: torch.dtype) -> SourceBank:
        out = SourceBank([])
        out.tasks = [(X.to(dtype), y.to(dtype)) for X, y in self.tasks]
        return out


class Prepared(NamedTuple):
    """Cached attention inputs over `k` points: keys and values `H x k x d_h`, log weights `k`,
    configurations `k x d` and which points are the target's own (`k`, bool)."""

    keys: Tensor
    values: Tensor
    log_w: Tensor
    X: Tensor
    own: Tensor


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    layers = [nn.Linear(n_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, n_out)]
    return nn.Sequential(*layers)


class TNP(nn.Module):
    """Encoder, dataset-aware attention and decoder for `d`-dimensional configurations."""

    def __init__(self, dim: int, config: TNPConfig | None = None) -> None:
        super().__init__()
        self.dim, self.config = dim, config or TNPConfig()
        h = self.config.hidden
        if h % self.config.heads:
            raise ValueError("hidden must be divisible by heads")
        gen = torch.Generator().manual_seed(self.config.seed)
        with torch.random.fork_rng():
            torch.manual_seed(self.config.seed)
            self.encoder, self.key_fn = _mlp(dim + 1, h, h), _mlp(dim, h, h)
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h, bias=False) for _ in range(4))
            self.decoder = _mlp(h + dim + 2 * self.config.heads, h, 2)
        self.log_tau = nn.Parameter(torch.tensor(math.log(4.0)))
        # Per-head ARD distance bias: lengthscales 0.5, 0.25, … so attention is local from the start.
        ls = 0.5 ** torch.arange(1, self.config.heads + 1, dtype=torch.float32)
        self.log_beta = nn.Parameter(torch.log(0.5 / ls**2).unsqueeze(-1).repeat(1, dim))
        u = torch.rand(self.config.n_initial, dim, generator=gen).clamp(0.05, 0.95)
        self.init_logits = nn.Parameter(torch.logit(u))  # learned initial configurations

    def net_parameters(self) -> list[nn.Parameter]:
        """Everything but the initial configurations (those have their own loss)."""
        return [p for n, p in self.named_parameters() if n != "init_logits"]

    def encode(self, X: Tensor, y: Tensor) -> Tensor:
        """Observations `n x d`, `n` → embeddings `n x r`."""
        return self.encoder(torch.cat([X, y.unsqueeze(-1)], dim=-1))

    def task_means(self, tasks: Sequence[tuple[Tensor, Tensor]]) -> Tensor:
        """Mean observation embedding per task → `M x r` (the paper's dataset descriptor)."""
        if not tasks:
            return torch.zeros(0, self.config.hidden, dtype=self.log_tau.dtype)
        sizes = torch.tensor([len(y) for _, y in tasks])
        r = self.encode(torch.cat([X for X, _ in tasks]), torch.cat([y for _, y in tasks]))
        seg = torch.repeat_interleave(torch.arange(len(tasks)), sizes)
        sums = torch.zeros(len(tasks), r.shape[-1], dtype=r.dtype).index_add(0, seg, r)
        return sums / sizes.clamp_min(1).unsqueeze(-1).to(r.dtype)

    def similarity(self, ctx_x: Tensor, ctx_y: Tensor, means: Tensor) -> Tensor:
        """Similarity `M` of each source (mean embeddings `M x r`) to the target (0 without context).

        The paper's cosine of mean embeddings, taken after subtracting the sources' average mean
        embedding: raw means share a large common component (all tasks live on the same space with
        standardised y), which pins every raw cosine near 1.
        """
        if ctx_x.shape[0] == 0 or means.shape[0] == 0:
            return torch.zeros(means.shape[0], dtype=means.dtype)
        centre = means.mean(0, keepdim=True)
        target = self.encode(ctx_x, ctx_y).mean(0, keepdim=True) - centre
        return torch.cosine_similarity(means - centre, target, dim=-1, eps=1e-6)

    def prepare(
        self, ctx_x: Tensor, ctx_y: Tensor, memory: Sequence[tuple[Tensor, Tensor]], sim: Tensor | None = None
    ) -> Prepared:
        """Keys, values and weights for in-dataset context `n x d`, `n` plus source memory.

        ``sim`` (`M`) are the memory tasks' similarities; computed from ``memory`` if None.
        """
        s = self.similarity(ctx_x, ctx_y, self.task_means(memory)) if sim is None else sim
        xs = [ctx_x, *[X for X, _ in memory]]
        r = self.encode(torch.cat(xs), torch.cat([ctx_y, *[y for _, y in memory]]))
        sizes = torch.tensor([len(y) for _, y in memory], dtype=torch.long)
        sim = torch.cat([torch.ones(ctx_x.shape[0], dtype=r.dtype), torch.repeat_interleave(s, sizes)])
        H, h = self.config.heads, self.config.hidden
        keys = self.wk(self.key_fn(torch.cat(xs))).reshape(-1, H, h // H).transpose(0, 1)
        values = self.wv(r).reshape(-1, H, h // H).transpose(0, 1)
        own = torch.arange(len(sim)) < ctx_x.shape[0]
        return Prepared(keys, values, self.log_tau.exp() * (sim - 1.0), torch.cat(xs), own)

    def _evidence(self, dist: Tensor, prep: Prepared) -> Tensor:
        """Per-head log-sum of distance kernels over own and memory points → `m x 2H` features.

        Tells the decoder how close a query is to the target's data (its variance should shrink
        there), which normalised attention weights alone cannot.
        """
        feats = []
        for mask, log_w in ((prep.own, 0.0), (~prep.own, prep.log_w[~prep.own])):
            if bool(mask.any()):
                feats.append(torch.logsumexp(log_w - dist[..., mask], dim=-1).clamp(-20.0, 10.0))
            else:
                feats.append(torch.full(dist.shape[:2], -20.0, dtype=dist.dtype))
        return 0.1 * torch.cat(feats).transpose(0, 1)

    def predict(self, xq: Tensor, prep: Prepared) -> tuple[Tensor, Tensor]:
        """Queries `m x d` → predictive mean `m` and variance `m` (standardised units).

        Score of head ``h`` for point ``j``: ``q_h·k_hj / sqrt(r) − Σ_d β_hd (x*_d − x_jd)² + τ(s_j − 1)``.
        """
        H, h = self.config.heads, self.config.hidden
        sq = (xq.unsqueeze(1) - prep.X.unsqueeze(0)).pow(2)  # m x k x d
        dist = torch.einsum("mkd,hd->hmk", sq, self.log_beta.exp())
        if prep.keys.shape[1] == 0:
            rep = torch.zeros(xq.shape[0], h, dtype=xq.dtype)
        else:
            q = self.wq(self.key_fn(xq)).reshape(-1, H, h // H).transpose(0, 1)  # H x m x d_h
            logits = q @ prep.keys.transpose(-1, -2) / math.sqrt(h) - dist + prep.log_w
            rep = (torch.softmax(logits, dim=-1) @ prep.values).transpose(0, 1).reshape(-1, h)
            rep = self.wo(rep)
        out = self.decoder(torch.cat([rep, xq, self._evidence(dist, prep)], dim=-1))
        return out[..., 0], nn.functional.softplus(out[..., 1]) + self.config.min_var

    def nll(self, xq: Tensor, yq: Tensor, prep: Prepared) -> Tensor:
        """Mean Gaussian negative log-likelihood of targets `m x d`, `m` (paper Eq. 2, negated)."""
        mean, var = self.predict(xq, prep)
        return 0.5 * (torch.log(2 * math.pi * var) + (yq - mean).pow(2) / var).mean()

    def initial_configs(self) -> np.ndarray:
        """The learned initial configurations `n_initial x d` in the unit cube."""
        return torch.sigmoid(self.init_logits.detach()).double().cpu().numpy()

    def save(self, path: str) -> None:
        torch.save({"dim": self.dim, "config": self.config.to_dict(), "state": self.state_dict()}, path)

    @classmethod
    def load(cls, path: str) -> TNP:
        """The TNP saved at ``path``; a file that cannot be read is one line naming it and how to rebuild it."""
        from agent.errors import ModelFileError

        try:
            blob = torch.load(path, weights_only=True)
            net = cls(int(blob["dim"]), TNPConfig.from_dict(blob["config"]))
            net.to(next(iter(blob["state"].values())).dtype)
            net.load_state_dict(blob["state"])
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ModelFileError(
                f"cannot load the TNP {path} ({type(exc).__name__}: {first}); rebuild it with "
                "`dvc repro` (or `tune-agent meta train-transfer`), or move it aside"
            ) from None
        return net


def episode_split(n: int, n_ctx: int, n_tgt: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random context indices (`n_ctx`) and target indices (`n_tgt`, context first, then others)."""
    perm = torch.randperm(n, generator=gen)
    return perm[:n_ctx], perm[: max(n_tgt, n_ctx)]


def fine_tune(
    net: TNP, X: Tensor, z: Tensor, memory: Sequence[tuple[Tensor, Tensor]], steps: int, lr: float, gen: torch.Generator
) -> list[float]:
    """``steps`` Adam steps of the NLL on one task's `n x d`, standardised `n` (Algorithm 1, l. 9).

    Each step conditions on a random context of half to all-but-one points and predicts all of
    them. Needs at least 2 points; otherwise nothing is done. Returns the losses.
    """
    n = X.shape[0]
    if n < 2 or steps <= 0:
        return []
    opt = torch.optim.Adam(net.net_parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        n_ctx = int(torch.randint(max(1, n // 2), n, (1,), generator=gen))
        ctx, _ = episode_split(n, n_ctx, n, gen)
        loss = net.nll(X, z, net.prepare(X[ctx], z[ctx], memory))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.net_parameters(), net.config.grad_clip)
        opt.step()
        losses.append(loss.item())
    return losses


def select_memory(
    net: TNP, bank: SourceBank, X: Tensor, z: Tensor, gen: torch.Generator
) -> tuple[list[tuple[Tensor, Tensor]], Tensor, list[int]]:
    """Top-``memory_tasks`` sources by similarity, ≤ ``memory_points`` random points each.

    Returns the memory, the similarity `M` of every source and the chosen source indices (random
    ones when there is no target data to compare with).
    """
    cfg = net.config
    with torch.no_grad():
        s = net.similarity(X, z, net.task_means(bank.tasks))
    order = torch.argsort(s, descending=True) if X.shape[0] else torch.randperm(len(bank), generator=gen)
    chosen = order[: cfg.memory_tasks].tolist()
    memory = []
    for m in chosen:
        Xm, ym = bank.tasks[m]
        keep = torch.randperm(len(ym), generator=gen)[: cfg.memory_points]
        memory.append((Xm[keep], ym[keep]))
    return memory, s, chosen


class TNPModel(SingleOutputModel):
    """BoTorch model over a fine-tuned TNP for one target: diagonal Gaussian posterior, one output.

    Keys and values of the target's observations and of the attended source memory are computed
    once at construction; ``posterior`` only runs the query path, so gradients w.r.t. ``X`` flow.
    """

    def __init__(self, net: TNP, prep: Prepared, y_mean: float, y_std: float, similarity: Tensor) -> None:
        super().__init__()
        # Kept out of the module tree: BoTorch acquisitions call ``self.to(X)``, which would cast
        # the float32 network to double on every evaluation.
        self._nets = [net]
        self.prep = prep
        self.y_mean, self.y_std = float(y_mean), float(y_std)
        self.source_similarity = similarity  # `M`: cosine similarity of each source to the target
        self.prep_dtype = next(net.parameters()).dtype

    # Acquisition search budget (see agent.samplers.acquisition.optimize_on_space): a TNP forward/backward
    # costs ~10x a GP's, so fewer L-BFGS restarts and iterations from a larger batched random start.
    acq_budget = {"num_restarts": 2, "raw_samples": 512, "maxiter": 30}

    @property
    def net(self) -> TNP:
        return self._nets[0]

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: Any = None,
        **kwargs: Any,
    ) -> GPyTorchPosterior:
        """Posterior at `b x q x d` (or `q x d`) inputs, in the caller's units of y."""
        batch, q = X.shape[:-2], X.shape[-2]
        dtype = X.dtype if X.dtype.is_floating_point else torch.double
        mean, var = self.net.predict(X.to(self.prep_dtype).reshape(-1, X.shape[-1]), self.prep)
        mean, var = mean.to(dtype), var.to(dtype)
        mean = (self.y_mean + self.y_std * mean).reshape(*batch, q)
        var = (self.y_std**2 * var).reshape(*batch, q)
        post = GPyTorchPosterior(MultivariateNormal(mean, DiagLinearOperator(var)))
        return posterior_transform(post) if posterior_transform is not None else post


def build_tnp_model(
    tnp: TNP,
    sources: Sequence[tuple[np.ndarray, np.ndarray]] | SourceBank,
    train_X: Tensor,
    train_Y: Tensor,
    fine_tune_steps: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> TNPModel:
    """Fine-tunes a copy of ``tnp`` on the target's `n x d` / `n x 1` data; returns the model.

    The network runs in ``dtype`` (single precision by default: on CPU it halves the cost of a
    suggestion, and the posterior is handed to BoTorch in the caller's precision anyway).

    ``sources`` may be a prebuilt :class:`SourceBank` (build it once per study to skip conversion).
    With fewer than 2 target points the meta-learned initialisation is used as is.
    """
    bank = sources.to(dtype) if isinstance(sources, SourceBank) else SourceBank(sources, dtype=dtype)
    steps = tnp.config.fine_tune_steps if fine_tune_steps is None else fine_tune_steps
    gen = torch.Generator().manual_seed(seed)
    net = copy.deepcopy(tnp).to(dtype)
    X = train_X.to(dtype).reshape(-1, tnp.dim)
    z, y_mean, y_std = standardise(train_Y.double().reshape(-1))
    z = z.to(dtype)
    with torch_threads(1):
        memory, s, chosen = select_memory(net, bank, X, z, gen)
        fine_tune(net, X, z, memory, steps, tnp.config.fine_tune_lr, gen)
        net.eval()
        for p in net.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            sim = net.similarity(X, z, net.task_means(bank.tasks))  # all sources, all points
            prep = net.prepare(X, z, memory, sim[chosen])
    return TNPModel(net, prep, y_mean, y_std, s)
