# Defaults for every host; a host's own data in inventory/*.py wins, `--data key=value` wins over both.

# Serving profile (profiles/*.yaml) deployed to the host.
profile = "profiles/qwen3.6-27b-mtp-2xa6000.yaml"
# GPUs and interconnect the profile is checked against (--tp-size, NCCL rules).
gpus = None
gpu_topology = None  # "pcie" or "nvlink"
# The API key: read from this file (mode 0600, relative to the repository) or this controller env variable.
api_key_file = None
api_key_env = "SGLANG_DEPLOY_API_KEY"
# Deploy without the throughput gate (the release is marked good once ready). For emergencies.
skip_gate = False
# Releases kept on the host, and automatic rollbacks in a row before deploys are refused.
keep_releases = 5
max_auto_rollbacks = 3
# True only for the simulated CT129 (the host must carry /etc/sglang-deploy-simulated).
simulated = False
