"""A small DNS responder for the real test node: cluster names answered from Endpoints.

Debian bookworm has no CoreDNS, so pods of the real node (:mod:`tests.e2e.infra.kube_node`)
ask this server, bound to their bridge's gateway (kubelet ``--cluster-dns``). It answers A
queries for

* ``<service>.<namespace>.svc.<domain>``: the ready addresses of the Service's Endpoints
  (headless Services, as a real cluster's DNS does; there is no kube-proxy here, so a
  ClusterIP would lead nowhere and the endpoint addresses are returned instead);
* ``<hostname>.<service>.<namespace>.svc.<domain>``: the endpoint address whose ``hostname``
  matches (a pod with ``hostname`` + ``subdomain``, as tether's replicas use);
* ``a-b-c-d.<namespace>.pod.<domain>``: that pod address.

Everything else gets NXDOMAIN (pods cannot reach any outside resolver here); other query
types of a known name get an empty answer. Endpoints are read from the API at most every
0.2 s.

Run as ``python -m tests.e2e.infra.kube_dns --bind IP --kubeconfig K --node-dir D``
(``--node-dir`` only marks the process as the node's, for reaping).
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

TTL = 1
QTYPE_A = 1


def parse_query(packet: bytes) -> tuple[int, int, str, int, bytes] | None:
    """Splits a DNS query into (id, flags, lower-case name, qtype, raw question)."""
    if len(packet) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount < 1:
        return None
    labels, pos = [], 12
    while pos < len(packet):
        length = packet[pos]
        pos += 1
        if length == 0:
            break
        if length & 0xC0:
            return None  # no compression in questions
        labels.append(packet[pos : pos + length].decode("ascii", "replace"))
        pos += length
    if pos + 4 > len(packet):
        return None
    qtype = struct.unpack("!H", packet[pos : pos + 2])[0]
    question = packet[12 : pos + 4]
    return qid, flags, ".".join(labels).lower(), qtype, question


def build_reply(
    qid: int, flags: int, question: bytes, qtype: int, addrs: list[str] | None
) -> bytes:
    """A response: NXDOMAIN when ``addrs`` is None, else A records (for A queries)."""
    rcode = 3 if addrs is None else 0
    answers = [a for a in addrs or [] if qtype == QTYPE_A]
    # QR, opcode copied, AA, RD copied, RA.
    out_flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
    header = struct.pack("!HHHHHH", qid, out_flags, 1, len(answers), 0, 0)
    body = b"".join(
        struct.pack("!HHHIH", 0xC00C, QTYPE_A, 1, TTL, 4) + socket.inet_aton(a) for a in answers
    )
    return header + question + body


class EndpointsIndex:
    """Name -> addresses, rebuilt from the API's Endpoints at most every ``max_age`` s."""

    def __init__(self, api: Any, domain: str, max_age: float = 0.2) -> None:
        """Args: api: a ``kubernetes.client.CoreV1Api``; domain: the cluster domain."""
        self.api = api
        self.domain = domain.strip(".").lower()
        self.max_age = max_age
        self._built = -1e9
        self._names: dict[str, list[str]] = {}

    def _rebuild(self) -> None:
        names: dict[str, list[str]] = {}
        for ep in self.api.list_endpoints_for_all_namespaces().items:
            svc = f"{ep.metadata.name}.{ep.metadata.namespace}.svc.{self.domain}".lower()
            names.setdefault(svc, [])
            for subset in ep.subsets or []:
                for addr in subset.addresses or []:
                    names[svc].append(addr.ip)
                    if addr.hostname:
                        names.setdefault(f"{addr.hostname.lower()}.{svc}", []).append(addr.ip)
        self._names = names
        self._built = time.monotonic()

    def lookup(self, name: str) -> list[str] | None:
        """The addresses of ``name``, or None when the name does not exist."""
        name = name.rstrip(".").lower()
        pod_suffix = f".pod.{self.domain}"
        if name.endswith(pod_suffix):
            dashed = name[: -len(pod_suffix)].split(".")[0]
            parts = dashed.split("-")
            if len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts):
                return [".".join(parts)]
            return None
        if time.monotonic() - self._built > self.max_age:
            self._rebuild()
        return self._names.get(name)


def serve(bind: str, port: int, index: EndpointsIndex) -> None:
    """Answers queries on ``bind:port`` (UDP) until killed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((bind, port))
    print(f"kube_dns: serving {bind}:{port} for *.{index.domain}", flush=True)
    while True:
        packet, peer = sock.recvfrom(4096)
        query = parse_query(packet)
        if query is None:
            continue
        qid, flags, name, qtype, question = query
        try:
            addrs = index.lookup(name)
        except Exception as err:  # API hiccup: SERVFAIL, the client retries
            print(f"kube_dns: lookup {name}: {err!r}", flush=True)
            header = struct.pack("!HHHHHH", qid, 0x8000 | (flags & 0x7900) | 0x0082, 1, 0, 0, 0)
            sock.sendto(header + question, peer)
            continue
        sock.sendto(build_reply(qid, flags, question, qtype, addrs), peer)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--domain", default="cluster.local")
    parser.add_argument("--node-dir", default="")
    args = parser.parse_args(argv)
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    serve(args.bind, args.port, EndpointsIndex(api, args.domain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
