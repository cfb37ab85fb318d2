# The site's defaults for every host: a host's own data in inventory/*.py wins, `--data key=value` wins over both.
# Set here only what this site chooses for all its hosts. Every key the tool reads, with its type, what it
# accepts and the tool's own default, is in docs/settings.md (generated from sglang_deploy/settings.py).

# The serving profile (profiles/*.yaml) deployed to a host that names none.
profile = "profiles/qwen3.6-27b-mtp-2xa6000.yaml"
