"""Image-folder datasets in the ImageFolder layout: ``root/<class>/<image>``.

Class names are the sub-folder names (sorted); images are found recursively inside
each class folder by suffix. All images become grayscale when every one of them is
grayscale, else RGB, are resized to the first image's size capped at 64 x 64, and
are scaled to [0, 1]. PIL is used directly (no torchvision).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agent.data.dataset import Dataset, build_dataset
from agent.errors import DatasetError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
MAX_SIDE = 64
_GRAY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "F"})


def _scan(root: Path) -> list[tuple[Path, str]]:
    """(image path, class name) for every image under the class sub-folders."""
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DatasetError(f"image folder {root} has no class sub-folders (expected root/<class>/<image>)")
    found = [
        (f, c.name) for c in classes for f in sorted(c.rglob("*")) if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not found:
        raise DatasetError(f"image folder {root} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return found


def _open_all(files: list[tuple[Path, str]]) -> list:  # -> list[PIL.Image.Image]
    from PIL import Image, UnidentifiedImageError

    images = []
    for path, _ in files:
        try:
            with Image.open(path) as img:
                img.load()
                images.append(img.copy())
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            raise DatasetError(f"cannot read image {path}: {type(exc).__name__}") from exc
    return images


def _to_array(img, mode: str, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    if mode == "L" and img.mode in ("I", "I;16", "F"):
        arr = np.asarray(img, dtype=np.float32)
        peak = 65535.0 if arr.max() > 255 else 255.0
        img = Image.fromarray(np.clip(arr / peak * 255.0, 0, 255).astype(np.uint8))
    img = img.convert(mode)
    if img.size != size:
        img = img.resize(size, Image.Resampling.BILINEAR)
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return arr[None, :, :] if mode == "L" else arr.transpose(2, 0, 1)


def load_image_folder(root: Path, name: str) -> Dataset:
    """Load an ImageFolder-layout directory as an image dataset."""
    files = _scan(root)
    images = _open_all(files)
    mode = "L" if all(img.mode in _GRAY_MODES for img in images) else "RGB"
    width, height = images[0].size
    size = (min(width, MAX_SIDE), min(height, MAX_SIDE))
    X = np.stack([_to_array(img, mode, size) for img in images])
    labels = np.array([cls for _, cls in files])
    return build_dataset(name, "file", "image", X, labels)
