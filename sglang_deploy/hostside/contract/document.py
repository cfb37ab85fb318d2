"""The typed seam's mechanism: `Document`, the strict reader every document of the release store and every host
program's answer is read with. The documents are filed by where they live (this package: release.py, gate.py,
findings.py, store.py, switch.py, session.py, answers.py, ...). A field annotated with a document's name reads as
that document; the module that defines it is imported by the module whose field names it, so every class a read can
meet is registered before the read.

The reader is tolerant of releases already on hosts and strict about everything else: a missing required field, an
unknown field, a value of the wrong type or a newer format is a DocumentError naming the document and the field.
A renamed floor (min_decode_tok_s) fails there; it never reads as None, which would mean "no floor". Each document
says once: its file name (FILE: a path in paths.py's table, or the program whose answer it is), its fields and, only
where a missing value is safe, their defaults (a field without a default is required), its format version (FORMAT,
written as "format" in the file; a document without one is format 1), and the fields earlier versions wrote that are
read and dropped (RETIRED).

Standard library only: shipped to the host with the rest of the package.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import ClassVar

_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "dict": (dict,), "list": (list,),
          "None": (type(None),)}


_DOCUMENTS = {}  # every Document subclass by name (Document.__init_subclass__)

# How every document class is declared: a frozen dataclass whose equality, hash and repr are Document's own, written
# once below, so that the dataclass machinery generates three methods per class instead of six (each one an exec):
# the contract's 76 classes import in 30 ms instead of 45 (controller, `time.process_time`, best of 15, 2026-12-06),
# and a no-op deploy's host program loads 51 of them.
document = dataclass(frozen=True, eq=False, repr=False)


class DocumentError(ValueError):
    """A store document that cannot be read as its type: the message names the document (and field)."""


@document
class Document:
    FILE: ClassVar[str] = ""
    FORMAT: ClassVar[int] = 1
    RETIRED: ClassVar[frozenset] = frozenset()
    OTHERS: ClassVar[bool] = False  # True: fields other than these are another reader's, dropped (ProfileSnapshot)
    KEYS: ClassVar[dict] = {}  # attribute -> its key in the file, where the key is not a Python name ("from")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _DOCUMENTS[cls.__name__] = cls  # a field annotated with a document's name reads as that document

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)

    def __eq__(self, other):  # as dataclass(eq=True) writes it for each class
        return self._compared() == other._compared() if other.__class__ is self.__class__ else NotImplemented

    def __hash__(self):  # as dataclass(frozen=True, eq=True) writes it: unhashable where a field is (a list)
        return hash(self._compared())

    def __repr__(self):
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
        return f"{type(self).__qualname__}({', '.join(shown)})"

    @classmethod
    def field_names(cls) -> set:
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, data, source=None):
        """The strict reader (source: the file, for messages; default the document's file name)."""
        name = source or cls.FILE or cls.__name__
        if not isinstance(data, dict):
            raise DocumentError(f"{name}: not a JSON object ({type(data).__name__})")
        data = dict(data)
        version = data.pop("format", 1) if cls.FILE else 1  # a part of a document has no format of its own
        if type(version) is not int or version < 1 or version > cls.FORMAT:
            raise DocumentError(f"{name}: format {version!r} is not one this sglang-deploy reads (1 to {cls.FORMAT});"
                                " deploy with the tool that wrote it, or a newer one")
        known = {cls.KEYS.get(f.name, f.name): f for f in dataclasses.fields(cls)}  # by the key in the file
        unknown = sorted(set(data) - set(known) - cls.RETIRED)
        if cls.OTHERS:  # the parts the host does not read (their validator is the controller's): left out
            data, unknown = {key: value for key, value in data.items() if key in known}, []
        if unknown:
            raise DocumentError(f"{name}: unknown field {unknown[0]!r} ({cls.__name__} has: {', '.join(sorted(known))})")
        values = {}
        for key, spec in known.items():
            if key not in data:
                if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                    raise DocumentError(f"{name}: required field {key!r} is missing")
                continue
            values[spec.name] = _typed(name, key, spec.type, data[key])
        return cls(**values)

    def to_dict(self) -> dict:
        return {self.KEYS.get(key, key): _plain(value)
                for key, value in ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))}

    def dump(self) -> str:
        """The file's text: the fields and the format version."""
        return json.dumps({"format": self.FORMAT, **self.to_dict()}, indent=1) + "\n"

    @classmethod
    def loads(cls, text, source=None):
        try:
            data = json.loads(text)
        except ValueError as error:
            raise DocumentError(f"{source or cls.FILE}: not JSON ({error})") from None
        return cls.from_dict(data, source)

    @classmethod
    def load(cls, directory):
        """Read FILE in a directory (a release's, or the store root); FileNotFoundError when it is not there."""
        path = os.path.join(directory, cls.FILE)
        with open(path) as f:
            text = f.read()
        return cls.loads(text, path)

    def but(self, **changes):
        return dataclasses.replace(self, **changes)


def line(answer: Document) -> str:
    """The answer as one JSON line with its format: what a host program prints for a reader of its output's last line
    (answers.py, session.py)."""
    return json.dumps({"format": answer.FORMAT, **answer.to_dict()})


def _plain(value):
    if isinstance(value, Document):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _typed(name, key, annotation, value):
    """value, checked against the field's annotation ("float | None", "GateSettings", "list[SnapshotMark]", ...)."""
    kinds = [part.strip() for part in str(annotation).split("|")]
    for kind in kinds:
        if kind.startswith("list[") and isinstance(value, list):  # a list of documents: each one read as it
            return [_typed(name, f"{key}[{index}]", kind[5:-1], item) for index, item in enumerate(value)]
        document = _DOCUMENTS.get(kind)
        if document is not None and isinstance(value, dict):
            return document.from_dict(value, f"{name} {key}")
        accepted = _TYPES.get(kind, ())
        if isinstance(value, accepted) and not (isinstance(value, bool) and kind in ("int", "float")):
            return value
    raise DocumentError(f"{name}: field {key!r} is {value!r}; accepted: {' or '.join(kinds)}")
