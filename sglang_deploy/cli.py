"""The `sglang-deploy` command: checks that need no host, and the fleet's rollout (rollout.py)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .drafter import config_copy
from .token_map.file import DEFAULT_DIR, TokenMapError
from .validate.gpu_facts import DEFAULT_MODEL, KNOWN, GpuFactsError, from_host_gpus, model
from .hostfacts import detected_hardware
from .plan import PlanError, reconcile_hardware
from .profile import ProfileError, load_profile
from .rollout import add_parser as add_rollout
from .validate.check import TOPOLOGIES, check_profile
from .validate.token_counter import build
from .validate.validator_env import ValidatorEnvError
from .weights import (REPO_ROOT, WeightsSourceError, default_manifest_path, manifest_from_directory, manifest_from_hub,
                      parse_source, resolve_manifest_path, write_manifest)


def hardware_for_check(args: argparse.Namespace) -> tuple[int | None, str | None]:
    """--gpus/--topology, or what a host reported (facts.py's JSON); a contradiction is an error. Sets
    args.gpu to the GPU model SGLang's resolution runs under (--gpu-model, the facts' GPUs, else the A6000)."""
    args.gpu = model(args.gpu_model or DEFAULT_MODEL)
    if not args.facts:
        return args.gpus, args.topology
    try:
        facts = json.loads(Path(args.facts).read_text())
        detected = detected_hardware(facts)
    except (OSError, ValueError, AttributeError, TypeError) as error:
        raise PlanError(f"--facts {args.facts}: not a facts file written by facts.py ({error})") from None
    gpus, topology, notes = reconcile_hardware({"gpus": args.gpus, "gpu_topology": args.topology}, detected,
                                               declared_by="the command line",
                                               labels={"gpus": "--gpus", "gpu_topology": "--topology"})
    for note in notes:
        print(f"  {note} ({args.facts})")
    try:
        reported = from_host_gpus(facts.get("gpus") or [])
    except GpuFactsError as error:
        raise PlanError(f"--facts {args.facts}: {error}") from None
    if reported is not None and args.gpu_model and reported.key != args.gpu_model:
        raise PlanError(f"--gpu-model {args.gpu_model} but {args.facts} reports {reported.name}; leave out --gpu-model")
    if reported is not None:
        args.gpu = reported
    return gpus, topology


def stand_in_node(profile):
    """A multi-node profile is checked with the node flags a deploy adds (rank 0's), not as one host's server."""
    if profile.nodes == 1:
        return None
    # deferred: 1.4 ms (multinode) on sglang-deploy check, for a multi-node profile only
    from .multinode import Node

    return Node(rank=0, nnodes=profile.nodes, dist_init_addr=f"127.0.0.1:{profile.multinode.dist_init_port}",
                socket_ifname=profile.multinode.socket_ifname)


def cmd_check(args: argparse.Namespace) -> int:
    try:
        gpus, topology = hardware_for_check(args)
    except PlanError as error:
        print(f"sglang-deploy: error: {error}", file=sys.stderr)
        return 2
    try:
        profile = load_profile(args.profile)
        node = stand_in_node(profile)
        if node is not None:
            print(f"  nodes: {profile.nodes}: checked as rank 0 ({' '.join(node.args())}; 127.0.0.1 stands in for "
                  "rank 0's address, which the inventory gives)")
        report = check_profile(profile, gpus=gpus, topology=topology, path=args.path, node=node, gpu=args.gpu)
    except ProfileError as error:
        print("\n".join(error.problems), file=sys.stderr)
        print(f"INVALID: {args.profile}", file=sys.stderr)
        return 1
    except ValidatorEnvError as error:
        print(f"sglang-deploy: error: {error}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(line, file=sys.stderr)
    for line in report.warning_lines():
        print(line, file=sys.stderr)
    for skipped in report.skipped:
        print(f"  skipped: {skipped}")
    if not report.ok:
        print(f"INVALID: {args.profile} ({len(report.problems)} problem(s))", file=sys.stderr)
        return 1
    how = (f"parser and whole resolution, {report.resolution['gpu']['count']}x {report.resolution['gpu']['model']}"
           if report.path == "full"
           else "option table exported from its parser (light: no resolution)")
    print(f"OK: {args.profile} (SGLang {profile.sglang.version} {how}, and the tool's rules)")
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    """Write the frozen manifest of a weights source: from the Hub's metadata (huggingface_hub's API; files stored
    without LFS are downloaded and hashed) or from a local directory (every file hashed)."""
    scratch = Path(tempfile.mkdtemp(prefix="sglang-deploy-manifest-")) / "config.json"
    try:
        source = parse_source(args.source, allow_branch=True)
        if source.kind == "hf":
            manifest = manifest_from_hub(source.repo, source.revision, endpoint=args.endpoint, config_out=scratch)
            pinned = parse_source(manifest["source"])
        else:
            manifest = manifest_from_directory(Path(source.local_dir))
            pinned = source
            if (Path(source.local_dir) / "config.json").is_file():
                shutil.copyfile(Path(source.local_dir) / "config.json", scratch)
    except WeightsSourceError as error:
        shutil.rmtree(scratch.parent, ignore_errors=True)
        print(f"sglang-deploy: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - the Hub client's errors (network, 404, auth) end the command
        shutil.rmtree(scratch.parent, ignore_errors=True)
        print(f"sglang-deploy: error: {args.source}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else resolve_manifest_path(default_manifest_path(pinned))
    write_manifest(manifest, output)
    print(f"wrote {output}: {len(manifest['files'])} files, {manifest['total_bytes']} bytes")
    if scratch.exists():  # SGLang's resolution reads it (model.config, a draft's block size): reviewed with the manifest
        shutil.copyfile(scratch, config_copy(output))
        print(f"wrote {config_copy(output)}: the snapshot's config.json")
    shutil.rmtree(scratch.parent, ignore_errors=True)
    if source.kind == "hf" and source.revision != pinned.revision:
        print(f"{args.source} resolves to commit {pinned.revision}")
    print(f"profile:\n  model:\n    source: {pinned.text}" + (f"\n    manifest: {args.output}" if args.output else ""))
    return 0


def cmd_token_map(args: argparse.Namespace) -> int:
    """Build the hot-vocabulary map SGLang's --speculative-token-map reads (validate/token_counter.py), with its frozen digest."""
    model_dir = Path(args.model)
    output = Path(args.output) if args.output else DEFAULT_DIR / f"{model_dir.resolve().name}-{args.size}.pt"
    try:
        result = build(Path(args.corpus), model_dir, args.size, output, args.sglang_version)
    except (TokenMapError, ValidatorEnvError) as error:
        print(f"sglang-deploy: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {result['path']}: the {result['size']} most frequent of {result['distinct']} distinct token ids "
          f"({result['tokens']} tokens in {result['prompts']} prompts; vocabulary {result['vocab_size']})")
    print(f"wrote {result['path']}.sha256: sha256 {result['sha256']}")
    shown = os.path.relpath(result["path"], REPO_ROOT) if result["path"].startswith(str(REPO_ROOT) + "/") \
        else result["path"]
    print(f"profile (the release's map; or under tune.token_maps, a candidate of the tune's vocab axis):\n"
          f"  speculative:\n    token_map:\n      file: {shown}\n      sha256: \"{result['sha256']}\"")
    return 0


def cmd_sglang_add(args: argparse.Namespace) -> int:
    # deferred: 7.7 ms (validate.add) on every sglang-deploy command, for sglang-add only
    from .validate import add as release_add

    return release_add.main(args)


def cmd_proxmox_config(args: argparse.Namespace) -> int:
    """The Proxmox CT configuration a host needs, from the facts facts.py saved (results/<host>/facts.json)."""
    # deferred: 8.4 ms (container) on every sglang-deploy command, for proxmox-config only
    from .container import proxmox_config, proxmox_notes

    try:
        facts = json.loads(Path(args.facts).read_text())
    except (OSError, ValueError) as error:
        print(f"sglang-deploy: error: {args.facts}: {error} (facts.py writes results/<host>/facts.json)", file=sys.stderr)
        return 1
    if "lxc" not in facts:
        print(f"sglang-deploy: error: {args.facts}: no container facts in it; run facts.py again with this version",
              file=sys.stderr)
        return 1
    # The commands alone on stdout (`> ct129.sh` gives a clean script); why, and the alternatives, on stderr.
    print(proxmox_notes(facts, args.container_id, args.gpus), file=sys.stderr)
    print(proxmox_config(facts, args.container_id, args.gpus))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-deploy", allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a profile without any host", allow_abbrev=False)
    check.add_argument("profile")
    check.add_argument("--gpus", type=int, help="GPU count of the target host (checks --tp-size)")
    check.add_argument("--topology", choices=TOPOLOGIES, help="GPU interconnect of the target host (NCCL rules)")
    check.add_argument("--gpu-model", choices=sorted(KNOWN), default=None,
                       help="the GPU whose facts SGLang's resolution runs under (default: the host's in --facts, "
                            "else a6000, CT129's cards)")
    check.add_argument("--facts", metavar="FILE",
                       help="GPU count and interconnect from a host's facts (results/<host>/facts.json of facts.py)")
    paths = check.add_mutually_exclusive_group()
    paths.add_argument("--full", dest="path", action="store_const", const="full",
                       help="run SGLang's own parser and resolution (builds its validation environment once, ~6 GB)")
    paths.add_argument("--light", dest="path", action="store_const", const="light",
                       help="only the option table exported from SGLang's parser (no SGLang install; no resolution)")
    check.set_defaults(func=cmd_check, path="auto")
    manifest = sub.add_parser("manifest", help="write the frozen manifest (files, sizes, sha256) of a weights source",
                              allow_abbrev=False)
    manifest.add_argument("source", help="hf://ORG/NAME@REVISION (a branch is resolved to its commit) or "
                                         "file:///dir on this machine")
    manifest.add_argument("--output", help="where to write it (default manifests/<org>--<name>/<commit>.json)")
    manifest.add_argument("--endpoint", help="an HF-compatible endpoint (a mirror) instead of huggingface.co")
    manifest.set_defaults(func=cmd_manifest)
    hot = sub.add_parser("token-map", help="build the hot-vocabulary draft map --speculative-token-map reads",
                         allow_abbrev=False)
    hot.add_argument("corpus", help="prompts: a text file (one a line) or .jsonl (a string, or {prompt|text: ...})")
    hot.add_argument("--model", required=True, metavar="DIR", help="the checkpoint directory whose tokenizer counts")
    hot.add_argument("--size", required=True, type=int, metavar="N", help="how many of the most frequent ids to keep")
    hot.add_argument("--output", metavar="FILE", help="where to write it (default manifests/token-maps/<model>-<N>.pt)")
    hot.add_argument("--sglang-version", help="whose validator environment counts (torch, transformers); default: "
                                              "the newest reviewed release (sglang_deploy/releases/)")
    hot.set_defaults(func=cmd_token_map)
    sglang = sub.add_parser("sglang", help="SGLang releases the tool knows (sglang_deploy/releases/)",
                            allow_abbrev=False).add_subparsers(dest="sglang_command", required=True)
    add = sglang.add_parser("add", help="derive a release's folder from its own wheel and parser, diffed against the "
                                        "nearest reviewed release (new or changed dests: unreviewed)",
                            allow_abbrev=False)
    add.add_argument("version", help="an exact SGLang release on the package index")
    add.add_argument("--check", action="store_true", help="write nothing; compare with the committed folder")
    add.add_argument("--force", action="store_true", help="write the folder again (the classes a person wrote are kept)")
    add.add_argument("--no-env", action="store_true", help="reuse the committed option table (no validator env)")
    add.set_defaults(func=cmd_sglang_add)
    proxmox = sub.add_parser("proxmox-config", help="print the Proxmox CT configuration a host needs (from its facts)",
                             allow_abbrev=False)
    proxmox.add_argument("--facts", required=True, metavar="FILE", help="results/<host>/facts.json of facts.py")
    proxmox.add_argument("--container-id", type=int, help="the CT id (for the file name and pct commands)")
    proxmox.add_argument("--gpus", type=int, help="the GPUs to pass through (default: the facts' GPU count)")
    proxmox.set_defaults(func=cmd_proxmox_config)
    add_rollout(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
