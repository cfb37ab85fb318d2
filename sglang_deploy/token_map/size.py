"""How many token ids a hot-vocabulary map holds (SGLang's --speculative-token-map), read without torch.

`sglang-deploy token-map` writes the file with `torch.save` of a list of ints (token_map/build.py): a zip archive
whose `<name>/data.pkl` is a plain pickle of the list (no tensors, so no persistent ids). The simulated servers read
its length from there with a pickle reader that loads no class at all; a file in another format (a saved tensor, an
old-style torch pickle) falls back to the size in its name, `<model>-<N>.pt` as the token-map command names it, or
FR-Spec's `freq_<N>.pt`. Standard library only: it runs on the simulated host with the system python3, and the
tune on the controller uses the same reading of a name.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import zipfile

NAME = re.compile(r"(?:^|.*[-_])([0-9]{1,7})\.pt$")
MAX_PICKLE_BYTES = 64 << 20


class _NoClasses(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name}: the map holds objects, not a list of ints")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("the map holds a tensor, not a list of ints")


def size_from_name(path: str) -> int | None:
    """N of `<anything>-<N>.pt` or `<anything>_<N>.pt`; None for another name."""
    match = NAME.match(os.path.basename(str(path)))
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def size_from_file(path: str) -> int | None:
    """The length of the list a torch.save'd zip archive holds; None when the file is not one (or unreadable)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1 or archive.getinfo(names[0]).file_size > MAX_PICKLE_BYTES:
                return None
            ids = _NoClasses(io.BytesIO(archive.read(names[0]))).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError,
            AttributeError, IndexError):
        return None
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return None
    return len(ids)


def map_size(path: str) -> tuple[int | None, str]:
    """(N, where it was read: 'file' or 'name'); (None, why) when neither says."""
    size = size_from_file(path) if os.path.isfile(path) else None
    if size:
        return size, "file"
    size = size_from_name(path)
    if size:
        return size, "name"
    return None, (f"{path}: not a torch.save'd list of token ids, and its name does not carry the size "
                  "(<model>-<N>.pt)")
