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
