"""Real inputs for a parity run (`--inputs DIR|FILE`): arrays or images from
outside, checked against the model's inputs once the model is open.

- FILE.npz: one array per input, keyed by input name; FILE.npy: one array.
  A model with one input takes any single array, whatever its name.
- DIR: `NAME.npy` per input, and/or images (.png, .jpg, .jpeg, .bmp) that
  together are the batch of the model's one image input [N, H, W, C] (in
  sorted file-name order), each resized (bilinear) to the model's H x W and
  made RGB (C = 3) or grey (C = 1), then preprocessed: `scale-0-1` (x/255),
  `caffe` (RGB to BGR, minus the ImageNet mean per channel, no scaling: as
  keras.applications' "caffe" mode), `tf` (x/127.5 - 1, in [-1, 1]), or a
  function `MODULE:FUNC` / `FILE.py:FUNC` called with the float32 batch in
  [0, 255] RGB and returning an array of the same shape.
  Only files inside DIR are read: a name that leads out of it through a
  symbolic link is refused.

Images need Pillow (the `images` extra). Every problem is one InputError
line that names the input and the shapes; non-finite values are refused (a
NaN input makes every runtime's NaN agree with nothing).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.modelsource import TensorInfo, check
from bridge.parity.inputs import InputError, load_npz
from bridge.untrusted import UntrustedNameError, inside, shown

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)   # ImageNet's per-channel mean, as keras.applications' caffe mode
STANDARD = ("scale-0-1", "caffe", "tf")


def _scale_0_1(x):
    return x / 255.0


def _caffe(x):
    if x.shape[-1] != 3:
        raise InputError(f"--preprocess caffe: needs 3 channels (RGB to BGR), the input has {x.shape[-1]}")
    return x[..., ::-1] - np.asarray(CAFFE_MEAN_BGR, dtype=x.dtype)


def _tf(x):
    return x / 127.5 - 1.0


_STANDARD_FUNCS: Dict[str, Callable] = {"scale-0-1": _scale_0_1, "caffe": _caffe, "tf": _tf}


def preprocessor(spec) -> Tuple[str, Callable]:
    """(its name, the function) for `--preprocess`: a standard name, a callable,
    or `MODULE:FUNC` / `FILE.py:FUNC`: the user's own code, imported as
    `--import` imports it (bridge.team_imports)."""
    if callable(spec):
        return getattr(spec, "__name__", "function"), spec
    spec = str(spec)
    if spec in _STANDARD_FUNCS:
        return spec, _STANDARD_FUNCS[spec]
    where, sep, func = spec.rpartition(":")
    if not sep or not where or not func:
        raise InputError(f"--preprocess {spec!r}: expected one of {', '.join(STANDARD)}, or MODULE:FUNC / FILE.py:FUNC")
    from bridge.team_imports import ImportFailed, import_modules
    try:  # as --import imports it (the same file is one module, whichever flag names it first)
        (module,) = import_modules([where])
    except ImportFailed as e:
        raise InputError(f"--preprocess {spec}: {str(e).partition(': ')[2] or e}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise InputError(f"--preprocess {spec}: {where} has no function {func!r}")
    return spec, fn


@dataclass
class RealInputs:
    """What `--inputs` read, before the model says what it takes."""
    flag: str                                   # the option, for messages (--inputs, --load-inputs)
    path: str
    arrays: Dict[str, np.ndarray] = field(default_factory=dict)   # by input name (npz key, .npy stem)
    images: List[str] = field(default_factory=list)               # image files, sorted
    preprocess: Optional[Tuple[str, Callable]] = None

    def shapes_hint(self) -> Optional[Dict[str, np.ndarray]]:
        """The arrays, where they alone are the inputs (a built-in model is then
        built for their shapes); None with images (resized to the model's size)."""
        return None if self.images else dict(self.arrays)

    def resolve(self, infos: Sequence[TensorInfo]) -> Dict[str, np.ndarray]:
        """{input name: array} for the model's `infos`, checked (names, ranks,
        fixed dims, dtypes) as bridge.modelsource.check does."""
        arrays = dict(self.arrays)
        names = [i.name for i in infos]
        if len(infos) == 1 and len(arrays) == 1 and not self.images and names[0] not in arrays:
            arrays = {names[0]: next(iter(arrays.values()))}  # a single-input model takes any single array
        if self.images:
            info = _image_input(infos, arrays, self.flag)
            arrays[info.name] = _load_images(self.images, info, self.preprocess, self.flag)
        out = check(infos, arrays, self.flag)   # every input given, in its rank, fixed dims and dtype kind
        extra = [k for k in arrays if k not in names]
        if extra:
            raise InputError(f"{self.flag}: array {shown(extra[0])} names no input of the model (inputs: "
                             f"{', '.join(names)})")
        for name, a in out.items():
            if a.dtype.kind in "fc" and not np.isfinite(a).all():
                at = np.unravel_index(int(np.argmax(~np.isfinite(a))), a.shape)
                raise InputError(f"{self.flag}: input {name!r} {list(a.shape)} holds a non-finite value at "
                                 f"[{','.join(map(str, at))}]")
        return out


def open_inputs(path, preprocess=None, flag: str = "--inputs") -> RealInputs:
    """Reads `path` (an .npz, an .npy or a folder); images wait for the model's size."""
    path = os.fspath(path)
    pre = preprocessor(preprocess) if preprocess is not None else None
    if os.path.isdir(path):
        found = _read_folder(path, flag, pre)
    elif not os.path.exists(path):
        raise InputError(f"{flag}: no such file: {path}")
    elif path.endswith(".npy"):
        found = RealInputs(flag, path, {os.path.basename(path)[:-4]: _load_npy(path, flag)})
    else:
        found = RealInputs(flag, path, load_npz(path, flag))
    if pre is not None and not found.images:
        raise InputError(f"{flag} {path}: --preprocess applies to images (.png/.jpg), and there are none")
    found.preprocess = pre
    return found


def _load_npy(path: str, flag: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except Exception as e:  # not an .npy, truncated, pickled objects
        raise InputError(f"{flag}: {path} is not a readable .npy file ({type(e).__name__}: {e})") from None


def _read_folder(folder: str, flag: str, pre) -> RealInputs:
    found = RealInputs(flag, folder)
    for name in sorted(os.listdir(folder)):
        lower = name.lower()
        if not (lower.endswith(".npy") or lower.endswith(IMAGE_SUFFIXES)):
            continue
        try:
            path = inside(folder, name)
        except UntrustedNameError as e:
            raise InputError(f"{flag}: refusing {e}") from None
        if not os.path.isfile(path):
            continue
        if lower.endswith(".npy"):
            found.arrays[name[:-4]] = _load_npy(path, flag)
        else:
            found.images.append(path)
    if not found.arrays and not found.images:
        raise InputError(f"{flag} {folder}: no .npy or image ({', '.join(IMAGE_SUFFIXES)}) files in it")
    if found.images and pre is None:
        raise InputError(f"{flag} {folder}: {len(found.images)} images need --preprocess "
                         f"({' | '.join(STANDARD)} | MODULE:FUNC | FILE.py:FUNC)")
    return found


def _image_input(infos: Sequence[TensorInfo], arrays: Mapping[str, np.ndarray], flag: str) -> TensorInfo:
    """The one input the images feed: rank 4 (N, H, W, C), floating, with C 1 or 3
    (or open), not given by an .npy."""
    fits = [i for i in infos if i.name not in arrays and len(i.shape) == 4 and np.dtype(i.dtype).kind == "f"
            and i.shape[3] in (None, 1, 3)]
    if len(fits) != 1:
        described = ", ".join(f"{i.name} [{','.join('?' if d is None else str(d) for d in i.shape)}] {i.dtype}"
                              for i in infos)
        raise InputError(f"{flag}: images need exactly one float input [N,H,W,C] with C 1 or 3 not given by an "
                         f".npy; the model has {described or 'no inputs'}" + (f" ({len(fits)} fit)" if fits else ""))
    return fits[0]


def _load_images(paths: Sequence[str], info: TensorInfo, pre, flag: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise InputError(f"{flag}: reading images needs Pillow (pip install pillow, or bridge's 'images' "
                         f"extra)") from None
    _, h, w, c = info.shape
    channels = c or 3
    pictures = []
    for path in paths:
        try:
            with Image.open(path) as im:
                im = im.convert("RGB" if channels == 3 else "L")
                if h is not None and w is not None and im.size != (w, h):
                    im = im.resize((w, h), Image.BILINEAR)
                pictures.append(np.asarray(im, dtype=np.float32).reshape(im.size[1], im.size[0], channels))
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            raise InputError(f"{flag}: {os.path.basename(path)} is not a readable image ({type(e).__name__}: "
                             f"{e})") from None
    sizes = sorted({p.shape[:2] for p in pictures})
    if len(sizes) > 1:
        raise InputError(f"{flag}: input {info.name!r} leaves H,W open and the images have sizes "
                         f"{', '.join(f'{a}x{b}' for a, b in sizes)}; give one with --input-shape "
                         f"{info.name}:N,H,W,{channels}")
    batch = np.stack(pictures)
    name, fn = pre
    try:
        out = np.asarray(fn(batch.copy()))
    except InputError:
        raise
    except Exception as e:  # the user's function failed: one line naming it
        raise InputError(f"--preprocess {name} failed on {list(batch.shape)} ({type(e).__name__}: {e})") from None
    if out.shape != batch.shape:
        raise InputError(f"--preprocess {name} returned shape {list(out.shape)} for images {list(batch.shape)}, "
                         f"input {info.name!r}: the same shape is needed")
    if out.dtype.kind != "f":
        raise InputError(f"--preprocess {name} returned dtype {out.dtype.name}; input {info.name!r} is {info.dtype}")
    return out.astype(info.dtype)
