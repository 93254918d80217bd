#!/usr/bin/env python3
"""make_bundle: an OCI bundle (runc spec) whose process runs ARGS with stdout and stderr appended to
LOG (a file under SHARED, which the container sees at the same path). Its root file system is the
host's /usr and /etc bound read-only (and the usrmerge links), the repository REPO read-only and
SHARED read-write; /tmp is a tmpfs. The process gets PATH, HOME and, from this environment,
SIMGPU_DEVICES, SIMGPU_MEMORY and GCR_QUIET. The container has runc spec's own pid, network, ipc,
uts and mount namespaces. Used by the container tests (lib.sh) and bench/migrate_bench.py.

  make_bundle.py DIR LOG SHARED REPO ARGS...
"""

import json
import os
import shlex
import subprocess
import sys


def make_bundle(d, log, shared, repo, args):
    os.makedirs(os.path.join(d, "rootfs"), exist_ok=True)
    subprocess.run(["runc", "spec"], cwd=d, check=True)
    spec = json.load(open(os.path.join(d, "config.json")))
    spec["root"] = {"path": "rootfs", "readonly": False}
    cmd = "exec " + " ".join(shlex.quote(a) for a in args) + " < /dev/null >> " + shlex.quote(log) + " 2>&1"
    p = spec["process"]
    p["terminal"] = False
    p["args"] = ["/bin/sh", "-c", cmd]
    p["env"] = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"] + [
        f"{k}={os.environ[k]}" for k in ("SIMGPU_DEVICES", "SIMGPU_MEMORY", "GCR_QUIET") if k in os.environ]
    # /tmp first: a bind under /tmp (a checkout there) must come after it, or the tmpfs hides it.
    spec["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]})

    def bind(src, ro=True):
        spec["mounts"].append({"destination": src, "type": "bind", "source": src,
                               "options": ["rbind", "ro" if ro else "rw"]})
    for top in ("/usr", "/etc"):
        bind(top)
    for link in ("/bin", "/sbin", "/lib", "/lib64"):  # usrmerge symlinks on the host
        if os.path.islink(link):
            os.symlink(os.readlink(link), os.path.join(d, "rootfs", link.lstrip("/")))
        elif os.path.isdir(link):
            bind(link)
    bind(repo)
    bind(shared, ro=False)
    json.dump(spec, open(os.path.join(d, "config.json"), "w"), indent=1)


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    make_bundle(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
