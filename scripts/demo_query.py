"""Demo step: ask the deployed (simulated) server for a completion over SSH and print what it measured."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: testbed/
from testbed.simhost import SimHost  # noqa: E402

host = SimHost()
request = json.dumps({"text": "Explain CUDA graphs in one paragraph.",
                      "sampling_params": {"max_new_tokens": 128, "temperature": 0, "ignore_eos": True}})
command = ("key=$(sed -n 's/^api-key: \"\\(.*\\)\"$/\\1/p' /etc/sglang-deploy/sglang/secrets.yaml); "
           f"curl -sf -H \"Authorization: Bearer $key\" -H \"Content-Type: application/json\" "
           f"http://127.0.0.1:30000/generate -d '{request}'")
print(host.ssh("systemctl --no-pager --lines=0 status sglang | head -3").stdout, end="")
result = host.ssh(command, check=False)
if result.returncode != 0:
    sys.exit(f"the server did not answer /generate: {result.stderr}")
meta = json.loads(result.stdout)["meta_info"]
decode = (meta["completion_tokens"] - 1) / (meta["e2e_latency"] - meta["first_token_latency"])
print(f"generated {meta['completion_tokens']} tokens in {meta['e2e_latency']:.2f} s: {decode:.1f} tok/s decode, "
      f"acceptance length {meta['spec_accept_length']:.2f}")
processes = host.ssh("ps -o args= -u sglang | grep -o '^sglang::[a-zA-Z_0-9]*' | tr '\\n' ' '", check=False).stdout
print(f"SIMULATED host: SGLang 0.5.23's own sglang serve ({processes.strip()}), its Scheduler modelled "
      "(sglang_deploy/sim/sglang_scheduler.py)")
