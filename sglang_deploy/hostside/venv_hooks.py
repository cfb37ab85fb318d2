"""A release venv read from outside: its SGLang version and the startup hooks its wheels installed, without
starting its python (security review 3, finding 3). Standard library only; root runs it with the system python.

    python3 -I -m hostside.venv_hooks --venv V [--waived]

Every `*.pth` file in site-packages runs when the venv's python starts (site.py executes its `import` lines), and so
does a `sitecustomize`/`usercustomize` module: a wheel that carries one runs code in every process of the venv, root's
included. Accepted: the few hooks of the real SGLang install set, each from the distribution that installs it
(its RECORD) with the bytes that RECORD names. Anything else is a refusal naming the wheel and the file, unless the
profile waives `venv-startup-hook`. Prints JSON {"sglang": version or null, "site": dir, "problems": [...]}; exit 1
when a hook is refused.
"""

import argparse
import base64
import csv
import glob
import hashlib
import json
import os
import sys

# name -> the distribution whose RECORD must list it, alone, with the file's sha256. The hooks of the reviewed
# releases' whole install sets (releases/<version>/hooks.json, the union: tests/test_release_data.py); `python3 -m venv`
# and `uv venv` write none. In code because this program runs alone with the system python (no package data).
ALLOWED_PTH = {
    "distutils-precedence.pth": "setuptools",  # setuptools' distutils shim (SETUPTOOLS_USE_DISTUTILS)
}
HOOK_MODULES = ("sitecustomize", "usercustomize")  # imported by site.py at every start
RULE = "venv-startup-hook"


def site_dirs(venv):
    return sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))


def _dist_name(dist_info):
    base = os.path.basename(dist_info)[:-len(".dist-info")]
    name, _, version = base.partition("-")
    return name.replace("_", "-").replace(".", "-").lower(), version


def owners(site):
    """{file path relative to site: [(distribution, version, sha256 digest or None)]} from every RECORD."""
    found = {}
    for dist_info in glob.glob(os.path.join(site, "*.dist-info")):
        name, version = _dist_name(dist_info)
        try:
            with open(os.path.join(dist_info, "RECORD"), newline="") as handle:
                rows = list(csv.reader(handle))
        except (OSError, csv.Error):
            continue
        for row in rows:
            if not row:
                continue
            path = os.path.normpath(row[0])
            digest = row[1][len("sha256="):] if len(row) > 1 and row[1].startswith("sha256=") else None
            found.setdefault(path, []).append((name, version, digest))
    return found


def _digest(path):
    with open(path, "rb") as handle:
        return base64.urlsafe_b64encode(hashlib.sha256(handle.read()).digest()).rstrip(b"=").decode()


def hook_problems(site):
    """Each startup hook in one site-packages directory that is not on the reviewed list, as a sentence naming the
    file and the wheel(s) that installed it. Empty: nothing runs at start but the reviewed hooks."""
    listed = owners(site)
    problems = []
    for entry in sorted(os.listdir(site)):
        path = os.path.join(site, entry)
        module = entry[:-3] if entry.endswith(".py") else entry if os.path.isdir(path) else None
        if not entry.endswith(".pth") and module not in HOOK_MODULES:
            continue
        by = listed.get(entry) or listed.get(os.path.join(entry, "__init__.py")) or []
        wheels = ", ".join(f"{name} {version}" for name, version, _ in by) or "no wheel's RECORD"
        if entry in ALLOWED_PTH and not os.path.islink(path) and os.path.isfile(path) \
                and [name for name, _, _ in by] == [ALLOWED_PTH[entry]] and by[0][2] == _digest(path):
            continue
        kind = "a .pth file" if entry.endswith(".pth") else f"a {module} module"
        accepted = ", ".join(f"{name} of {owner}" for name, owner in ALLOWED_PTH.items())
        problems.append(f"{os.path.join(site, entry)}: {kind} from {wheels} runs code whenever the venv's python "
                        f"starts (root's too); accepted: {accepted}, with the bytes its RECORD names; waive the rule "
                        f"with `waivers: {{{RULE}: <reason>}}` in the profile")
    return problems


def sglang_version(site):
    """The installed SGLang's version from its dist-info (read, not imported)."""
    for dist_info in glob.glob(os.path.join(site, "sglang-*.dist-info")):
        name, version = _dist_name(dist_info)
        if name == "sglang" and os.path.isfile(os.path.join(dist_info, "METADATA")):
            return version
    return None


def read(venv):
    sites = site_dirs(venv)
    problems = [problem for site in sites for problem in hook_problems(site)]
    version = next((v for v in map(sglang_version, sites) if v), None)
    return {"sglang": version, "site": sites[0] if sites else None, "problems": problems}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hostside.venv_hooks")
    parser.add_argument("--venv", required=True)
    parser.add_argument("--waived", action="store_true", help="the profile waives venv-startup-hook: report only")
    args = parser.parse_args(argv)
    found = read(args.venv)
    print(json.dumps(found))
    if found["problems"] and not args.waived:
        for problem in found["problems"]:
            print(f"refused: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
