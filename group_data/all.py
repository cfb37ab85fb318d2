# Defaults for every host; a host's own data in inventory/*.py wins, `--data key=value` wins over both.

# Serving profile (profiles/*.yaml) deployed to the host.
profile = "profiles/qwen3.6-27b-mtp-2xa6000.yaml"
# The GPU count the profile is checked against (--tp-size); a real host's own report must not contradict it.
gpus = None
gpu_topology = None  # the GPU interconnect, "pcie" or "nvlink", for the NCCL rules
# The GPU model whose facts SGLang's resolution is run under (sglang_deploy/gpu_facts.py: a6000, h100, ...) where
# the host's nvidia-smi cannot say; a host that reports its GPUs is resolved under what it reports.
gpu_model = "a6000"
# The API key: read from this file (mode 0600, relative to the repository), else from api_key_env.
api_key_file = None
api_key_env = "SGLANG_DEPLOY_API_KEY"  # the controller environment variable holding the API key
# Deploy without the throughput gate (the release is marked good once ready). For emergencies.
skip_gate = False
# Before a switch, the preflight runs the release's server checks on the host under the release's own sandbox
# (hostside/preflight.py). True skips it: for emergencies only, and recorded in the release.
skip_preflight = False
# False leaves out the preflight's steps that import SGLang's stack: its resolution on the host, and on a simulated
# host the torch step (the controller's check ran SGLang's whole resolution already; the test suite's simulated hosts,
# whose SGLang install is the controller's, skip them outside the modules that test them, to save CPU per deploy).
preflight_stack = True
# The host's Proxmox CT id, for the fixes the preflight and facts.py --proxmox print (`pct set <id> ...`).
container_id = None
keep_releases = 5  # releases kept on the host (the active and the last good one are never pruned)
max_auto_rollbacks = 3  # automatic rollbacks in a row before deploys are refused (force=true overrides)
# True only for the simulated CT129 (the host must carry /etc/sglang-deploy-simulated).
simulated = False
# On a simulated host, what runs behind <venv>/bin/sglang serve: "sglang" (SGLang's own front end, resolution and
# processes with a modelled Scheduler; about 25 s to start, 4 GB) or "model" (the model-only simulator: 3 s, 0.1 GB).
sim_server = "sglang"

# --- provisioning (real hosts; skipped on the simulated one) ---
# install: install what is missing; verify: change nothing, fail with what would have to change.
provision_mode = "install"
provision = True  # deploy.py provisions real hosts (driver, CUDA, NCCL, venv); False: the host is prepared already
# The pinned SGLang (0.5.23) is built for CUDA 13, which needs the R580 driver branch.
cuda_major = 13
cuda_version = "13.0"  # the CUDA toolkit installed (/usr/local/cuda-<version>, the unit's CUDA_HOME)
driver_branch = 580  # the NVIDIA driver branch installed or required (R580 for CUDA 13)
nccl_version = None  # pin the system libnccl2 (e.g. "2.28.3"); PyTorch in the venv brings its own NCCL
nccl_package_version = "{version}-1+cuda{cuda}"  # NVIDIA's Debian version of a libnccl2 pin
# In a container: the user-space driver packages installed at exactly the host kernel module's version.
# None: by distribution (Debian: libcuda1 libnvidia-ml1 nvidia-smi; Ubuntu: libnvidia-compute-{branch}
# nvidia-utils-{branch}). The version is an apt glob: the module's version, any packaging revision.
driver_userspace_packages = None
driver_package_version = "{version}-*"  # apt version glob of those packages ({version}: the kernel module's)
# NVIDIA's CUDA apt repository (point these at a mirror for air-gapped hosts; the key may be a local file).
# {distro} and {arch} are the host's (debian12, ubuntu2404; x86_64, sbsa).
cuda_repo_url = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/"
cuda_repo_key_url = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/3bf863cc.pub"  # its signing key
cuda_repo_origin = "developer.download.nvidia.com"  # the host (apt "origin") whose packages are pinned at priority 600, above the distribution's
# A local directory of wheels for an offline Python env install (GPU hosts are often firewalled).
wheelhouse = None
# The python whose torch reports the NCCL it loads (default: the profile's venv in deploy.py, else python3).
verify_python = None

# --- model weights (profiles with model.source) ---
# An HF-compatible endpoint to fetch hf:// sources from (a mirror for air-gapped hosts; None: the Hub). https only
# (plain http only on loopback, for a test Hub). Host data only: a profile never names an endpoint.
hf_endpoint = None
# The python whose huggingface_hub fetches the weights on the host (default: the release's venv on GPU hosts,
# /opt/sglang-deploy/hub-client/bin/python on the simulated one).
hub_python = None
# A controller directory of wheels (huggingface_hub and its dependencies) for that small venv, offline.
hub_wheelhouse = None
# A file ON THE HOST holding a Hugging Face token (root-only), for gated or private repositories (HF_TOKEN_PATH).
hf_token_file = None
# The one endpoint the token of hf_token_file may go to (None: the Hub, https://huggingface.co); a deploy whose
# hf_endpoint is another one is refused, so a changed endpoint never receives the token unnoticed.
hf_token_endpoint = None

# --- per-host overrides of the profile (None: the profile's value) ---
port = None  # the server's port (the profile's service.port)
service = None  # the unit's name, for verbs that run without a profile (rollback.py, releases.py, doctor.py)

# --- switches of single runs (usually given as --data key=value) ---
force = False  # deploy although automatic rollbacks in a row reached max_auto_rollbacks
release = None  # rollback.py: the retained release to go back to (default: the previous good one)
probe = False  # doctor.py: also run the GPU probe (memory bandwidth, all-reduce) with the release's venv
probe_force = False  # doctor.py: run the probe even while the GPUs are in use
skip_python_env = False  # provision.py: the NVIDIA stack only, not the profile's virtualenv
python = "python3"  # facts.py: the python whose torch reports the CUDA and NCCL it loads
fleet_summary = None  # releases.py: also write the fleet summary as JSON to this file

# --- fleets: multi-node servers and the router (inventory groups) ---
node_group = "nodes"  # the inventory group of a multi-node profile's hosts, rank 0 first
worker_address = None  # the address other hosts reach this one at (default: ssh_hostname, else the host name)
nccl_socket_ifname = None  # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME of a multi-node server (default: the profile's)
router_bind = "127.0.0.1"  # the router's listening address (an IP literal)
router_policy = "cache_aware"  # sglang-router's load-balancing policy
router_workers = "fleet"  # the inventory group whose servers the router sends requests to
router_port = 30080  # the router's port
router_health_interval_s = 10  # seconds between the router's health checks of each worker
router_health_failures = 3  # failed health checks before the router takes a worker out
router_gate = False  # router.py: also measure the fleet's gate through the router (the workers' floors)

# --- tune.py (find the fastest valid profile on the host; README "Tune") ---
tune_space = "spec,drafter"  # what to search: spec, drafter, graphs, nccl, all, or a comma list
tune_budget_s = 3600  # the tune's time budget in seconds (candidates that would not fit are not started)
tune_repeats = 3  # repeats per candidate (at least 3): the score is median - 1.4826 x MAD over them
tune_samples = 6  # single-stream requests per repeat (the gate's 6 prompts, each once)
tune_max_new_tokens = 128  # tokens per request
tune_concurrency = None  # streams of the aggregate round (None: the profile's gate.concurrency)
tune_heartbeat_s = 30  # the host restores the original release when the controller is silent this long
tune_steps = "1-6"  # speculative steps to try
tune_topk = "1,2,4"  # eagle-topk values to try (draft tokens follow)
tune_resume = True  # reuse the measurements saved by an interrupted tune of the same profile
tune_min_aggregate = 0.95  # the winner's aggregate throughput must stay >= this share of the original's
tune_noise_pct = 5.0  # a candidate whose repeats spread more than this (% of the median) is rejected as noisy
tune_min_gain_pct = 2.0  # a change must gain at least this much over the original to be written
