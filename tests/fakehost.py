"""Run a role (a pyinfra @deploy function) against fake facts, without a host, and collect what it would run.

pyinfra's own tests do the same for single operations (a fake State/Host with fake facts, the commands an
operation yields compared with a fixture). Here the state is pyinfra's real one, in API mode, over an inventory of
one host whose connector is never used: `host.get_fact` answers from the `facts` given (by fact class or its name;
a value, a FactsBy table, or a callable of the fact's keyword arguments; DEBIAN_12 below for pyinfra's own facts),
and every fact asked for is recorded (`ops.asked`). Each operation the role added is then generated, as pyinfra
does before it executes, into its name and its commands (nothing is connected to or executed).

    ops = run_role(secrets.configure_secrets, secrets="k", service="sglang", user="sglang",
                   facts={Sha256File: None})
    ops.named("Secrets").commands
    -> ["install -m 600 /dev/null /etc/sglang-deploy/sglang/secrets.yaml", "upload /etc/sglang-deploy/...", ...]

Limits: facts that the role reads through `host.run_shell_command` (python.call callbacks such as release._report)
are not run, only named (`call _report`); host data comes from `data` (the inventory's), not group_data/.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra.api import Config, Inventory, State
from pyinfra.api.facts import ShortFactBase
from pyinfra.api.command import FileDownloadCommand, FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.context import ctx_host, ctx_inventory, ctx_state

MISSING = object()

# A Debian 12 host on x86_64, SSH user root (LinuxDistribution as the fact parses this machine's /etc/os-release):
# what pyinfra's own operations ask of every host. A role's `facts` override these.
DEBIAN_12 = {
    "Os": "Linux", "Kernel": "Linux", "Arch": "x86_64", "Home": "/root", "User": "root",
    "LinuxDistribution": {"name": "Debian", "major": 12, "minor": None, "release_meta": {
        "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "NAME": "Debian GNU/Linux", "VERSION_ID": "12",
        "VERSION": "12 (bookworm)", "VERSION_CODENAME": "bookworm", "ID": "debian", "CODENAME": "bookworm"}},
    "Which": lambda command: {"useradd": "/usr/sbin/useradd", "usermod": "/usr/sbin/usermod",
                              "groupadd": "/usr/sbin/groupadd", "systemctl": "/usr/bin/systemctl",
                              "python3": "/usr/bin/python3", "apt-get": "/usr/bin/apt-get"}.get(command),
}


@dataclass
class Op:
    name: str
    commands: list[str]
    raw: list = field(repr=False, default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.commands)


class Ops(list):
    """The operations a role added, in order."""

    @property
    def names(self) -> list[str]:
        return [op.name for op in self]

    def named(self, part: str) -> Op:
        found = [op for op in self if part in op.name]
        assert len(found) == 1, f"{len(found)} operations named like {part!r}: {self.names}"
        return found[0]

    @property
    def commands(self) -> list[str]:
        return [command for op in self for command in op.commands]

    asked: list  # set by run_role: the facts the role and its operations read, as (name, kwargs)


def command_text(command) -> str:
    """A command as a line of text: shell commands as pyinfra would send them (secrets masked), uploads and
    downloads as `upload <dest>` / `download <src>`, python callbacks as `call <function name>`."""
    if isinstance(command, StringCommand):
        return command.get_masked_value()
    if isinstance(command, FileUploadCommand):
        return f"upload {command.dest}"
    if isinstance(command, FileDownloadCommand):
        return f"download {command.src}"
    if isinstance(command, FunctionCommand):
        return f"call {getattr(command.function, '__name__', command.function)}"
    return str(command)


def _answer(facts: dict, cls, kwargs: dict):
    """facts[cls]: a value for every call; or a dict by one keyword argument's value (path=..., command=...),
    or a callable taking the fact's keyword arguments. A fact not given answers its default, as pyinfra's does for a
    host that printed nothing (None for most: a file that does not exist; [] or {} for listings)."""
    value = facts.get(cls, facts.get(cls.__name__, MISSING))
    if value is MISSING and issubclass(cls, ShortFactBase):  # derived from another fact (LinuxName: LinuxDistribution)
        return cls().process_data(_answer(facts, cls.fact, kwargs))
    if value is MISSING:
        return cls().default()
    if callable(value) and not isinstance(value, type):
        return value(**kwargs)
    if isinstance(value, FactsBy):
        return value.get(kwargs)
    return value


class FactsBy(dict):
    """A fact's answers by the value of one of its keyword arguments: FactsBy("path", {"/a": ..., "/b": ...})."""

    def __init__(self, key: str, answers: dict, default=None):
        super().__init__(answers)
        self.key, self.default = key, default

    def get(self, kwargs):  # type: ignore[override]
        return super().get(kwargs.get(self.key), self.default)


def run_role(role, *args, facts: dict | None = None, data: dict | None = None, diff: bool = False,
             **kwargs) -> Ops:
    """Call `role(*args, **kwargs)` (a @deploy function, or an operation) on a fake host; the operations it adds,
    each with its commands generated against `facts`. data: the host's inventory data."""
    facts = {**DEBIAN_12, **(facts or {})}
    inventory = Inventory((["fakehost"], dict(data or {})))
    host = inventory.get_host("fakehost")
    state = State(inventory, Config())
    state.config.DIFF = diff
    asked: list = []

    def get_fact(cls, *fact_args, **fact_kwargs):
        fact_kwargs = {key: value for key, value in fact_kwargs.items() if not key.startswith("_")}
        asked.append((cls.__name__, fact_kwargs))
        return _answer(facts, cls, fact_kwargs)

    host.get_fact = get_fact  # type: ignore[method-assign]
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_host.use(host):
        role(*args, **kwargs)
        ops = Ops()
        for op_hash in host.op_hash_order:
            names = sorted(state.get_op_meta(op_hash).names)
            raw = list(state.get_op_data_for_host(host, op_hash).command_generator())
            ops.append(Op(names[0] if names else op_hash, [command_text(c) for c in raw], raw))
    ops.asked = asked
    return ops


FACT_FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "facts"


def fixture_fact(fact: str, case: str):
    """The parsed fact of tests/fixtures/facts/<fact>/<case>.json (what the role decides from)."""
    import json

    return json.loads((FACT_FIXTURES / fact / f"{case}.json").read_text())["fact"]
