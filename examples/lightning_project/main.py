"""The project's command line: `python main.py fit --config base.yaml [--model.lr=0.01 ...]`."""

from lightning.pytorch.cli import LightningCLI

from lightning_project.data import DigitsData  # noqa: F401 - the default DataModule of base.yaml
from lightning_project.model import LitClassifier


def main() -> None:
    LightningCLI(LitClassifier, datamodule_class=None, subclass_mode_data=True, save_config_kwargs={"overwrite": True})


if __name__ == "__main__":
    main()
