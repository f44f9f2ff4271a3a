"""Debian's nginx in front of `genworker run` processes, as deploy/nginx.conf has it, for the cluster
tests and bench/cluster.py. nginx runs as the caller's user in the foreground, with a config of its
own under `prefix`; its `location /` block is read from the deploy config, so the proxy settings
that run are the ones shipped."""

from __future__ import annotations

import getpass
import grp
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Nginx", "find_nginx", "location_block", "nginx_conf", "start_nginx"]


def find_nginx() -> str | None:
    return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file() else None)


def location_block(conf: str) -> str:
    """The `location / { ... }` block of an nginx config, braces matched."""
    start = re.search(r"^\s*location / \{", conf, re.MULTILINE)
    if start is None:
        raise ValueError("the nginx config has no `location / {` block")
    depth = 0
    for index in range(start.end() - 1, len(conf)):
        depth += {"{": 1, "}": -1}.get(conf[index], 0)
        if depth == 0:
            return conf[start.start() : index + 1]
    raise ValueError("the nginx config has unbalanced braces in `location /`")


def nginx_conf(prefix: Path, port: int, upstreams: list[int], deploy_conf: Path) -> str:
    """A config listening on 127.0.0.1:`port`, balancing the loopback `upstreams` as the deploy
    config does (`max_fails=1 fail_timeout=2s`, idle connections kept), its files under `prefix`."""
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;" for p in upstreams)
    location = location_block(deploy_conf.read_text(encoding="utf-8"))
    # as root, nginx's workers would switch to `nobody`, who may not enter a private tmp folder
    user = f"user {getpass.getuser()} {grp.getgrgid(os.getgid()).gr_name};\n" if os.geteuid() == 0 else ""
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 1024; }}
http {{
    access_log {prefix / "access.log"};
{temp}
    upstream genworker {{
{servers}
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
{location}
    }}
}}
"""


@dataclass
class Nginx:
    prefix: Path
    port: int
    popen: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def error_log(self) -> Path:
        return self.prefix / "error.log"

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            said = (self.prefix / "stderr.log").read_text(encoding="utf-8", errors="replace")
            logged = self.error_log.read_text(encoding="utf-8", errors="replace") if self.error_log.exists() else ""
            raise AssertionError(f"nginx exited with {self.popen.returncode}: {said}{logged}")

    def stop(self) -> None:
        """nginx's graceful stop (SIGQUIT); killed if it has not stopped within a minute."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGQUIT)
            try:
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(60)


def start_nginx(binary: str, prefix: Path, port: int, upstreams: list[int], deploy_conf: Path) -> Nginx:
    """nginx in the foreground with `nginx_conf`; returned as it starts (poll `url` for when it answers)."""
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_conf(prefix, port, upstreams, deploy_conf), encoding="utf-8")
    with (prefix / "stderr.log").open("wb") as sink:  # the child keeps its own copy of the handle
        popen = subprocess.Popen(
            [binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log"), "-g", "daemon off;"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Nginx(prefix, port, popen)
