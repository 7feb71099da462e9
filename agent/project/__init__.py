"""Your Lightning project, as it is: a LightningModule and DataModule, or a LightningCLI script.

- :mod:`.space_file`: the space file (``model.lr: {type: float, ...}``, ``fixed:``).
- :mod:`.signature`: the space checked against the classes' ``__init__``; a starter space.
- :mod:`.spec`: the project as a stored job spec (``lightning:`` / ``lightning-cli:``).
- :mod:`.job`: a LightningModule and DataModule as a job; :mod:`.cli_job`: a LightningCLI script.
- :mod:`.sample`: the bounded sample of the training loader the warm start measures.
- :mod:`.probe`: the callback that learns a LightningCLI script's classes and data.
- :mod:`.serving`: a trained project model as the study keeps it.
"""
