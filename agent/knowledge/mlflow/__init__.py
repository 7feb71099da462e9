"""The MLflow knowledge base: the only package of tune-agent that imports mlflow.

Layout in MLflow (what a person sees in the UI):
- one experiment per job, named ``tune-agent/<job>``;
- one parent run per study, named after the study, tagged ``tune_agent.kind=study`` with the
  dataset name and fingerprint, job, search-space signature, objective, seed, status and best result;
  its artifacts hold ``dataset/summary.json``, ``dataset/sample.npz`` (a fixed seeded sample, so
  meta-feature models can be retrained from MLflow alone), ``space.json`` and the trace plot;
- one nested child run per trial (``mlflow.parentRunId``), named ``<study>/trial-<n>``, with every
  hyperparameter as a param, per-epoch metrics from Lightning's ``MLFlowLogger``, ``objective``,
  ``duration_s`` and tags for state, origin and failure reason.

Modules: :mod:`.store_file` (URIs, the embedded sqlite store), :mod:`.retry` (outages and races),
:mod:`.connection` (the client and its retried calls), :mod:`.studies`, :mod:`.imports` (evaluations
made elsewhere), :mod:`.registry` (models and meta-model runs), :mod:`.loggers` (Lightning loggers) and :mod:`.backend`
(:class:`~agent.knowledge.mlflow.backend.MlflowKnowledgeBase`, the trials, and all of the above).
"""
