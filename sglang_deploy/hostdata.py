"""Reading the inventory's host data (a mapping; `--data key=value` values arrive as strings)."""


def get(data, key, default=None):
    value = data.get(key) if hasattr(data, "get") else None
    return default if value is None else value


def host_flag(data, name: str, default: bool = False) -> bool:
    """A yes/no host setting; `--data name=false` arrives as the string "false", not False."""
    value = get(data, name)
    if value is None:
        return default
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def origin(data, key: str, argv: list[str] | None = None) -> str:
    """Where a host data value was set, for error messages: `--data`, or FILE:LINE of the inventory or
    group data file that sets it (the first one found, in pyinfra's precedence)."""
    import re
    import sys
    from pathlib import Path

    argv = sys.argv if argv is None else argv
    for position, arg in enumerate(argv):
        value = argv[position + 1] if arg == "--data" and position + 1 < len(argv) else arg.removeprefix("--data=")
        if (arg == "--data" or arg.startswith("--data=")) and value.split("=", 1)[0] == key:
            return "--data"
    root = Path(__file__).resolve().parent.parent
    candidates = [Path(a) for a in argv[1:] if a.endswith(".py") and "inventory" in Path(a).parts]
    candidates += [Path("group_data/all.py"), root / "group_data" / "all.py"]
    patterns = (re.compile(rf"""["']{re.escape(key)}["']\s*:"""), re.compile(rf"^{re.escape(key)}\s*="))
    for path in candidates:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if any(pattern.search(line) for pattern in patterns):
                return f"{path}:{number}"
    return "host data"
