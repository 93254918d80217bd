#!/usr/bin/env python3
"""make_oci_image: an OCI image archive (oci-layout, as `ctr image import` reads it) named NAME whose
one layer is an empty root file system: the mount points a container needs and the usrmerge links
(bin, sbin, lib, lib64 into usr/). A container made from it sees the host's programs only through
bind mounts (/usr, /etc). Used by containerd_test.sh, whose `ctr containers checkpoint/restore`
need a container made from an image.

  make_oci_image.py OUT.tar NAME
"""

import hashlib
import io
import json
import platform
import sys
import tarfile

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def layer_tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name, kind, target=""):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = 0o1777 if name == "tmp" else 0o755
            info.linkname = target
            tar.addfile(info)
        for d in ("dev", "etc", "proc", "root", "run", "sys", "tmp", "usr", "usr/bin", "usr/sbin", "usr/lib",
                  "usr/lib64"):
            add(d, tarfile.DIRTYPE)
        for link in ("bin", "sbin", "lib", "lib64"):
            add(link, tarfile.SYMTYPE, "usr/" + link)
    return buf.getvalue()


def make_image(out, name):
    blobs = {}

    def blob(media_type, data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer = layer_tar()
    config = json.dumps({
        "architecture": ARCH, "os": "linux",
        "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob("application/vnd.oci.image.config.v1+json", config),
        "layers": [blob("application/vnd.oci.image.layer.v1.tar", layer)],
    }).encode()
    entry = blob("application/vnd.oci.image.manifest.v1+json", manifest)
    entry["platform"] = {"architecture": ARCH, "os": "linux"}
    entry["annotations"] = {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": [entry]}).encode()

    with tarfile.open(out, "w") as tar:
        def add(path, data):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", index)
        for digest, data in blobs.items():
            add("blobs/sha256/" + digest.split(":", 1)[1], data)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    make_image(sys.argv[1], sys.argv[2])
