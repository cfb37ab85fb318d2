"""Start SGLang's router (sglang_router.launch_router) with the workers' API key from systemd's credential.

Runs in the router's venv on the host: `router_launch.py ARGS...` takes launch_router's own arguments; the key
is read from $CREDENTIALS_DIRECTORY/workers-api-key (LoadCredential= in the unit), so it never appears on a
command line (world-readable in /proc) or in the unit.
"""

import os
import sys

from sglang_router.launch_router import launch_router, parse_router_args


def main(argv):
    if "--api-key" in argv:
        sys.exit("router_launch.py: --api-key is refused on the command line; the key comes from the credential")
    args = parse_router_args(argv)
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if directory:
        with open(os.path.join(directory, "workers-api-key")) as f:
            args.api_key = f.read().strip() or None
    launch_router(args)


if __name__ == "__main__":
    main(sys.argv[1:])
