"""tune-agent: Bayesian optimisation of PyTorch Lightning jobs that learns from its MLflow history."""

__version__ = "0.1.0"
