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

# --- provisioning (real hosts; skipped on the simulated one) ---
# install: install what is missing; verify: change nothing, fail with what would have to change.
provision_mode = "install"
provision = True
# The pinned SGLang (0.5.23) is built for CUDA 13, which needs the R580 driver branch.
cuda_major = 13
cuda_version = "13.0"
driver_branch = 580
nccl_version = None  # pin the system libnccl2 (e.g. "2.28.3"); PyTorch in the venv brings its own NCCL
nccl_package_version = "{version}-1+cuda{cuda}"  # NVIDIA's Debian version of a libnccl2 pin
# In a container: the user-space driver packages installed at exactly the host kernel module's version.
# None: by distribution (Debian: libcuda1 libnvidia-ml1 nvidia-smi; Ubuntu: libnvidia-compute-{branch}
# nvidia-utils-{branch}). The version is an apt glob: the module's version, any packaging revision.
driver_userspace_packages = None
driver_package_version = "{version}-*"
# NVIDIA's CUDA apt repository (point these at a mirror for air-gapped hosts; the key may be a local file).
# {distro} and {arch} are the host's (debian12, ubuntu2404; x86_64, sbsa).
cuda_repo_url = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/"
cuda_repo_key_url = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/3bf863cc.pub"
cuda_repo_origin = "developer.download.nvidia.com"
# A local directory of wheels for an offline Python env install (GPU hosts are often firewalled).
wheelhouse = None
# The python whose torch reports the NCCL it loads (default: the profile's venv in deploy.py, else python3).
verify_python = None

# --- model weights (profiles with model.source) ---
# An HF-compatible endpoint to fetch hf:// sources from (a mirror for air-gapped hosts); wins over model.mirror.
hf_endpoint = None
# The python whose huggingface_hub fetches the weights on the host (default: the release's venv on GPU hosts,
# /opt/sglang-deploy/hub-client/bin/python on the simulated one).
hub_python = None
# A controller directory of wheels (huggingface_hub and its dependencies) for that small venv, offline.
hub_wheelhouse = None
# A file ON THE HOST holding a Hugging Face token (root-only), for gated or private repositories (HF_TOKEN_PATH).
hf_token_file = None
